"""`whitespace`: SpaceByte's word rule (a boundary at a space-like byte after a word byte), moved
toward the target rate by one fitted knob. (The strategy's name is not the metric
`whitespace_rate`, the fraction of ASCII whitespace bytes that are boundaries: docs/strategies.md.)

Shapes: B batch, T bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from learntok.boundaries.base import BoundaryOutput, BoundaryStrategy, register
from learntok.boundaries.common import bresenham, decision_mask, fixed_output, whitespace_boundaries
from learntok.boundaries.rate import OffsetKnob, bisect_rate
from learntok.data.vocab import BOS, bos_rows, row_pieces


def whitespace_at_rate(x: torch.Tensor, theta: float) -> torch.Tensor:
    """The whitespace rule moved toward another rate by one knob theta in (-1, 1]; causal (reads
    bytes <= t). x (B, T) ids -> (B, T) float 0/1, a[:, 0] = 1. theta = 0 is SpaceByte's rule;
    theta > 0 adds boundaries inside words (a `bresenham` stride over the bytes that are not rule
    boundaries), theta < 0 merges short words into the next. Every boundary count is
    nondecreasing in theta, so a bisection reaches any rate (`WhitespaceBoundaries.fit`); the
    rule in full: docs/strategies.md ("whitespace")."""
    ws = whitespace_boundaries(x).bool()  # (B, T), True at BOS
    if theta == 0:
        return ws.float()
    t = torch.arange(x.size(1), device=x.device)
    last = torch.cummax(torch.where(ws, t, 0), dim=1).values  # (B, T) the last rule boundary <= t
    if theta > 0:
        inside = ~ws
        return (ws | (inside & bresenham(inside.long().cumsum(1), theta))).float()
    mu = -theta / (1.0 + theta)
    level, frac = 1 + math.floor(mu), mu - math.floor(mu)
    length = t - F.pad(last[:, :-1], (1, 0))  # (B, T) length of the chunk a boundary at t closes
    closing = ws.clone()
    closing[:, 0] = False
    edge = closing & (length == level)
    drop = (closing & (length < level)) | (edge & bresenham(edge.long().cumsum(1), frac))
    return (ws & ~drop).float()


def whitespace_step(
    prev: torch.Tensor, x: torch.Tensor, t: int, last: torch.Tensor, edges: torch.Tensor, theta: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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
WHITESPACE_FIT_ROW = 1024  # rows of this many bytes (each after its own BOS) for the fit


@register("whitespace", config=WhitespaceConfig)
class WhitespaceBoundaries(OffsetKnob, BoundaryStrategy):
    """Word-like tokens from a fixed byte rule (SpaceByte's): the token is the space-like byte
    that ends a word and the next word's bytes read it. The text alone gives a rate r_ws (about
    0.18 for English prose); `fit` sets the knob `rate_offset` (theta of `whitespace_at_rate`)
    by bisection on the training sample so that the rule reaches rho*: boundaries inside long
    words above r_ws, short words merged into the next below it. The knob is saved with the
    weights (checkpoints from before it load with theta = 0, the plain rule)."""

    rate_offset_range = (-0.999, 1.0)  # theta's bracket for bisection (learntok.boundaries.rate)

    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("rate_offset", torch.zeros(()))  # theta; 0 = SpaceByte's rule

    def init_weights(self, generator: torch.Generator | None = None) -> None:
        self.rate_offset.zero_()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        state_dict.setdefault(prefix + "rate_offset", torch.zeros(()))  # older checkpoints: the plain rule
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def fit(self, documents: list[bytes]) -> dict:
        if not self.opts.match_rate:
            return {}
        sample = b"".join(documents)[:WHITESPACE_FIT_BYTES]
        x = bos_rows(row_pieces(sample, WHITESPACE_FIT_ROW))  # (B, T)
        real = decision_mask(x)

        def rate_of(theta: float) -> float:
            self.rate_offset.fill_(theta)  # decide with the stored (fp32) value
            a = whitespace_at_rate(x, float(self.rate_offset)).bool()
            return float((a & real).sum() / real.sum().clamp(min=1))

        natural = rate_of(0.0)
        theta, reached = bisect_rate(rate_of, self.cfg.target_rate, *self.rate_offset_range)
        self.rate_offset.fill_(theta)
        return {
            "whitespace_natural_rate": natural,
            "whitespace_theta": float(self.rate_offset),
            "whitespace_fit_rate": reached,
        }

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
