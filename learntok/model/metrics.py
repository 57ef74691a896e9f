"""What a batch measures, the one way every figure of learntok is made: bits per byte from summed
cross-entropy, and boundary counts and rates (boundaries per real byte, the share of whitespace
bytes that are boundaries) as sums that add up exactly over batches and ranks."""

from __future__ import annotations

import math

import numpy as np
import torch

from learntok.data.vocab import decision_mask

LN2 = math.log(2.0)


def bits_per_byte(nats, n_bytes):
    """Bits per byte from cross-entropy in nats summed over n_bytes scored bytes (floats or numpy
    arrays, elementwise; no bytes gives 0): the one conversion every figure of learntok uses."""
    return nats / (LN2 * np.maximum(n_bytes, 1))


def is_whitespace(x: torch.Tensor) -> torch.Tensor:
    """Bytes that are ASCII whitespace (space, tab, newline, CR, FF, VT)."""
    ws = torch.tensor([32, 9, 10, 13, 12, 11], device=x.device)
    return torch.isin(x, ws)


def boundary_counts(x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """(4,) fp32 sums over real bytes t >= 1 (not BOS/EOS/PAD): [boundaries, bytes, boundaries at
    whitespace bytes, whitespace bytes]. Sums, so that batches and ranks add up exactly."""
    real = decision_mask(x)[:, 1:].float()
    dec = a[:, 1:].float()
    ws = is_whitespace(x[:, 1:]).float() * real
    return torch.stack([(dec * real).sum(), real.sum(), (dec * ws).sum(), ws.sum()])


def boundary_rates(counts: torch.Tensor) -> dict[str, torch.Tensor]:
    """boundary_rate (boundaries per real byte) and whitespace_rate (fraction of whitespace bytes
    that are boundaries) from `boundary_counts` (summed over any number of batches)."""
    return {"boundary_rate": counts[0] / counts[1].clamp(min=1), "whitespace_rate": counts[2] / counts[3].clamp(min=1)}


def boundary_stats(x: torch.Tensor, a: torch.Tensor, probs: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Boundary and whitespace rates of one batch (and the mean P(a = 1) given `probs`). Returns
    tensors (no host sync); callers convert when they log."""
    out = boundary_rates(boundary_counts(x, a))
    if probs is not None:
        real = decision_mask(x)[:, 1:].float()
        out["mean_prob"] = (probs[:, 1:].float() * real).sum() / real.sum().clamp(min=1)
    return out
