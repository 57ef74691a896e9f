"""What several boundary strategies share: the decisions that count, the output of a strategy
without a policy, the bias that starts a policy at the target rate, even integer strides
(Bresenham), stateless decoding and SpaceByte's word rule.

Shapes: B batch, T bytes (BOS at t = 0).
"""

from __future__ import annotations

import math
import torch

from learntok.boundaries.base import BoundaryOutput, BoundaryStrategy
from learntok.data.vocab import decision_mask, is_byte  # noqa: F401 (decision_mask re-exported)


def fixed_output(decisions: torch.Tensor) -> BoundaryOutput:
    """BoundaryOutput for strategies with no policy: probabilities are the decisions themselves."""
    d = decisions.float().clone()  # never write into the caller's tensor
    d[:, 0] = 1.0
    zeros = torch.zeros_like(d)
    return BoundaryOutput(d, zeros, d, zeros, torch.zeros((), device=d.device))


def counted_at(x: torch.Tensor, t: int) -> torch.Tensor:
    """(B,) float: whether the decisions at new bytes x (B,), position t, count (one column of
    `decision_mask`), for a decoding step."""
    return (is_byte(x) & (t >= 1)).float()


def target_logit(rate: float) -> float:
    """logit(rho*) = log(rho* / (1 - rho*)): the logit whose sigmoid is the target rate, where a
    policy's bias starts so that it begins at the target rate."""
    return math.log(rate / (1.0 - rate))


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
    a = ~word[:, 1:] & word[:, :-1]  # (B, T-1): decision for t = 1..T-1
    return torch.cat([torch.ones_like(x[:, :1], dtype=torch.bool), a], dim=1).float()
