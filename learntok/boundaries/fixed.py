"""Strategies with no learned policy (DESIGN §5): uniform random and fixed-stride boundaries.

Shapes: B batch, T bytes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from learntok.boundaries.base import BoundaryOutput, BoundaryStrategy, fixed_output, register
from learntok.data.vocab import BOS, PAD, encode, is_byte
from learntok.ranges import ranged


def bisect_rate(rate_of: Callable[[float], float], target: float, low: float, high: float,
                iters: int = 30) -> tuple[float, float]:
    """Bisection for a knob whose rate is nondecreasing in it: (knob, its rate), the knob being
    whichever end of the final bracket [low, high] gives the rate closest to `target`. When the
    target lies outside [rate(low), rate(high)], that end is returned (the caller says why)."""
    r_low, r_high = rate_of(low), rate_of(high)
    if target <= r_low or target >= r_high:
        return (low, r_low) if target <= r_low else (high, r_high)
    for _ in range(iters):
        mid = 0.5 * (low + high)
        r_mid = rate_of(mid)
        if r_mid < target:
            low, r_low = mid, r_mid
        else:
            high, r_high = mid, r_mid
    return (low, r_low) if target - r_low <= r_high - target else (high, r_high)


def real_positions(x: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: decisions that count toward the boundary rate (real bytes at t >= 1), as in
    objective.boundary_counts."""
    real = is_byte(x)
    real[:, 0] = False
    return real


def bresenham(n: torch.Tensor, rate: float) -> torch.Tensor:
    """True at the counts n = 1, 2, ... where floor(rate n) steps up: exactly floor(rate m) of the
    first m counts, spread as evenly as integers allow (strides floor(1/rate) and ceil(1/rate);
    every k-th count when rate = 1/k). The 1e-9 absorbs float error in rate * n."""
    n = n.double()
    return (n >= 1) & (torch.floor(rate * n + 1e-9) > torch.floor(rate * (n - 1) + 1e-9))


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
    """floor(rho* n + u) boundaries (u uniform in [0, 1): rho* n rounded at random, so exactly
    rho* n in expectation) at random positions among the n real bytes after BOS of each
    sequence; BOS is always a boundary on top. The control for the learned policy: same rate, no information.
    `rule_rate` is rho* unless set at inference (learntok.rate). Prescribed boundaries pass through."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.rule_rate = cfg.target_rate                          # the rate the rule places exactly

    def forward(self, h, x, boundaries=None, early_logits=None, greedy=False) -> BoundaryOutput:
        if boundaries is None:
            real = real_positions(x)                             # (B, T)
            u = torch.rand(x.size(0), 1, device=x.device)
            n = torch.floor(self.rule_rate * real.sum(1, keepdim=True) + u)  # (B, 1) boundaries per row
            keys = torch.rand(x.shape, device=x.device).masked_fill(~real, 2.0)  # (B, T) non-real last
            rank = keys.argsort(dim=1).argsort(dim=1)            # (B, T) each position's rank
            boundaries = (rank < n).float()
        return fixed_output(boundaries)

    # Incremental decoding cannot place exactly rho* T boundaries in a sequence of unknown
    # length: each new byte is a boundary with probability rho*, independently (same rate).
    def decide_step(self, x, t):
        draw = torch.rand(x.shape, device=x.device) < self.rule_rate
        return torch.ones(x.shape, device=x.device) if t == 0 else draw.float()


@register("fixed")
class FixedBoundaries(StatelessStrategy):
    """Boundaries at the byte positions t (BOS = 0) where floor(rho* t) steps up (`bresenham`):
    every k-th byte when rho* = 1/k (the classic fixed stride), strides floor(1/rho*) and
    ceil(1/rho*) mixed to give exactly floor(rho* t) boundaries in the first t bytes otherwise.
    `rule_rate` is rho* unless set at inference (learntok.rate)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.rule_rate = cfg.target_rate

    def forward(self, h, x, boundaries=None, early_logits=None, greedy=False) -> BoundaryOutput:
        if boundaries is None:
            t = torch.arange(x.size(1), device=x.device)
            boundaries = bresenham(t, self.rule_rate).float().expand(x.shape).clone()  # (B, T); fixed_output writes BOS
        return fixed_output(boundaries)

    def decide_step(self, x, t):
        on = bool(bresenham(torch.tensor(t), self.rule_rate)) or t == 0
        return torch.full(x.shape, float(on), device=x.device)


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


def whitespace_at_rate(x: torch.Tensor, theta: float) -> torch.Tensor:
    """The whitespace rule moved toward another rate by one knob theta in (-1, 1]; causal (reads
    bytes <= t). x (B, T) ids -> (B, T) float 0/1, a[:, 0] = 1.
    - theta = 0: SpaceByte's rule (`whitespace_boundaries`), rate r_ws (about 0.18 in prose).
    - theta > 0 adds boundaries inside words, a fixed stride over the row's word bytes: of the
      bytes that are not rule boundaries, every 1/theta-th one in running count (`bresenham`;
      the count runs across words, so the rate is linear in theta and any value is reachable).
      The rate rises from r_ws (theta -> 0) to 1 (theta = 1).
    - theta < 0 drops whitespace boundaries that close short chunks, merging a short word into
      the next: with mu = -theta / (1 + theta) and L the length of the chunk the rule's boundary
      closes, it is dropped when L < 1 + floor(mu), and for L = 1 + floor(mu) at a fraction
      frac(mu) of those boundaries, spread by `bresenham` over their running count. The rate
      falls from r_ws (theta -> 0) toward 0 (theta -> -1).
    Each boundary count is nondecreasing in theta, so a bisection on theta reaches any rate in
    (0, 1) to within the granularity of the text (`WhitespaceBoundaries.fit`)."""
    ws = whitespace_boundaries(x).bool()                        # (B, T), True at BOS
    if theta == 0:
        return ws.float()
    t = torch.arange(x.size(1), device=x.device)
    last = torch.cummax(torch.where(ws, t, 0), dim=1).values    # (B, T) the last rule boundary <= t
    if theta > 0:
        inside = ~ws
        return (ws | (inside & bresenham(inside.long().cumsum(1), theta))).float()
    mu = -theta / (1.0 + theta)
    level, frac = 1 + math.floor(mu), mu - math.floor(mu)
    length = t - F.pad(last[:, :-1], (1, 0))                     # (B, T) length of the chunk a boundary at t closes
    closing = ws.clone()
    closing[:, 0] = False
    edge = closing & (length == level)
    drop = (closing & (length < level)) | (edge & bresenham(edge.long().cumsum(1), frac))
    return (ws & ~drop).float()


def whitespace_step(prev: torch.Tensor, x: torch.Tensor, t: int, last: torch.Tensor, edges: torch.Tensor,
                    theta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One byte of `whitespace_at_rate`: prev, x (B,) the previous and new byte, last (B,) the
    position of the last rule boundary before t, edges (B,) the running count of `bresenham`'s
    candidates (word bytes for theta > 0, boundaries at the fractional length for theta < 0).
    Returns (a (B,) float, last, edges) after byte t."""
    ws = whitespace_boundaries(torch.stack([prev, x], dim=1))[:, 1].bool() | (t == 0)  # (B,)
    new_last = torch.where(ws, torch.full_like(last, t), last)
    if theta >= 0:
        edges = edges + (~ws).long()
        a = ws | (~ws & bresenham(edges, theta)) if theta > 0 else ws
        return a.float(), new_last, edges
    mu = -theta / (1.0 + theta)
    level, frac = 1 + math.floor(mu), mu - math.floor(mu)
    closing = ws & (t > 0)
    edge = closing & (t - last == level)
    edges = edges + edge.long()
    drop = (closing & (t - last < level)) | (edge & bresenham(edges, frac))
    return (ws & ~drop).float(), new_last, edges


@dataclass
class WhitespaceConfig:
    match_rate: bool = True  # fit the rule's knob (`whitespace_at_rate`) to rho*; false: SpaceByte's rule as is


WHITESPACE_FIT_BYTES = 1 << 20  # training bytes the whitespace knob is fitted on
WHITESPACE_FIT_ROW = 1024       # rows of this many bytes (each after its own BOS) for the fit


@register("whitespace", config=WhitespaceConfig)
class WhitespaceBoundaries(BoundaryStrategy):
    """Word-like tokens from a fixed byte rule (SpaceByte's): the token is the space-like byte
    that ends a word and the next word's bytes read it. The text alone gives a rate r_ws (about
    0.18 for English prose); `fit` sets the knob `rate_offset` (theta of `whitespace_at_rate`)
    by bisection on the training sample so that the rule reaches rho*: boundaries inside long
    words above r_ws, short words merged into the next below it. The knob is saved with the
    weights (checkpoints from before it load with theta = 0, the plain rule)."""

    rate_offset_range = (-0.999, 1.0)  # theta's bracket for bisection (learntok.rate)

    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("rate_offset", torch.zeros(()))    # theta; 0 = SpaceByte's rule

    def init_weights(self, generator: torch.Generator | None = None) -> None:
        self.rate_offset.zero_()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        state_dict.setdefault(prefix + "rate_offset", torch.zeros(()))  # older checkpoints: the plain rule
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def fit(self, documents: list[bytes]) -> dict:
        if not self.opts.match_rate:
            return {}
        sample = b"".join(documents)[:WHITESPACE_FIT_BYTES]
        rows = [encode(sample[i:i + WHITESPACE_FIT_ROW - 1]) for i in range(0, len(sample), WHITESPACE_FIT_ROW - 1)]
        x = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=PAD)  # (B, T)
        real = real_positions(x)

        def rate_of(theta: float) -> float:
            self.rate_offset.fill_(theta)                        # decide with the stored (fp32) value
            a = whitespace_at_rate(x, float(self.rate_offset)).bool()
            return float((a & real).sum() / real.sum().clamp(min=1))

        natural = rate_of(0.0)
        theta, reached = bisect_rate(rate_of, self.cfg.target_rate, *self.rate_offset_range)
        self.rate_offset.fill_(theta)
        return {"whitespace_natural_rate": natural, "whitespace_theta": float(self.rate_offset),
                "whitespace_fit_rate": reached}

    def forward(self, h, x, boundaries=None, early_logits=None, greedy=False) -> BoundaryOutput:
        if boundaries is None:
            boundaries = whitespace_at_rate(x, float(self.rate_offset))
        return fixed_output(boundaries)

    # Incremental decoding: the state is the previous byte, the last rule boundary's position and
    # the running count of `whitespace_at_rate`'s fractional-length boundaries (prefill replays step).
    def init_state(self, batch, device) -> dict:
        zeros = torch.zeros(batch, dtype=torch.long, device=device)
        return {"prev": torch.full((batch,), BOS, device=device), "last": zeros, "edges": zeros.clone()}

    def step(self, h, x, t, state, early_logits=None, greedy=False, boundaries=None):
        a, last, edges = whitespace_step(state["prev"], x, t, state["last"], state["edges"], float(self.rate_offset))
        if boundaries is None:
            boundaries = a
        return boundaries.float(), boundaries.float(), {"prev": x, "last": last, "edges": edges}


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
    gain: float = ranged(2.0, ge=0)  # threshold step (nats) per unit rate error per training step


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
    boundary). No gradient: entropy is detached.

    Inference-time rate control (learntok.rate): `rate_offset` (nats, 0 unless calibrated, not
    saved) lowers the threshold the decisions use, H[t-1] > thr - offset; training's tracker
    never reads it."""

    rate_offset_range = (-8.0, 8.0)  # nats; H lies in [0, ln 256 = 5.5]

    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("thr", torch.zeros(()))              # the threshold on H, nats
        self.register_buffer("updates", torch.zeros((), dtype=torch.long))  # training updates so far
        self.register_buffer("rate_offset", torch.zeros(()), persistent=False)  # raising it raises the rate

    def init_weights(self, generator: torch.Generator | None = None) -> None:
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
            boundaries = entropy_boundaries(entropy, self.threshold() - self.rate_offset)
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
            rule = (state["entropy"] > self.threshold() - self.rate_offset).float() if t > 0 else torch.ones(x.shape, device=x.device)
            boundaries = rule
        return boundaries.float(), boundaries.float(), {"entropy": next_byte_entropy(early_logits)}
