"""Strategies with no learned policy (DESIGN §5): uniform random and fixed-stride boundaries.

Shapes: B batch, T bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from learntok.boundaries.base import BoundaryOutput, BoundaryStrategy, fixed_output, register
from learntok.data.vocab import BOS, is_byte


class StatelessStrategy(BoundaryStrategy):
    """A strategy whose decision at a new byte needs no decoding state: `decide_step`."""

    def decide_step(self, x: torch.Tensor, t: int) -> torch.Tensor:
        """a[t] (B,) float 0/1 of the new bytes x (B,) at position t."""
        raise NotImplementedError

    def prefill_state(self, h, x, decisions, early_logits=None) -> dict:
        return {}

    def step(self, h, x, t, state, early_logits=None, greedy=False, boundaries=None):
        if boundaries is None:
            boundaries = self.decide_step(x, t)
        return boundaries.float(), boundaries.float(), state


@register("uniform")
class UniformBoundaries(StatelessStrategy):
    """Exactly round(rho* (T-1)) boundaries at random positions among bytes 1..T-1 of each
    sequence (BOS is always a boundary on top). The control for the learned policy: same rate,
    no information. Prescribed boundaries pass through."""

    def forward(self, h, x, boundaries=None, early_logits=None, greedy=False) -> BoundaryOutput:
        if boundaries is None:
            B, T = x.shape
            n = round(self.cfg.target_rate * (T - 1))
            keys = torch.rand(B, T - 1, device=x.device)         # (B, T-1) random ranks
            picked = keys.argsort(dim=1)[:, :n]                  # (B, n) positions - 1
            boundaries = torch.zeros(B, T, device=x.device).scatter(1, picked + 1, 1.0)
        return fixed_output(boundaries)

    # Incremental decoding cannot place exactly rho* T boundaries in a sequence of unknown
    # length: each new byte is a boundary with probability rho*, independently (same rate).
    def decide_step(self, x, t):
        draw = torch.rand(x.shape, device=x.device) < self.cfg.target_rate
        return torch.ones(x.shape, device=x.device) if t == 0 else draw.float()


@register("fixed")
class FixedBoundaries(StatelessStrategy):
    """A boundary every round(1/rho*) bytes, counting from BOS."""

    def forward(self, h, x, boundaries=None, early_logits=None, greedy=False) -> BoundaryOutput:
        if boundaries is None:
            stride = max(1, round(1.0 / self.cfg.target_rate))
            t = torch.arange(x.size(1), device=x.device)
            boundaries = (t % stride == 0).float().expand(x.shape).clone()  # (B, T); fixed_output writes BOS in place
        return fixed_output(boundaries)

    def decide_step(self, x, t):
        stride = max(1, round(1.0 / self.cfg.target_rate))
        return torch.full(x.shape, float(t % stride == 0), device=x.device)


def is_wordlike(x: torch.Tensor) -> torch.Tensor:
    """SpaceByte's word bytes: ASCII letters, digits and UTF-8 continuation bytes (0x80-0xBF).
    Anything else (space, punctuation, UTF-8 lead bytes, BOS/EOS/PAD) is "space-like"."""
    letter = ((x >= 65) & (x <= 90)) | ((x >= 97) & (x <= 122))
    digit = (x >= 48) & (x <= 57)
    continuation = (x >= 0x80) & (x <= 0xBF)
    return letter | digit | continuation


def whitespace_boundaries(x: torch.Tensor) -> torch.Tensor:
    """SpaceByte's rule (Slagle 2024): a boundary at a space-like byte that follows a word byte.
    x (B, T) ids -> (B, T) float 0/1 with a[:, 0] = 1. Causal: a[t] reads x[t-1] and x[t] only."""
    word = is_wordlike(x)
    a = ~word[:, 1:] & word[:, :-1]                              # (B, T-1): decision for t = 1..T-1
    return torch.cat([torch.ones_like(x[:, :1], dtype=torch.bool), a], dim=1).float()


@register("whitespace")
class WhitespaceBoundaries(BoundaryStrategy):
    """Word-like tokens from a fixed byte rule (SpaceByte's): the token is the space-like byte
    that ends a word and the next word's bytes read it. The rate is whatever the text gives
    (about 0.2 for English prose), not rho*."""

    def forward(self, h, x, boundaries=None, early_logits=None, greedy=False) -> BoundaryOutput:
        return fixed_output(whitespace_boundaries(x) if boundaries is None else boundaries)

    # Incremental decoding: the state is the previous byte.
    def init_state(self, batch, device) -> dict:
        return {"prev": torch.full((batch,), BOS, device=device)}

    def prefill_state(self, h, x, decisions, early_logits=None) -> dict:
        return {"prev": x[:, -1]}

    def step(self, h, x, t, state, early_logits=None, greedy=False, boundaries=None):
        if boundaries is None:
            rule = whitespace_boundaries(torch.stack([state["prev"], x], dim=1))[:, 1]  # (B,) decision for x
            boundaries = torch.ones_like(rule) if t == 0 else rule
        return boundaries.float(), boundaries.float(), {"prev": x}


def next_byte_entropy(early_logits: torch.Tensor) -> torch.Tensor:
    """H[t] = entropy (nats, fp32) of the early head's distribution over the byte after t.
    (B, T, V) -> (B, T)."""
    logp = torch.log_softmax(early_logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def entropy_boundaries(entropy: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """BLT's global-threshold rule: byte t starts a token when H[t-1], the uncertainty about
    byte t given bytes < t, exceeds the threshold. (B, T) -> (B, T) float, a[:, 0] = 1."""
    a = (entropy[:, :-1] > threshold).float()                    # (B, T-1): decision for t = 1..T-1
    return torch.cat([torch.ones_like(a[:, :1]), a], dim=1)


@dataclass
class EntropyConfig:
    gain: float = 2.0  # threshold step (nats) per unit rate error per training step


@register("entropy", config=EntropyConfig)
class EntropyBoundaries(BoundaryStrategy):
    """Boundaries where the early-exit head is unsure of the next byte (BLT, Pagnoni et al. 2024).

    Decision at t uses H[t-1] (the early head at t-1 predicting byte t), so it reads bytes < t
    only. The threshold tracks the (1 - rho*) quantile of H causally: the first training batch
    sets it to that batch's quantile; after each later training forward it moves by
    strategy.gain * (rate - rho*), where rate is the fraction of the batch's real bytes above
    the threshold (Robbins-Monro quantile tracking: the same integral control that holds the
    learned policy's rate). A forward decides with the threshold from *earlier* batches, never
    with a quantile over its own (future) bytes. An EMA of past quantiles lags while the early
    head is learning fast and its entropy falls (the rate then collapses toward 0); feedback on
    the realised rate does not. Before the first update the threshold is 0 (every byte a
    boundary). No gradient: entropy is detached."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("thr", torch.zeros(()))              # the threshold on H, nats
        self.register_buffer("updates", torch.zeros((), dtype=torch.long))  # training updates so far

    def init_weights(self) -> None:
        self.thr.zero_()
        self.updates.zero_()

    def threshold(self) -> torch.Tensor:
        """The current threshold (0 before any update)."""
        return self.thr

    @torch.no_grad()
    def update_threshold(self, entropy: torch.Tensor, x: torch.Tensor) -> None:
        """One step of the quantile tracker on H[t-1] over real target bytes (no host sync)."""
        real = is_byte(x[:, 1:])                                   # (B, T-1)
        values = entropy[:, :-1][real]
        if values.numel() == 0:
            return
        rho = self.cfg.target_rate
        first = torch.quantile(values[:2 ** 24], 1.0 - rho)      # torch.quantile's size limit
        rate = (values > self.thr).float().mean()
        tracked = self.thr + self.opts.gain * (rate - rho)
        self.thr.copy_(torch.where(self.updates > 0, tracked, first))
        self.updates.add_(1)

    def forward(self, h, x, boundaries=None, early_logits=None, greedy=False) -> BoundaryOutput:
        if early_logits is None:
            raise ValueError("the entropy strategy needs the early head's logits")
        entropy = next_byte_entropy(early_logits.detach())       # (B, T)
        if boundaries is None:
            boundaries = entropy_boundaries(entropy, self.threshold())
        if self.training:
            self.update_threshold(entropy, x)
        return fixed_output(boundaries)

    # Incremental decoding: the state is H[t-1], which decides a[t]; the threshold is frozen.
    def init_state(self, batch, device) -> dict:
        return {"entropy": torch.zeros(batch, device=device)}

    def prefill_state(self, h, x, decisions, early_logits=None) -> dict:
        return {"entropy": next_byte_entropy(early_logits[:, -1])}

    def step(self, h, x, t, state, early_logits=None, greedy=False, boundaries=None):
        if boundaries is None:
            rule = (state["entropy"] > self.threshold()).float() if t > 0 else torch.ones(x.shape, device=x.device)
            boundaries = rule
        return boundaries.float(), boundaries.float(), {"entropy": next_byte_entropy(early_logits)}
