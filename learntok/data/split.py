"""Train/val/test split by document, with a fixed seed: one rule (`plan_split`) for a source read
whole (ByteData) and a source streamed into a prepared folder (`learntok prepare`), so a prepared
folder holds the same documents in the same splits as training on the raw source.

Splitting by document keeps held-out text unseen in training. When there are too few documents
for every split to get one (a small file, 42 plays), documents are first cut into contiguous
pieces, and the pieces are split instead. Up to EXACT_SPLIT_DOCUMENTS documents, a seeded
permutation picks exactly round(fraction * n) of them (at least one) for val and for test;
beyond, each document's split is a hash of (seed, its ordinal), which needs no memory and gives
the fractions in expectation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from learntok.util.errors import DataError


SPLITS = ("train", "val", "test")

# A held-out split smaller than either makes figures too noisy to compare runs by. With 2
# documents the 95% interval of the per-document mean is +-12.7 standard errors (Student's t,
# 1 degree of freedom), with 3 it is +-4.3. Below ~100 KB there are ~100 windows of 1 KB: at a
# spread of ~0.4 bpb between windows the standard error is ~0.04 bpb, as large as the gaps
# between strategies that `compare` reports.
MIN_SPLIT_DOCUMENTS = 3
MIN_SPLIT_BYTES = 100_000


def small_split(split: str, n_docs: int, n_bytes: int) -> str | None:
    """Why a held-out split is too small for a useful standard error (one line), or None."""
    if split == "train" or not n_docs or (n_docs >= MIN_SPLIT_DOCUMENTS and n_bytes >= MIN_SPLIT_BYTES):
        return None
    return (
        f"the {split} split holds {n_docs} documents, {n_bytes:,} bytes (fewer than {MIN_SPLIT_DOCUMENTS} "
        f"documents or {MIN_SPLIT_BYTES:,} bytes): its figures are too noisy to compare runs by; raise the "
        f"{split} fraction or give the source more text"
    )


EXACT_SPLIT_DOCUMENTS = 1 << 20  # up to this many documents, exact counts (a permutation: 8 bytes a document)
MIN_PIECES = 60  # fewer documents than this are cut into about this many pieces first
_MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """The splitmix64 finaliser (Steele et al. 2014): a cheap, well-mixed 64-bit hash."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def split_of(ordinal: int, seed: int, val_fraction: float, test_fraction: float) -> str:
    """The hashed split of document `ordinal`: u = splitmix64(seed, ordinal) / 2^64; val if
    u < val_fraction, test if u < val_fraction + test_fraction, else train."""
    u = splitmix64(splitmix64(seed) ^ ordinal) / 2.0**64
    return "val" if u < val_fraction else "test" if u < val_fraction + test_fraction else "train"


@dataclass(frozen=True)
class SplitPlan:
    """Where each document of a source goes, by its ordinal among the non-empty documents after
    cutting (0-based, in source order)."""

    piece_bytes: int | None  # cut every document into pieces of at most this many bytes first (None: keep them whole)
    n_docs: int | None  # documents after cutting (None: more than EXACT_SPLIT_DOCUMENTS, not counted)
    where: np.ndarray | None  # (n_docs,) int8 index into SPLITS of each document; None: hashed per ordinal
    seed: int  # seed of the permutation or of the hash
    val_fraction: float  # fraction of documents in val
    test_fraction: float  # fraction of documents in test

    def split_of(self, ordinal: int) -> str:
        if self.where is None:
            return split_of(ordinal, self.seed, self.val_fraction, self.test_fraction)
        return SPLITS[self.where[ordinal]]

    def pieces(self, doc: bytes) -> list[bytes]:
        return cut_document(doc, self.piece_bytes) if self.piece_bytes else [doc]

    def describe(self) -> dict:
        return {
            "rule": "hash" if self.where is None else "permutation",
            "documents": self.n_docs,
            "piece_bytes": self.piece_bytes,
            "seed": self.seed,
        }


def plan_split(
    docs: Callable[[], Iterable[bytes]],
    seed: int = 0,
    val_fraction: float = 0.05,
    test_fraction: float = 0.05,
    min_pieces: int = MIN_PIECES,
    piece_bytes: int | None = None,
) -> SplitPlan:
    """The split of the non-empty documents that each call of `docs()` yields (the same ones, in
    the same order, each time; read once, or twice when they are few and must be cut). With
    fewer than `min_pieces` documents, every one is cut into pieces of `piece_bytes` (default:
    total bytes / min_pieces). A split with a nonzero fraction gets at least one document."""
    if val_fraction < 0 or test_fraction < 0 or val_fraction + test_fraction >= 1:
        raise DataError(f"val_fraction {val_fraction} + test_fraction {test_fraction} must be in [0, 1), each >= 0")
    n = total = 0
    for doc in docs():
        n, total = n + 1, total + len(doc)
        if n > EXACT_SPLIT_DOCUMENTS:
            return SplitPlan(None, None, None, seed, val_fraction, test_fraction)
    if not n:
        raise DataError("no documents to split")
    size = None
    if n < min_pieces:
        size = piece_bytes or max(1, math.ceil(total / min_pieces))
        n = sum(len(cut_document(doc, size)) for doc in docs())
    n_val = max(1, round(val_fraction * n)) if val_fraction > 0 else 0
    n_test = max(1, round(test_fraction * n)) if test_fraction > 0 else 0
    if n - n_val - n_test < 1:
        raise DataError(f"{n} documents (after cutting) are too few for train, val ({n_val}) and test ({n_test})")
    order = np.random.default_rng(seed).permutation(n)
    where = np.zeros(n, dtype=np.int8)  # train
    where[order[:n_val]] = SPLITS.index("val")
    where[order[n_val : n_val + n_test]] = SPLITS.index("test")
    return SplitPlan(size, n, where, seed, val_fraction, test_fraction)


def split_documents(docs: list[bytes], **options) -> dict[str, list[bytes]]:
    """Documents -> {"train", "val", "test"} lists of documents: `split_named_documents` without
    names (options: seed, val_fraction, test_fraction, min_pieces, piece_bytes)."""
    return split_named_documents(docs, None, **options)[0]


def split_named_documents(
    docs: list[bytes],
    names: list[str] | None,
    seed: int = 0,
    val_fraction: float = 0.05,
    test_fraction: float = 0.05,
    min_pieces: int = MIN_PIECES,
    piece_bytes: int | None = None,
) -> tuple[dict[str, list[bytes]], dict[str, list[str]] | None]:
    """Documents -> {"train", "val", "test"} lists of documents, deterministic in (docs, seed), and
    the same lists of each document's name (a piece keeps its document's name; None without names),
    by `plan_split`. Within a split, documents keep their original order."""
    named = [(d, n) for d, n in zip(docs, names or [""] * len(docs)) if d]
    plan = plan_split(lambda: (d for d, _ in named), seed, val_fraction, test_fraction, min_pieces, piece_bytes)
    picked: dict[str, list[tuple[bytes, str]]] = {name: [] for name in SPLITS}
    for i, pair in enumerate((piece, n) for d, n in named for piece in plan.pieces(d)):
        picked[plan.split_of(i)].append(pair)
    split_docs = {name: [d for d, _ in picked[name]] for name in SPLITS}
    return split_docs, ({name: [n for _, n in picked[name]] for name in SPLITS} if names is not None else None)


def cut_document(doc: bytes, size: int) -> list[bytes]:
    """Cut `doc` into contiguous pieces of at most `size` bytes that concatenate back to `doc`.

    A cut goes just after the last newline in the second half of a piece when there is one, so
    that pieces start on a line (and never inside a UTF-8 character in line-based text).
    """
    pieces, start = [], 0
    while len(doc) - start > size:
        end = start + size
        newline = doc.rfind(b"\n", start + size // 2, end)
        end = newline + 1 if newline >= 0 else end
        pieces.append(doc[start:end])
        start = end
    pieces.append(doc[start:])
    return pieces
