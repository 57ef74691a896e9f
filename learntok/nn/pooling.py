"""The pooling math the chunkers (learntok.nn.chunkers) are made of: select-downsampling and
distribute-then-add upsampling (docs/design.md §2.5, §2.7), segment means (dynamic pooling),
H-Net's EMA over tokens, and token packing; each with a plain reference it is tested against.

Shapes: B batch, T bytes, S tokens (padded to the batch's largest count), N packed tokens
(every row's tokens one after another, padded at the end), D width (any trailing width X).
Token k of a sequence is the encoder vector at its k-th boundary byte (selection) or the mean
of the bytes after boundary k-1 up to and including boundary k (segment means); byte t reads
token k(t) = (number of boundaries at positions <= t) - 1, the latest boundary at or before t.

Packing: the token level runs on the N = sum of counts tokens of all rows rather than on
B x (largest count), so rows with few boundaries cost no padding in its linear layers (a
sampled policy's counts vary by row; uniform boundaries' do not). `Packing` holds the index
maps between the three layouts (bytes, padded rows, packed), all computed on the device from
the decisions after one host sync for the two sizes N and S.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def token_index(a: torch.Tensor) -> torch.Tensor:
    """k(t) = cumsum(a)[t] - 1, (B, T) long. a[:, 0] == 1, so k >= 0."""
    return a.long().cumsum(1) - 1


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def token_counts(a: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """Tokens per row of decisions a (B, T) 0/1: the counts (B,) on the device, and their total
    and largest read on the host together. This read is the forward's one host sync (the token
    level's shapes depend on it); every other size is known before the forward."""
    counts = a.long().sum(1)  # (B,)
    total, longest = torch.stack([counts.sum(), counts.max()]).tolist()
    return counts, total, longest


def num_tokens(a: torch.Tensor, multiple: int = 1) -> int:
    """The batch's largest token count, rounded up to `multiple` (the forward's one host sync)."""
    return round_up(token_counts(a)[2], multiple)


@dataclass
class Packing:
    """Where the tokens of B rows lie in one packed sequence of N slots: row 0's tokens in
    order, then row 1's, ..., then padding (N is the total rounded up to a multiple)."""

    byte_index: torch.Tensor  # (N,) long flat byte b * T + t of each slot's boundary byte; B * T for padding
    pos: torch.Tensor  # (N,) long byte offset t of each slot (T for padding): the token-level RoPE positions
    padded_index: torch.Tensor  # (B, S) long packed slot of row b's k-th token; N past the row's count
    packed_index: torch.Tensor  # (N,) long flat padded slot b * S + k of each packed token; B * S for padding
    # (B + 2,) long row starts, then the total, then N (varlen attention; the tail is its own row)
    cu_seqlens: torch.Tensor
    max_len: int  # the longest "row" of cu_seqlens (S, or the tail padding if longer)
    n_bytes: int  # T

    def pack(self, h: torch.Tensor) -> torch.Tensor:
        """Boundary bytes' vectors, packed: h (B, T, D) -> (N, D), zeros at padding."""
        return F.pad(h.flatten(0, 1), (0, 0, 0, 1))[self.byte_index]

    def to_padded(self, z: torch.Tensor) -> torch.Tensor:
        """(N, X) packed -> (B, S, X), zeros past each row's count."""
        return F.pad(z, (0, 0, 0, 1))[self.padded_index]

    def to_packed(self, y: torch.Tensor) -> torch.Tensor:
        """(B, S, X) padded rows -> (N, X), zeros at padding."""
        return F.pad(y.flatten(0, 1), (0, 0, 0, 1))[self.packed_index]

    def padded_pos(self) -> torch.Tensor:
        """(B, S) long byte offset of each row's k-th token, T past the count (as `downsample`)."""
        return F.pad(self.pos, (0, 1), value=self.n_bytes)[self.padded_index]


def pack_rows(a: torch.Tensor, multiple: int = 1) -> Packing:
    """The packing of the boundary bytes of a (B, T) 0/1. One host sync, for the sizes N (the
    total count) and S (the largest), each rounded up to `multiple` so that shapes, and hence
    compiled graphs, take few distinct values."""
    B, T = a.shape
    counts, total, longest = token_counts(a)  # (B,); the one host sync
    N, S = round_up(total, multiple), round_up(longest, multiple)
    ends = counts.cumsum(0)  # (B,)
    starts = ends - counts  # (B,) first slot of each row
    dev = a.device
    # (B, T) packed slot of each boundary byte; N = dropped
    slot = torch.where(a.bool(), starts[:, None] + token_index(a), N)
    flat = torch.arange(B * T, device=dev)
    byte_index = torch.full((N + 1,), B * T, device=dev).scatter(0, slot.flatten(), flat)[:N]  # (N,)
    pos = torch.where(byte_index < B * T, byte_index % T, T)  # (N,)
    k = torch.arange(S, device=dev)
    padded_index = torch.where(k < counts[:, None], starts[:, None] + k, N)  # (B, S)
    packed_index = torch.full((N + 1,), B * S, device=dev).scatter(
        0, padded_index.flatten(), torch.arange(B * S, device=dev)
    )[:N]  # (N,)
    cu_seqlens = torch.cat([ends.new_zeros(1), ends, ends.new_full((1,), N)])  # (B + 2,)
    return Packing(byte_index, pos, padded_index, packed_index, cu_seqlens, max(S, N - total), T)


def downsample(h: torch.Tensor, a: torch.Tensor, S: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gather the boundary bytes' vectors into tokens.
    h (B, T, D), a (B, T) 0/1 -> z (B, S, D) (zeros past each sequence's count),
    pos (B, S) long byte offsets (T past the count), valid (B, S) bool."""
    B, T, D = h.shape
    k = token_index(a)  # (B, T)
    is_b = a.bool()
    # boundary bytes scatter to their own slot; other bytes to a dump slot S (dropped)
    slot = torch.where(is_b, k, torch.full_like(k, S))  # (B, T)
    z = h.new_zeros(B, S + 1, D).scatter(1, slot.unsqueeze(-1).expand(B, T, D), h)[:, :S]  # (B, S, D)
    t = torch.arange(T, device=h.device).expand(B, T)
    pos = torch.full((B, S + 1), T, dtype=torch.long, device=h.device).scatter(1, slot, t)[:, :S]  # (B, S)
    valid = torch.arange(S, device=h.device)[None, :] < a.long().sum(1, keepdim=True)  # (B, S)
    return z, pos, valid


def upsample(z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Distribute: byte t reads token k(t). z (B, S, D), a (B, T) -> (B, T, D)."""
    k = token_index(a)  # (B, T)
    return z.gather(1, k.unsqueeze(-1).expand(-1, -1, z.size(-1)))


def straight_through(a: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    """Value a (hard 0/1), gradient of the relaxed sample soft (Nawrot's hard_boundaries)."""
    return a + (soft - soft.detach())


def mean_pool(h: torch.Tensor, hard: torch.Tensor, S: int) -> torch.Tensor:
    """Token k = mean of the bytes after boundary k-1 up to and including boundary k.
    h (B, T, D), hard (B, T) 0/1 values (hard[:, 0] = 1) that may carry a straight-through
    gradient -> z (B, S, D), zeros past each row's count. Nawrot's pooling matrix: with
    seg[t] = #boundaries strictly before t (differentiable), the weight of byte t in token k is
    1 - (k - seg[t]) where k == seg[t] (value 1) and 0 elsewhere, normalised over t."""
    seg = hard.cumsum(1) - hard  # (B, T) the token byte t belongs to
    k = torch.arange(S, device=h.device, dtype=seg.dtype)  # (S,)
    offset = k[None, :, None] - seg[:, None, :]  # (B, S, T)
    # trailing bytes: no token
    member = (offset.detach() == 0) & (k[None, :, None] < hard.detach().sum(1)[:, None, None])
    w = torch.where(member, 1.0 - offset, torch.zeros_like(offset))  # (B, S, T) value 0/1
    weights = w / (w.sum(-1, keepdim=True) + 1e-9)  # (B, S, T) rows sum to 1 (0 for padding)
    return torch.einsum("bst,btd->bsd", weights.to(h.dtype), h)


def ema_scan(z: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """H-Net's EMA de-chunking over tokens, zbar[k] = p[k] z[k] + (1 - p[k]) zbar[k-1],
    zbar[-1] = 0, by Hillis-Steele doubling of the affine recurrence (log2 S steps,
    differentiable). z (B, S, D), p (B, S) -> (B, S, D). After the step with shift s, (A, C)[k]
    composes elements k-2s+1 .. k: zbar[k] = C[k] + A[k] zbar[k-2s]."""
    A = (1.0 - p).unsqueeze(-1).to(z.dtype)  # (B, S, 1)
    C = p.unsqueeze(-1).to(z.dtype) * z  # (B, S, D)
    S, shift = z.size(1), 1
    while shift < S:
        C = C + A * F.pad(C[:, :-shift], (0, 0, shift, 0))
        A = A * F.pad(A[:, :-shift], (0, 0, shift, 0), value=1.0)
        shift *= 2
    return C


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


def mean_pool_reference(h: torch.Tensor, a: torch.Tensor, S: int) -> torch.Tensor:
    """Plain loops, the reference for `mean_pool`."""
    B, T, D = h.shape
    z = h.new_zeros(B, S, D)
    for b in range(B):
        start, k = 0, 0
        for t in range(T):
            if a[b, t] > 0:
                z[b, k] = h[b, start : t + 1].mean(0)
                start, k = t + 1, k + 1
    return z


def ema_reference(z: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Plain loop, the reference for `ema_scan`."""
    out = torch.zeros_like(z)
    prev = torch.zeros_like(z[:, 0])
    for k in range(z.size(1)):
        prev = p[:, k, None] * z[:, k] + (1 - p[:, k, None]) * prev
        out[:, k] = prev
    return out
