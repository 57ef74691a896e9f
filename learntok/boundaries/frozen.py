"""`frozen`: the learned policy's architecture at its initial weights, never trained.

A control for the learned policy (docs/compare.md): the same stochastic process with the same
parameters at the same seed (tests/test_identical_init.py), minus learning. It has no policy
loss (no score-function term), no rate loss and no rate controller, and it reads the encoder
through a stop-gradient, so nothing of it changes during training. What a learned arm gains
over `frozen` is what learning the boundaries buys; what `frozen` gains over `uniform` comes
from the process itself (independent draws at about the target rate).
"""

from __future__ import annotations

import torch

from learntok.boundaries.base import BoundaryOutput, register
from learntok.boundaries.learned import LearnedConfig, LearnedPolicy


@register("frozen", config=LearnedConfig)
class FrozenPolicy(LearnedPolicy):
    has_policy = False

    def __init__(self, cfg):
        super().__init__(cfg)
        self.requires_grad_(False)

    def forward(self, h, x, boundaries=None, early_logits=None, greedy=False) -> BoundaryOutput:
        out = super().forward(h.detach(), x, boundaries=boundaries, greedy=greedy)
        zeros = torch.zeros_like(out.log_prob)
        return BoundaryOutput(out.decisions, out.logits.detach(), out.probs.detach(), zeros, out.aux_loss)

    def adapt_rate(self, rate: torch.Tensor, gain: float) -> None:
        """No controller: the frozen policy's rate is what its initial weights give."""
