"""The boundary-strategy interface and registry (docs/design.md §5).

A strategy maps encoder vectors (and the raw bytes) to a BoundaryOutput. The model, the
objective and the tools never know which strategy runs: they see decisions, probabilities,
log-probabilities and an auxiliary loss. How tokens are made from the bytes and given back is
not the strategy's: it names a chunker (`chunker`, learntok.nn.chunkers: selection by default,
dynamic pooling's segment means, H-Net's EMA de-chunking), which the model holds and calls.

Shapes: B batch, T bytes (BOS at t = 0), S tokens, D width.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from torch import nn

from learntok.data.vocab import decision_mask, is_byte
from learntok.util.errors import ConfigError
from learntok.nn.config import ModelConfig
from learntok.util.runtime import MODEL_STATE


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


@dataclass(frozen=True)
class RateControl:
    """Causal rate control at inference (docs/rate.md, "Online rate control"): an integral
    controller on each row's running rate, training's law (`LearnedPolicy.adapt_rate`) applied
    after every decision that counts (`decision_mask`) instead of after every optimizer step,

        delta <- delta - g (a[t] - rho),   delta = 0 at each row's BOS,

    delta moving the strategy's rate knob (added to its offset) for the next byte. The gain g is
    `warmup_gain` for a row's first `warmup_bytes` counted bytes (to find quickly the offset this
    text needs, when it is not the calibrated one) and `gain` after. When the gain drops, the
    offset's swing after a boundary shrinks from G (1 - rho) to g (1 - rho); where the policy
    cuts sharply, the offset's mean level then rises by up to half the difference, paid for in
    missed boundaries, so delta takes `settle` times that difference at the switch: a half where
    decisions are deterministic at a logit's gain (greedy cuts), a quarter where they are drawn
    or where a threshold's score, wider than its gain, smooths the cut (`for_rule`; measured in
    docs/rate.md).
    Because g is piecewise constant, delta is a function of three integer counts (the state:
    counted bytes `n`, boundaries within the warm-up `warm`, boundaries after it `late`), and
    `offset` computes it from them: the scan, generation's step and a prompt's prefill agree
    exactly. A row's boundary count misses rho n by O(delta / g) whatever its length, so the
    reached rate misses rho by O(1 / (g n)) on any text."""

    target: float  # rho: the requested boundaries per counted byte
    gain: float = 1.0  # g after the warm-up: logit units per unit rate error per byte (docs/rate.md)
    warmup_gain: float = 4.0  # g during a row's first warmup_bytes counted bytes
    warmup_bytes: int = 32  # counted bytes of each row under warmup_gain
    settle: float = 0.5  # fraction of (warmup_gain - gain) (1 - rho) added to delta at the end of the warm-up

    @classmethod
    def for_rule(cls, target: float, sampled: bool, unit: float = 1.0) -> "RateControl":
        """The defaults for deterministic decisions, or drawn ones (`sampled`), with both gains in
        the knob's units: `unit` (the strategy's `rate_gain_unit`) knob units count as one logit.
        The settling step is a half only where the controller makes the cut sharp: deterministic
        decisions at a full logit's gain. Draws, or a threshold's score of wider spread than its
        gain (unit < 1), smooth the cut, and take a quarter (measured in docs/rate.md)."""
        sharp = not sampled and unit >= 1.0
        return cls(target, gain=unit * cls.gain, warmup_gain=unit * cls.warmup_gain, settle=0.5 if sharp else 0.25)

    def init_state(self, batch: int, device: torch.device) -> dict[str, torch.Tensor]:
        zeros = torch.zeros(batch, device=device)
        return {"n": zeros, "warm": zeros, "late": zeros}

    def offset(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """delta (any shape of the counts) from the counts: the sum of -g (a - rho) over them."""
        n, warm, late = state["n"], state["warm"], state["late"]
        n_warm = n.clamp(max=float(self.warmup_bytes))
        step = self.settle * (self.warmup_gain - self.gain) * (1.0 - self.target) * (n >= self.warmup_bytes).float()
        return step - (
            self.warmup_gain * (warm - self.target * n_warm) + self.gain * (late - self.target * (n - n_warm))
        )

    def update(self, state: dict[str, torch.Tensor], a: torch.Tensor, counted: torch.Tensor) -> dict[str, torch.Tensor]:
        """The counts after deciding a (B,) float 0/1 at bytes that count where counted (B,) is 1."""
        in_warmup = (state["n"] < self.warmup_bytes).float()
        return {
            "n": state["n"] + counted,
            "warm": state["warm"] + a * counted * in_warmup,
            "late": state["late"] + a * counted * (1.0 - in_warmup),
        }

    def _hits(self, a: torch.Tensor, counted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, T) each: counted bytes before t, boundaries at t within the warm-up and after it."""
        n = counted.cumsum(1) - counted  # exact integers
        hit = a * counted
        warm = hit * (n < self.warmup_bytes).float()
        return n, warm, hit - warm

    def counts_before(self, a: torch.Tensor, counted: torch.Tensor) -> dict[str, torch.Tensor]:
        """The state before each byte, (B, T) each, from decisions a and counted (B, T) float."""
        n, warm, late = self._hits(a, counted)
        return {"n": n, "warm": warm.cumsum(1) - warm, "late": late.cumsum(1) - late}

    def state_after(self, a: torch.Tensor, counted: torch.Tensor) -> dict[str, torch.Tensor]:
        """The state after decisions a (B, T) at bytes counted (B, T) float (a prompt's prefill)."""
        _, warm, late = self._hits(a, counted)
        return {"n": counted.sum(1), "warm": warm.sum(1), "late": late.sum(1)}


def no_rate_knob(name: str) -> ConfigError:
    """What a rate asked of strategy `name`, which has no knob, says."""
    return ConfigError(
        f"strategy {name!r} has no inference-time rate knob (its rate is fixed when it is "
        "trained, e.g. bpe's vocabulary): train it at this rate instead (compare --rates)"
    )


class BoundaryStrategy(nn.Module):
    """Base class. Subclasses implement `forward`; `has_policy` says whether log_prob is a
    real score-function term."""

    has_policy: bool = False  # log_prob is a score-function term (the objective's L_pi acts on it)
    has_reference: bool = False  # `reference_starts` gives the strategy's own reference boundaries
    causal: bool = True  # a[t] reads bytes <= t only (False: it sees the whole sequence; no generation)
    reads_early_head: bool = False  # decides from the early-exit head's logits, so that head must train
    # How tokens are made from the bytes and given back (learntok.nn.chunkers.CHUNKERS): the model
    # builds this chunker beside the strategy (AUNet.chunker) and generation keeps its state.
    chunker: str = "select"
    Config: type = StrategyConfig  # the strategy's own options ([strategy] section), set by `register`
    # Inference-time rate control (learntok.run.rate, docs/rate.md): the knob is read and set through
    # `rate_knob` / `set_rate_knob` (RuleKnob, OffsetKnob); the base class has none (bpe's rate is
    # its vocabulary).
    knob_name: str | None = None  # what the knob is, in messages and RateSetting.knob: "rule", "offset"
    rate_offset_range: tuple[float, float] = (0.0, 0.0)  # the bracket a calibration bisects an offset in
    online_rate: bool = False  # the strategy can run under online rate control (`rate_control`)
    # What online control's gain of 1 moves the knob by, in the knob's units: 1 for the learned
    # policy's logit, whose scores spread over +-6; a threshold whose score spreads over about a
    # unit (entropy's nats, H-Net's routing logit) takes 0.1, else the controller, not the score,
    # places the cut (docs/rate.md, "Gain").
    rate_gain_unit: float = 1.0
    samples: bool = False  # its decisions are drawn unless `greedy` (else deterministic)
    conditionable: bool = False  # it can be trained rate-conditioned (model.rate_conditioned, docs/rate.md)
    rate_control: RateControl | None = None  # online rate control at inference (set by learntok.run.rate; None: off)

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
    def own_weights(cls, cfg: ModelConfig) -> int:
        """About how many weights the strategy adds to the model, from the config alone (nothing
        built): the size checks count them with the backbone's (learntok.model.sizes). Strategies
        whose options grow their weights say so; small fixed ones are left out."""
        return 0

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.opts = self.Config(**cfg.strategy)  # validated by the config loader; checked again here
        # rate-conditioned policies: the target rates they are told (its `.rate`: what --rate sets); None elsewhere
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

    # Online rate control's part of the decoding state (strategies with `online_rate` add it to theirs).
    def control_init(self, batch: int, device: torch.device) -> dict:
        """{"control": the controller's counts at a row's start}, or {} when control is off."""
        c = self.rate_control
        return {} if c is None else {"control": c.init_state(batch, device)}

    def control_prefill(self, x: torch.Tensor, decisions: torch.Tensor) -> dict:
        """The controller's part after a prompt x (B, T) read with `decisions` (B, T)."""
        c = self.rate_control
        return {} if c is None else {"control": c.state_after(decisions.float(), decision_mask(x).float())}

    def control_step(self, state: dict, a: torch.Tensor, x: torch.Tensor, t: int) -> dict:
        """The controller's part after deciding a (B,) at the new bytes x (B,), position t."""
        c = self.rate_control
        return {} if c is None else {"control": c.update(state["control"], a, (is_byte(x) & (t >= 1)).float())}

    # The rate knob (learntok.run.rate): strategies with one override the first three (RuleKnob, OffsetKnob).
    def rate_knob(self) -> float | None:
        """The knob's current setting (a rule's rate, an offset); None: the strategy has no knob."""
        return None

    def set_rate_knob(self, value: float) -> None:
        """Put the knob at `value` (a setting `rate_knob` gave, or a calibration's)."""
        raise no_rate_knob(self.cfg.boundary)

    def exact_knob(self, target: float) -> float | None:
        """The setting that places rate `target` exactly with no text read (a rule: the rate
        itself); None: an offset, calibrated on held-out text (bisection in rate_offset_range)."""
        return None

    @contextlib.contextmanager
    def rate_knob_kept(self) -> Iterator[None]:
        """The knob, a rate-conditioned policy's condition and online control restored after the
        block, whatever it sets; the block holds runtime.MODEL_STATE, so no other thread runs the
        model at the rate it sets."""
        with MODEL_STATE:
            knob, control = self.rate_knob(), self.rate_control
            condition = self.condition.rate.clone() if self.condition is not None else None
            try:
                yield
            finally:
                if knob is not None:
                    self.set_rate_knob(knob)
                if condition is not None:
                    self.condition.rate.copy_(condition)
                self.rate_control = control

    def adapt_rate(self, rate: torch.Tensor, gain: float) -> None:
        """Integral control of the boundary rate after an optimizer step (learned policy only)."""

    def controller_sums(self) -> torch.Tensor | None:
        """The rate controller's sums since its last step, to add over ranks before `adapt_rate`
        (a rate-conditioned policy's per-target errors); None when it reads only the batch rate."""
        return None

    def init_weights(self, generator: torch.Generator | None = None) -> None:
        """Initialise the strategy's parameters from `generator` (its own, seeded apart from the
        backbone's, so that adding a strategy never shifts the backbone's initial weights). None by
        default."""


class RuleKnob:
    """The knob of a rule that places its rate exactly (uniform, fixed): `rule_rate`, rho* unless
    set; a target needs no calibration. A mixin, before the strategy's base class."""

    knob_name = "rule"
    rule_rate: float  # the rate the rule places

    def rate_knob(self) -> float:
        return self.rule_rate

    def set_rate_knob(self, value: float) -> None:
        self.rule_rate = value

    def exact_knob(self, target: float) -> float:
        return target


class OffsetKnob:
    """The knob of a strategy whose rate rises with a scalar offset: `rate_offset` (a 0-d tensor;
    a logit offset, a threshold), calibrated for a target by bisection in `rate_offset_range`
    (learntok.run.rate.calibrate). A mixin, before the strategy's base class."""

    knob_name = "offset"
    rate_offset: torch.Tensor  # () the knob; raising it raises the rate

    def rate_knob(self) -> float:
        return float(self.rate_offset)

    def set_rate_knob(self, value: float) -> None:
        self.rate_offset.fill_(value)


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


def build_strategy(cfg: ModelConfig) -> BoundaryStrategy:
    return strategy_class(cfg.boundary)(cfg)
