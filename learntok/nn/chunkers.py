"""Chunkers: how the byte level's vectors become tokens and how the token level's outputs come
back to the bytes (docs/design.md §2.5, §2.7). As in H-Net (goombalab/hnet), routing, chunking
and de-chunking are apart: a boundary strategy decides where tokens end and names its chunker
(`BoundaryStrategy.chunker`, a key of CHUNKERS); the model holds the chunker (`AUNet.chunker`)
and calls it on both sides of the token level:

    down      h (B, T, D), decisions -> tokens (B, S, D) and their boundary bytes (B, S)
              (`down_packed`: straight onto the packed sequence, (N, D))
    dechunk   the token level's output (B, S, D) -> the tokens the bytes read (B, S, D)
    up        (B, S, D) -> (B, T, D): byte t reads its latest boundary's token (the model adds
              the skip h after it)

Generation reads one byte at a time with the chunker's own decoding state, beside the
strategy's (`prefill_state`, then `down_step`, `dechunk_step`, `up_step` per byte); the steps
agree with the full-sequence form (tests/test_chunkers.py).

  select  a token is its boundary byte's vector (the default)
  mean    a token is the mean of its segment's bytes (dynamic pooling, `nawrot`), the
          straight-through decisions inside the pooling weights; its state is the running
          segment's sum and count
  ema     selection, then H-Net's EMA de-chunking over tokens and its confidence factor (`hnet`)

No chunker has weights or buffers: a model's state dict is the same whichever it holds.

Shapes: B batch, T bytes (BOS at t = 0), S tokens, N packed tokens, R rows with a new token,
D width.
"""

from __future__ import annotations

import torch
from torch import nn

from learntok.nn.pooling import Packing, downsample, ema_scan, mean_pool, straight_through, upsample


class Chunker(nn.Module):
    """Selection (docs/design.md §2.5): token k is the encoder vector at its k-th boundary byte,
    and byte t reads the token-level output of its latest boundary's token as it is. The
    interface of every chunker; the others override what they change."""

    def down(
        self, h: torch.Tensor, a: torch.Tensor, relaxed: torch.Tensor | None, S: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens of h (B, T, D) cut by decisions a (B, T) float 0/1 (a[:, 0] = 1) -> z (B, S, D)
        (zeros past each row's count) and each token's boundary byte offset (B, S) (T past the
        count). relaxed (B, T): the strategy's differentiable relaxed decisions, or None."""
        z, pos, _ = downsample(h, a, S)
        return z, pos

    def down_packed(
        self, h: torch.Tensor, a: torch.Tensor, relaxed: torch.Tensor | None, packing: Packing
    ) -> torch.Tensor:
        """`down` onto the packed token sequence (learntok.nn.pooling.Packing of a): h (B, T, D)
        -> (N, D), what the token level runs on. Selection gathers the boundary bytes' vectors
        straight into their packed slots (no padded (B, S, D) tensor on the way)."""
        return packing.pack(h)

    def dechunk(self, z: torch.Tensor, probs: torch.Tensor, token_pos: torch.Tensor) -> torch.Tensor:
        """The token level's output z (B, S, D) -> the tokens the bytes read (B, S, D); probs
        (B, T) fp32 P(a = 1) of every byte, token_pos (B, S) each token's boundary byte (T for
        padding). Identity here."""
        return z

    def up(self, z: torch.Tensor, a: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """Distribute: byte t reads token k(t), its latest boundary's. z (B, S, D) after
        `dechunk`, a (B, T) decisions, probs (B, T) -> (B, T, D)."""
        return upsample(z, a)

    # Incremental decoding: the state holds "token" (B, D), each row's latest token after `dechunk`.
    def prefill_state(self, h: torch.Tensor, a: torch.Tensor, z: torch.Tensor) -> dict:
        """The state after a prompt: h (B, T, D) its encoder output, a (B, T) its decisions, z
        (B, S, D) its tokens after `dechunk`."""
        counts = a.long().sum(1)  # (B,) a[:, 0] = 1: at least one token
        return {"token": z[torch.arange(z.size(0), device=z.device), counts - 1]}

    def down_step(self, h: torch.Tensor, a: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
        """Read byte t: h (B, D) its encoder output, a (B,) its decision. Returns the vector (B, D)
        that becomes a token where a = 1, and the new state. Selection: h itself."""
        return h, state

    def dechunk_step(self, z: torch.Tensor, rows: torch.Tensor | None, probs: torch.Tensor, state: dict) -> dict:
        """New tokens: z (R, D) the token level's output for rows (R,) long (None: every row, R = B),
        probs (B,) each row's P(a = 1) at byte t. Returns the state with those rows' token after
        `dechunk`."""
        if rows is None:
            return {**state, "token": self.dechunk_token(z, probs, state["token"])}
        token = state["token"].clone()
        token[rows] = self.dechunk_token(z, probs[rows], token[rows])
        return {**state, "token": token}

    def dechunk_token(self, z: torch.Tensor, probs: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        """`dechunk` of one new token per row: z (R, D), probs (R,) its boundary byte's P(a = 1),
        previous (R, D) the row's previous token after `dechunk`. Identity here."""
        return z

    def up_step(self, a: torch.Tensor, probs: torch.Tensor, state: dict) -> torch.Tensor:
        """What byte t reads (B, D) (the model adds the skip h): `up` at one byte, a and probs (B,)."""
        return state["token"]


class MeanPool(Chunker):
    """Dynamic pooling's tokens (Nawrot et al. 2023, `shortening.py` downsample): token k is the
    mean of the bytes after boundary k-1 up to and including boundary k (`mean_pool`), with the
    straight-through decisions (a valued, the relaxed decisions' gradient) inside the pooling
    weights, so that the language-model loss reaches the predictor. Bytes read their token as
    selection does. Decoding carries the running segment's fp32 sum and count (bytes after the
    last closed boundary, up to and including byte t) and whether a[t] closed it."""

    def down(self, h, a, relaxed, S):
        _, pos, _ = downsample(h[..., :0], a, S)  # (B, S) boundary byte offsets (no vectors moved)
        hard = a if relaxed is None else straight_through(a, relaxed)
        return mean_pool(h, hard, S), pos

    def down_packed(self, h, a, relaxed, packing):
        return packing.to_packed(self.down(h, a, relaxed, packing.padded_index.size(1))[0])  # (N, D) segment means

    def prefill_state(self, h, a, z):
        T = a.size(1)
        t = torch.arange(T, device=a.device)  # (T,)
        before = a[:, :-1] * t[None, :-1]  # (B, T-1) boundary offsets before the last byte
        last = before.amax(1, keepdim=True) if T > 1 else torch.full_like(a[:, :1], -1.0)  # (B, 1)
        mask = (t[None, :] > last).float()  # (B, T) the last byte's current segment
        segment = {"sum": (h.float() * mask[..., None]).sum(1), "count": mask.sum(1), "closed": a[:, -1].float()}
        return {**super().prefill_state(h, a, z), **segment}

    def down_step(self, h, a, state):
        keep = 1.0 - state["closed"]  # (B,) a boundary at t-1 closed the segment
        total, count = state["sum"] * keep[:, None] + h.float(), state["count"] * keep + 1.0
        return (total / count[:, None]).to(h.dtype), {**state, "sum": total, "count": count, "closed": a.float()}


def straight_through_one(c: torch.Tensor) -> torch.Tensor:
    """Forward exactly 1, gradient of c (H-Net's `ste_func`)."""
    return 1.0 + (c - c.detach())


class EMADechunk(Chunker):
    """H-Net's de-chunking (Hwang, Wang & Gu 2025; goombalab/hnet `hnet/modules/dc.py`
    DeChunkLayer and the residual's confidence), after selection. The token level's output is
    smoothed by an EMA over tokens, zbar[k] = p[k] z[k] + (1 - p[k]) zbar[k-1], with p[k] the
    routing probability at token k's boundary byte (clamped to [1e-4, 1 - 1e-4]; `ema_scan`),
    and byte t's upsampled vector is multiplied by its confidence c[t] = p[t] (boundary) or
    1 - p[t] (not) through a straight-through one: its forward value is exactly 1 and its
    gradient reaches the router, whose hard decisions selection cannot differentiate."""

    def dechunk(self, z, probs, token_pos):
        T = probs.size(1)
        p = probs.gather(1, token_pos.clamp(max=T - 1))  # (B, S) p at each token's boundary byte
        return ema_scan(z, p.clamp(1e-4, 1 - 1e-4))

    def up(self, z, a, probs):
        return self.confident(upsample(z, a), a, probs)

    def dechunk_token(self, z, probs, previous):
        p = probs.clamp(1e-4, 1 - 1e-4).unsqueeze(-1).to(z.dtype)  # (R, 1)
        return p * z + (1.0 - p) * previous

    def up_step(self, a, probs, state):
        return self.confident(state["token"][:, None], a[:, None], probs[:, None])[:, 0]

    @staticmethod
    def confident(y: torch.Tensor, a: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """y (B, T, D) times the straight-through confidence of decisions a at probs (B, T)."""
        c = torch.where(a > 0, probs, 1.0 - probs)  # (B, T)
        return y * straight_through_one(c).unsqueeze(-1).to(y.dtype)


CHUNKERS: dict[str, type[Chunker]] = {"select": Chunker, "mean": MeanPool, "ema": EMADechunk}


def build_chunker(name: str) -> Chunker:
    """The chunker a strategy names (`BoundaryStrategy.chunker`)."""
    if name not in CHUNKERS:
        raise ValueError(f"unknown chunker {name!r}; known: {', '.join(sorted(CHUNKERS))}")
    return CHUNKERS[name]()
