"""`fixed`: boundaries at a fixed stride (every k-th byte at rho* = 1/k, even integer strides in
between).

Shapes: B batch, T bytes.
"""

from __future__ import annotations

import torch

from learntok.boundaries.base import BoundaryOutput, register
from learntok.boundaries.common import StatelessStrategy, bresenham, fixed_output
from learntok.boundaries.rate import RuleKnob


@register("fixed")
class FixedBoundaries(RuleKnob, StatelessStrategy):
    """Boundaries at the byte positions t (BOS = 0) where floor(rho* t) steps up (`bresenham`):
    every k-th byte when rho* = 1/k (the classic fixed stride), strides floor(1/rho*) and
    ceil(1/rho*) mixed to give exactly floor(rho* t) boundaries in the first t bytes otherwise.
    `rule_rate` is rho* unless set at inference (learntok.boundaries.rate)."""

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
