"""The boundary-strategy interface and registry (docs/design.md §5).

A strategy maps encoder vectors (and the raw bytes) to a BoundaryOutput. The model, the
objective and the tools never know which strategy runs: they see decisions, probabilities,
log-probabilities and an auxiliary loss. How tokens are made from the bytes and given back is
not the strategy's: it names a chunker (`chunker`, learntok.nn.chunkers: selection by default,
dynamic pooling's segment means, H-Net's EMA de-chunking), which the model holds and calls. How a strategy's boundary
rate is read, set and controlled is learntok.boundaries.rate's.

Shapes: B batch, T bytes (BOS at t = 0), S tokens, D width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import torch
from torch import nn

from learntok.boundaries.rate import RateDial


class Backbone(Protocol):
    """What a strategy reads of the model's config (learntok.model.config.ModelConfig, which the
    model builds it from): the strategy sits below the model, so it names these fields, not the class."""

    boundary: str  # the strategy's registry key
    byte_width: int  # width of the encoder vectors it decides from
    init_std: float  # std of the normal init of its weights
    target_rate: float  # rho*: target boundaries per byte
    rate_conditioned: bool  # told a target rate per row (learntok.boundaries.rate.RateCondition)
    rate_range: tuple[float, float]  # the conditioned targets' range
    rows_per_rate: int  # rows of a micro-batch sharing one drawn target
    strategy: dict[str, Any]  # its own options ([strategy])


@dataclass
class StrategyConfig:
    """Options of a strategy that has none. A strategy with options registers its own dataclass
    (`@register("name", config=MyConfig)`); the run config's [strategy] section is checked
    against it at start-up."""


@dataclass
class BoundaryOutput:
    decisions: torch.Tensor  # (B, T) float 0/1; decisions[:, 0] == 1 (BOS)
    logits: torch.Tensor  # (B, T) fp32 policy logits l_t (0 where the strategy has none)
    probs: torch.Tensor  # (B, T) fp32 p_t = P(a_t = 1) (the decision itself where deterministic)
    log_prob: torch.Tensor  # (B, T) fp32 log pi(a_t | x, a_<t) of the decisions used; 0 at BOS / no policy
    aux_loss: torch.Tensor  # () fp32 the strategy's own loss, already weighted (0 for most)
    # (B, T) fp32 differentiable relaxed decisions (nawrot's, which the mean chunker puts inside its
    # pooling weights by a straight-through estimator); None elsewhere
    relaxed: torch.Tensor | None = None
    # (B,) each row's target rate (rate-conditioned training, docs/rate.md); None: the model's target_rate
    target: torch.Tensor | None = None


@dataclass
class PolicyTerms:
    """The learned logit's terms per byte, for re-deciding at any offset (segment's HTML page):
    l[t] = softcap(base[t] + sum_k mix[t, k-1] a[t-k] + offset, cap)."""

    base: torch.Tensor  # (B, T) fp32 s v[t][w-1]
    mix: torch.Tensor  # (B, T, W-1) fp32 s v[t][w-1-k], k = 1..w-1
    offset: float  # logit(rho*) + rate_bias
    cap: float  # the soft cap


class BoundaryStrategy(nn.Module, RateDial):
    """Base class. Subclasses implement `forward`; `has_policy` says whether log_prob is a
    real score-function term. Its rate dial (knob, online control, condition) is `RateDial`'s
    (learntok.boundaries.rate)."""

    has_policy: bool = False  # log_prob is a score-function term (the objective's L_pi acts on it)
    has_reference: bool = False  # `reference_starts` gives the strategy's own reference boundaries
    causal: bool = True  # a[t] reads bytes <= t only (False: it sees the whole sequence; no generation)
    reads_early_head: bool = False  # decides from the early-exit head's logits, so that head must train
    # How tokens are made from the bytes and given back (learntok.nn.chunkers.CHUNKERS): the model
    # builds this chunker beside the strategy (AUNet.chunker) and generation keeps its state.
    chunker: str = "select"
    Config: type = StrategyConfig  # the strategy's own options ([strategy] section), set by `register`

    def _apply(self, fn, recurse: bool = True):
        """Every tensor change a module makes (`.to`, `.cuda`, `.half`) goes through here: moves
        apply as usual, but the strategy's floating weights and buffers stay fp32 whatever dtype
        the model is cast to, so that its decisions (a logit against a threshold, a cosine, a
        rate controller's integral) are computed in fp32 inside a bf16 or fp16 model, as H-Net and
        BLT keep their routers; the hidden states it reads are cast up where it reads them."""
        super()._apply(fn, recurse)
        for module in self.modules():
            for tensors in (module._parameters, module._buffers):
                for key, t in tensors.items():
                    if t is not None and t.is_floating_point() and t.dtype != torch.float32:
                        if isinstance(t, nn.Parameter):
                            t.data = t.data.float()
                        else:
                            tensors[key] = t.float()
        return self

    @classmethod
    def own_weights(cls, cfg: Backbone) -> int:
        """About how many weights the strategy adds to the model, from the config alone (nothing
        built): the size checks count them with the backbone's (learntok.model.sizes). Strategies
        whose options grow their weights say so; small fixed ones are left out."""
        return 0

    def __init__(self, cfg: Backbone):
        super().__init__()
        self.cfg = cfg
        self.opts = self.Config(**cfg.strategy)  # validated by the config loader; checked again here
        # rate-conditioned policies: the target rates they are told (RateDial.set_condition); None elsewhere
        self.condition: nn.Module | None = None

    def forward(
        self,
        h: torch.Tensor,  # (B, T, D) encoder output
        x: torch.Tensor,  # (B, T) byte ids
        boundaries: torch.Tensor | None = None,  # (B, T) prescribed decisions, or None to decide
        early_logits: torch.Tensor | None = None,  # (B, T, V) early-exit head logits
        greedy: bool = False,  # decide p > 0.5 instead of sampling
    ) -> BoundaryOutput:
        raise NotImplementedError

    def terms(self, h: torch.Tensor) -> PolicyTerms:
        """The policy logit's terms for encoder vectors h (B, T, D), to re-decide at any offset
        (segment's HTML page). Strategies with a policy (`has_policy`) implement it."""
        raise NotImplementedError(f"strategy {type(self).__name__} has no policy logit")

    def fit(self, documents: list[bytes]) -> dict:
        """Fit the strategy to a bounded sample of the run's training documents, once, before
        step 0 of a fresh run (BPE trains its tokenizer here). Returns figures to report (e.g. the
        rate reached). No-op by default."""
        return {}

    def reference_starts(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T) bool: the strategy's own reference boundaries for boundary-quality scores (when
        `has_reference`), e.g. the bpe strategy's token starts."""
        raise NotImplementedError(f"strategy {type(self).__name__} has no reference boundaries")

    # Incremental decoding (generation): one byte at a time, with the strategy's own state.
    def init_state(self, batch: int, device: torch.device) -> dict:
        """Decoding state for `step` (e.g. the last w-1 decisions). Empty by default."""
        return {}

    def prefill_state(
        self, h: torch.Tensor, x: torch.Tensor, decisions: torch.Tensor, early_logits: torch.Tensor | None = None
    ) -> dict:
        """The `step` state after reading a whole prompt: h (B, T, D), x (B, T), the decisions
        made (B, T), early_logits (B, T, V). Default: replay `step` with those decisions;
        strategies may override it with a vectorised equivalent."""
        state = self.init_state(x.size(0), x.device)
        for t in range(x.size(1)):
            early = None if early_logits is None else early_logits[:, t]
            _, _, state = self.step(h[:, t], x[:, t], t, state, early, boundaries=decisions[:, t])
        return state

    def step(
        self,
        h: torch.Tensor,  # (B, D) encoder output at the new byte t
        x: torch.Tensor,  # (B,) the new byte ids
        t: int,  # its position (0 = BOS)
        state: dict,
        early_logits: torch.Tensor | None = None,  # (B, V) early head at t
        greedy: bool = False,
        boundaries: torch.Tensor | None = None,  # (B,) prescribed a[t] (teacher forcing), or None to decide
    ) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """Decide a[t] causally: returns decisions (B,) float 0/1, probs (B,), new state.
        Must agree with `forward` given the same random draws; with `boundaries` it returns
        them and advances the state as if it had decided them."""
        raise NotImplementedError(f"strategy {type(self).__name__} has no incremental step")

    def init_weights(self, generator: torch.Generator | None = None) -> None:
        """Initialise the strategy's parameters from `generator` (its own, seeded apart from the
        backbone's, so that adding a strategy never shifts the backbone's initial weights). None by
        default."""


_REGISTRY: dict[str, type[BoundaryStrategy]] = {}


def register(name: str, config: type = StrategyConfig) -> Callable[[type[BoundaryStrategy]], type[BoundaryStrategy]]:
    """Class decorator: make a strategy available as model.boundary=`name`, with options `config`."""

    def wrap(cls: type[BoundaryStrategy]) -> type[BoundaryStrategy]:
        _REGISTRY[name] = cls
        cls.name, cls.Config = name, config
        return cls

    return wrap


def strategy_names() -> list[str]:
    return sorted(_REGISTRY)


def strategy_class(name: str) -> type[BoundaryStrategy]:
    if name not in _REGISTRY:
        raise ValueError(f"unknown boundary strategy {name!r}; known: {', '.join(strategy_names())}")
    return _REGISTRY[name]


def build_strategy(cfg: Backbone) -> BoundaryStrategy:
    return strategy_class(cfg.boundary)(cfg)
