"""A model's boundary decisions on text: windows, batched forwards (docs/tokenizer.md).

A text is read in windows of `window - 1` bytes, each after its own BOS (long texts then cost
linear time and memory, at lengths the model was trained on); the first byte of every window
starts a chunk (the bytes before the window's first boundary read its BOS token). Windows of one
text or of many are batched: consecutive windows fill forwards of at most `batch_bytes` (rows
times the longest row), and only the byte level and the strategy run (`AUNet.byte_level`), not
the token level and the decoder. A boundary at byte position t of a window (t >= 1; 0 is BOS)
makes window byte t - 1 the last byte of a chunk (learntok.text.display.chunk_starts: a token reads
the bytes through its boundary byte).

`decide` is the one implementation: `learntok.Tokenizer`, `learntok segment` (streaming a file
window by window) and `segment_text` all call it. Sampled boundaries come from a private
stream under `seed`, drawn batch by batch: they depend on the texts read together and on
`batch_bytes`; greedy ones do not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import torch

from learntok.data.vocab import bos_rows, row_pieces
from learntok.text.display import Chunk, chunk_starts, display_chunks
from learntok.util.files import open_input
from learntok.model.metrics import boundary_counts, boundary_rates
from learntok.util.runtime import PrivateRNG, eval_mode, replayed, rng_snapshot

WINDOW = 4096  # default window: bytes a forward reads per row, BOS included
BATCH_BYTES = 1 << 14  # default bound of rows x longest row per forward (bytes)


@dataclass
class WindowTerms:
    """The learned policy's logit terms at a window's bytes, for re-deciding at any offset d
    (the HTML page): a = softcap(base + sum_k mix[:, k-1] a[t-k] + offset + d, cap) > threshold."""

    base: list[float]  # (n,) s v[t][w-1]
    mix: list[list[float]]  # (n, W-1) s v[t][w-1-k], k = 1..w-1
    threshold: list[float]  # (n,) logit(u[t]) of the sampled draws; 0 for greedy decisions
    offset: float  # logit(rho*) + the rate knob
    cap: float  # the soft cap


@dataclass
class Window:
    key: int  # which text (its index among the texts read together)
    offset: int  # byte offset of the window's first byte in its text
    data: bytes  # the window's bytes
    decisions: list[int]  # (n,) the model's a[t] at each byte (BOS excluded), 0/1
    probs: list[float]  # (n,) P(a[t] = 1)
    terms: WindowTerms | None = None  # with `decide(terms=True)` and a policy

    @property
    def starts(self) -> list[int]:
        """Text offsets where chunks start: the window's first byte, and the byte after every
        boundary byte (learntok.text.display.chunk_starts)."""
        return chunk_starts(self.decisions, self.offset)


@dataclass
class Decided:
    windows: list[Window]  # the windows of one forward, in reading order
    counts: torch.Tensor  # (4,) their boundary_counts (rates over any number of batches add up)


def read_pieces(path: str | Path, size: int, what: str = "--file") -> Iterator[bytes]:
    """A file in pieces of `size` bytes (the last one shorter), read as they are consumed: a
    regular file only (files.open_input: a device or FIFO is refused), .gz decompressed."""
    with open_input(path, what) as f:
        while piece := f.read(size):
            while len(piece) < size and (more := f.read(size - len(piece))):  # a short read is not the end
                piece += more
            yield piece


def rows(pieces: Iterable[bytes], key: int = 0) -> Iterator[tuple[int, int, bytes]]:
    """(key, byte offset, piece) of consecutive pieces of one text."""
    offset = 0
    for piece in pieces:
        yield key, offset, piece
        offset += len(piece)


def text_rows(texts: Iterable[bytes], window: int | None) -> Iterator[tuple[int, int, bytes]]:
    """(text index, byte offset, window bytes) of every window of every text, in order."""
    for key, data in enumerate(texts):
        yield from rows(row_pieces(data, window), key)


def file_rows(path: str | Path, window: int) -> Iterator[tuple[int, int, bytes]]:
    """`text_rows` of one file, read window by window (never whole)."""
    return rows(read_pieces(path, max(1, window - 1)))


def batches(rows: Iterable[tuple[int, int, bytes]], batch_bytes: int) -> Iterator[list[tuple[int, int, bytes]]]:
    """Consecutive rows grouped so that rows x (longest + BOS) <= batch_bytes (one row at least)."""
    group, longest = [], 0
    for row in rows:
        n = len(row[2]) + 1
        if group and (len(group) + 1) * max(longest, n) > batch_bytes:
            yield group
            group, longest = [], 0
        group.append(row)
        longest = max(longest, n)
    if group:
        yield group


@torch.no_grad()
def decide(
    model,
    rows: Iterable[tuple[int, int, bytes]],
    greedy: bool = False,
    seed: int | None = 0,
    batch_bytes: int = BATCH_BYTES,
    terms: int = 0,
    full_forward: bool = False,
) -> Iterator[Decided]:
    """The model's boundary decisions on every row (text_rows), a forward per batch. Sampling runs
    under its own seeded stream (the caller's RNG is left alone, between batches too). With a
    policy, the windows that start in the first `terms` bytes of their text also carry the
    policy's WindowTerms (the HTML page's; 0: none). `full_forward` runs
    the model's whole forward instead of its byte level (the same decisions, tested; a model
    sharded by FSDP gathers its own weights only there)."""
    device = next(model.parameters()).device
    rng, strategy, policy = PrivateRNG(seed, device), model.strategy, None
    for group in batches(rows, batch_bytes):
        x = bos_rows([p for _, _, p in group]).to(device)  # (B, T)
        with eval_mode(model), rng.active():
            if full_forward:
                out = model(x, greedy=greedy)
                decisions, probs = out.boundaries, out.boundary_probs
            else:
                h, early = model.byte_level(x)  # (B, T, D), (B, T, V)
                before = rng_snapshot(device)
                b = strategy(h, x, early_logits=early, greedy=greedy)
                decisions, probs = b.decisions, b.probs
                wanted = strategy.has_policy and any(offset < terms for _, offset, _ in group)
                policy = strategy.terms(h) if wanted else None
            if policy is not None and not greedy:
                with replayed(before, device):  # the draws the strategy just made
                    threshold = torch.logit(strategy.uniforms(x))
            elif policy is not None:
                threshold = torch.zeros_like(policy.base)
        dec, probs = decisions.int().cpu().tolist(), probs.float().cpu().tolist()
        out = []
        for r, (key, offset, piece) in enumerate(group):
            n = len(piece) + 1
            t = (
                None
                if policy is None or offset >= terms
                else WindowTerms(
                    policy.base[r, 1:n].tolist(),
                    policy.mix[r, 1:n].tolist(),
                    threshold[r, 1:n].double().tolist(),
                    policy.offset,
                    policy.cap,
                )
            )
            out.append(Window(key, offset, piece, dec[r][1:n], probs[r][1:n], t))
        yield Decided(out, boundary_counts(x, decisions).double().cpu())


def segment_stats(counts: torch.Tensor, n_chunks: int) -> dict[str, float]:
    """boundary_rate (the model's boundaries per byte), whitespace_rate, n_bytes, n_chunks (every
    window's first byte starts a chunk, so n_chunks may exceed boundaries by a window count)."""
    rates = {k: float(v) for k, v in boundary_rates(counts).items()}
    return {**rates, "n_bytes": int(counts[1]), "n_chunks": n_chunks}


def segment_text(
    model,
    text: str | bytes,
    greedy: bool = False,
    seed: int = 0,
    window: int | None = None,
    batch_bytes: int = BATCH_BYTES,
    full_forward: bool = False,
) -> tuple[list[Chunk], dict[str, float]]:
    """Segment one text (one window without `window`). Returns (chunks, segment_stats)."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    counts, starts = torch.zeros(4, dtype=torch.float64), []
    for d in decide(model, text_rows([data], window), greedy, seed, batch_bytes, full_forward=full_forward):
        counts += d.counts
        starts += [s for w in d.windows for s in w.starts]
    chunks = display_chunks(data, starts)
    return chunks, segment_stats(counts, len(chunks))
