"""Strategies with no learned policy (DESIGN §5): uniform random and fixed-stride boundaries.

Shapes: B batch, T bytes.
"""
from __future__ import annotations

import torch

from learntok.boundaries.base import BoundaryOutput, BoundaryStrategy, fixed_output, register


@register("uniform")
class UniformBoundaries(BoundaryStrategy):
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


@register("fixed")
class FixedBoundaries(BoundaryStrategy):
    """A boundary every round(1/rho*) bytes, counting from BOS."""

    def forward(self, h, x, boundaries=None, early_logits=None, greedy=False) -> BoundaryOutput:
        if boundaries is None:
            stride = max(1, round(1.0 / self.cfg.target_rate))
            t = torch.arange(x.size(1), device=x.device)
            boundaries = (t % stride == 0).float().expand(x.shape)
        return fixed_output(boundaries)
