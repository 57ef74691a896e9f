"""Key/value caches for incremental decoding (generation), one per attention layer.

Byte levels (encoder, decoder) attend within a sliding window, so their cache is a ring
buffer of the last `attn_window` keys: slot p % window holds position p. Keys are stored
already rotated (RoPE at their own positions), so attention needs no ordering of the slots.
The token level attends to every earlier token; its cache grows by one key per row only
when that row draws a boundary, and each row keeps its own token count.

A cache's `update(k, v)` takes the new keys and values of one attention call and returns the
keys, values and boolean mask (None: attend to all, or causal for a multi-position prefill)
that the queries must attend over; `Attention.forward_cached` is its only caller. A prefill
(several positions into an empty cache) returns its own keys and no mask: the layer then runs
the training path (blocked local attention), so prefill memory grows linearly in the prompt.

Shapes: B batch, R rows taking part in a token-level step, H heads, L new positions,
N cached positions, E head size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


class WindowKV:
    """Sliding-window cache of one byte-level layer: at most `window` keys per row. All rows
    share byte positions (generation steps every row by one byte at a time)."""

    def __init__(self, window: int):
        self.window = window
        self.k: torch.Tensor | None = None  # (B, H, window, E) ring buffer
        self.v: torch.Tensor | None = None
        self.t = 0  # positions seen so far

    def update(self, k: torch.Tensor, v: torch.Tensor):
        B, H, L, E = k.shape
        if self.k is None:
            self.k = k.new_zeros(B, H, self.window, E)
            self.v = v.new_zeros(B, H, self.window, E)
        elif L > 1:
            raise ValueError(f"a {L}-position update of a non-empty window cache; prefill once, then step")
        first = max(0, L - self.window)  # only the last `window` keys are kept
        slots = torch.arange(self.t + first, self.t + L, device=k.device) % self.window
        self.k[:, :, slots] = k[:, :, first:]
        self.v[:, :, slots] = v[:, :, first:]
        self.t += L
        if L > 1:  # prefill from empty: the chunk attends to itself
            return k, v, None  # (Attention.attend: blocked, as in training)
        n = min(self.t, self.window)  # slots 0..n-1 are filled
        return self.k[:, :, :n], self.v[:, :, :n], None

    def nbytes(self) -> int:
        return 0 if self.k is None else 2 * self.k.numel() * self.k.element_size()

    def select(self, rows: torch.Tensor) -> None:
        """Keep rows `rows` (R,) long, in that order (a row may repeat): row r becomes rows[r]."""
        if self.k is not None:
            rows = rows.to(self.k.device)
            self.k, self.v = self.k[rows], self.v[rows]


class TokenKV:
    """Growing cache of one token-level layer. Row b holds n[b] tokens (its boundaries so far);
    slots past n[b] are padding, masked out and overwritten by the next token."""

    def __init__(self, counts: torch.Tensor, longest: int):
        self.n = counts.clone()  # (B,) long tokens per row
        self.longest = longest  # max over rows of n, on the host (no sync per step)
        self.k: torch.Tensor | None = None  # (B, H, capacity, E)
        self.v: torch.Tensor | None = None

    def update(self, k: torch.Tensor, v: torch.Tensor):
        """Prefill: k (B, H, S, E) are the tokens of every row, padded at the end (causal
        attention hides the padding from real tokens). A step goes through `rows`."""
        if self.k is not None:
            raise ValueError("prefill of a non-empty token cache; step through TokenKV.rows(...)")
        S = k.size(2)
        self.k, self.v = self._alloc(k, max(2 * S, 16)), self._alloc(v, max(2 * S, 16))
        self.k[:, :, :S], self.v[:, :, :S] = k, v
        return k, v, None

    @staticmethod
    def _alloc(x: torch.Tensor, capacity: int) -> torch.Tensor:
        B, H, _, E = x.shape
        return x.new_zeros(B, H, capacity, E)

    def rows(self, rows: torch.Tensor | None) -> "TokenRows":
        """A view through which the rows `rows` (R,) (None: every row) append one token each."""
        return TokenRows(self, rows)

    def append(self, rows: torch.Tensor | None, k: torch.Tensor, v: torch.Tensor):
        """k, v (R, H, 1, E): one new token for each of `rows`. Returns keys, values (R, H, N, E)
        and mask (R, 1, 1, N) over the rows' tokens so far, the new one included."""
        if self.longest + 1 > self.k.size(2):  # amortised doubling
            grow = lambda c: torch.cat([c, torch.zeros_like(c)], dim=2)  # noqa: E731
            self.k, self.v = grow(self.k), grow(self.v)
        idx = torch.arange(self.n.numel(), device=k.device) if rows is None else rows  # (R,)
        n = self.n[idx]  # (R,) slot of the new token
        self.k[idx, :, n] = k[:, :, 0]
        self.v[idx, :, n] = v[:, :, 0]
        self.n[idx] = n + 1
        self.longest += 1
        N = self.longest
        keys, vals = (self.k[:, :, :N], self.v[:, :, :N]) if rows is None else (self.k[idx, :, :N], self.v[idx, :, :N])
        mask = (torch.arange(N, device=k.device)[None, :] <= n[:, None])[:, None, None, :]  # (R, 1, 1, N)
        return keys, vals, mask

    def nbytes(self) -> int:
        return 0 if self.k is None else 2 * self.k.numel() * self.k.element_size()

    def select(self, rows: torch.Tensor) -> None:
        """Keep rows `rows` (R,) long, in that order (a row may repeat). `longest` stays an upper
        bound of the rows' counts, as it is between steps."""
        rows = rows.to(self.n.device)
        self.n = self.n[rows]
        if self.k is not None:
            self.k, self.v = self.k[rows], self.v[rows]


@dataclass
class TokenRows:
    """One step's view of a TokenKV: the rows that drew a boundary."""

    cache: TokenKV
    rows: torch.Tensor | None  # (R,) row indices, None = all rows

    def update(self, k: torch.Tensor, v: torch.Tensor):
        return self.cache.append(self.rows, k, v)


@dataclass
class ModelCache:
    """The caches of every attention layer of an AUNet, level by level."""

    encoder: list[WindowKV]
    mid: list[TokenKV]
    decoder: list[WindowKV]

    @classmethod
    def empty_bytes(cls, n_down: int, n_up: int, window: int) -> "ModelCache":
        """Byte-level caches, empty; the token-level ones are made when the token counts are known."""
        return cls([WindowKV(window) for _ in range(n_down)], [], [WindowKV(window) for _ in range(n_up)])

    def mid_rows(self, rows: torch.Tensor | None) -> list[TokenRows]:
        return [c.rows(rows) for c in self.mid]

    def select(self, rows: torch.Tensor) -> None:
        """Keep rows `rows` (R,) long of every layer's cache, in that order (beam search reorders
        its rows so between steps)."""
        for c in [*self.encoder, *self.mid, *self.decoder]:
            c.select(rows)

    def nbytes(self) -> int:
        """Bytes held by every key/value buffer."""
        return sum(c.nbytes() for c in [*self.encoder, *self.mid, *self.decoder])
