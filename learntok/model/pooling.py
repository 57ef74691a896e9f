"""Select-downsampling and distribute-then-add upsampling (DESIGN §2.5, §2.7).

Shapes: B batch, T bytes, S tokens (padded to the batch's largest count), D width.
Token k of a sequence is the encoder vector at its k-th boundary byte; byte t reads token
k(t) = (number of boundaries at positions <= t) - 1, the latest boundary at or before t.
"""
from __future__ import annotations

import torch


def token_index(a: torch.Tensor) -> torch.Tensor:
    """k(t) = cumsum(a)[t] - 1, (B, T) long. a[:, 0] == 1, so k >= 0."""
    return a.long().cumsum(1) - 1


def num_tokens(a: torch.Tensor, multiple: int = 1) -> int:
    """The batch's largest token count, rounded up to `multiple` (one host sync per forward)."""
    s = int(a.sum(1).max().item())
    return -(-s // multiple) * multiple


def downsample(h: torch.Tensor, a: torch.Tensor, S: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gather the boundary bytes' vectors into tokens.
    h (B, T, D), a (B, T) 0/1 -> z (B, S, D) (zeros past each sequence's count),
    pos (B, S) long byte offsets (T past the count), valid (B, S) bool."""
    B, T, D = h.shape
    k = token_index(a)                                           # (B, T)
    is_b = a.bool()
    # boundary bytes scatter to their own slot; other bytes to a dump slot S (dropped)
    slot = torch.where(is_b, k, torch.full_like(k, S))           # (B, T)
    z = h.new_zeros(B, S + 1, D).scatter(1, slot.unsqueeze(-1).expand(B, T, D), h)[:, :S]  # (B, S, D)
    t = torch.arange(T, device=h.device).expand(B, T)
    pos = torch.full((B, S + 1), T, dtype=torch.long, device=h.device).scatter(1, slot, t)[:, :S]  # (B, S)
    valid = torch.arange(S, device=h.device)[None, :] < a.long().sum(1, keepdim=True)  # (B, S)
    return z, pos, valid


def upsample(z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Distribute: byte t reads token k(t). z (B, S, D), a (B, T) -> (B, T, D)."""
    k = token_index(a)                                           # (B, T)
    return z.gather(1, k.unsqueeze(-1).expand(-1, -1, z.size(-1)))


def downsample_reference(h: torch.Tensor, a: torch.Tensor, S: int):
    """Plain loops, the reference for `downsample`."""
    B, T, D = h.shape
    z = h.new_zeros(B, S, D)
    pos = torch.full((B, S), T, dtype=torch.long)
    for b in range(B):
        idx = [t for t in range(T) if a[b, t] > 0]
        for k, t in enumerate(idx):
            z[b, k] = h[b, t]
            pos[b, k] = t
    return z, pos


def upsample_reference(z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Plain loops: byte t reads the token of the latest boundary at or before t."""
    B, T = a.shape
    y = z.new_zeros(B, T, z.size(-1))
    for b in range(B):
        k = -1
        for t in range(T):
            k += int(a[b, t] > 0)
            y[b, t] = z[b, k]
    return y
