"""`uniform`: boundaries at random positions, exactly rho* of the real bytes in expectation: the
control for the learned policy (same rate, no information).

Shapes: B batch, T bytes.
"""

from __future__ import annotations

import torch

from learntok.boundaries.base import BoundaryOutput, register
from learntok.boundaries.common import StatelessStrategy, decision_mask, fixed_output
from learntok.boundaries.rate import RuleKnob


@register("uniform")
class UniformBoundaries(RuleKnob, StatelessStrategy):
    """floor(rho* n + u) boundaries (u uniform in [0, 1): rho* n rounded at random, so exactly
    rho* n in expectation) at random positions among the n real bytes after BOS of each
    sequence; BOS is always a boundary on top. The control for the learned policy: same rate, no information.
    `rule_rate` is rho* unless set at inference (learntok.boundaries.rate). Prescribed boundaries pass through."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.rule_rate = cfg.target_rate  # the rate the rule places exactly

    def forward(self, h, x, boundaries=None, early_logits=None, greedy=False) -> BoundaryOutput:
        if boundaries is None:
            real = decision_mask(x)  # (B, T)
            u = torch.rand(x.size(0), 1, device=x.device)
            n = torch.floor(self.rule_rate * real.sum(1, keepdim=True) + u)  # (B, 1) boundaries per row
            keys = torch.rand(x.shape, device=x.device).masked_fill(~real, 2.0)  # (B, T) non-real last
            rank = keys.argsort(dim=1).argsort(dim=1)  # (B, T) each position's rank
            boundaries = (rank < n).float()
        return fixed_output(boundaries)

    # Incremental decoding cannot place exactly rho* T boundaries in a sequence of unknown
    # length: each new byte is a boundary with probability rho*, independently (same rate).
    def decide_step(self, x, t):
        draw = torch.rand(x.shape, device=x.device) < self.rule_rate
        return torch.ones(x.shape, device=x.device) if t == 0 else draw.float()
