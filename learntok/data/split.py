"""Train/val/test split by document, with a fixed seed.

Splitting by document keeps held-out text unseen in training. When there are too few documents
for every split to get one (a single big file, 42 plays), documents are first cut into
contiguous pieces, and the pieces are split instead.
"""
from __future__ import annotations

import math

import numpy as np

from learntok.data.corpora import DataError

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
    return (f"the {split} split holds {n_docs} documents, {n_bytes:,} bytes (fewer than {MIN_SPLIT_DOCUMENTS} "
            f"documents or {MIN_SPLIT_BYTES:,} bytes): its figures are too noisy to compare runs by; raise the "
            f"{split} fraction or give the source more text")


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
    min_pieces: int = 60,
    piece_bytes: int | None = None,
) -> tuple[dict[str, list[bytes]], dict[str, list[str]] | None]:
    """Documents -> {"train", "val", "test"} lists of documents, deterministic in (docs, seed), and
    the same lists of each document's name (a piece keeps its document's name; None without names).

    Fractions count documents, not bytes; a split with a nonzero fraction gets at least one
    document. With fewer than `min_pieces` documents, every document longer than `piece_bytes`
    (default: total bytes / min_pieces) is first cut into contiguous pieces of about that size.
    Within a split, documents keep their original order.
    """
    if val_fraction < 0 or test_fraction < 0 or val_fraction + test_fraction >= 1:
        raise DataError(f"val_fraction {val_fraction} + test_fraction {test_fraction} must be in [0, 1), each >= 0")
    named = [(d, n) for d, n in zip(docs, names or [""] * len(docs)) if d]
    if not named:
        raise DataError("no documents to split")
    if len(named) < min_pieces:
        size = piece_bytes or max(1, math.ceil(sum(len(d) for d, _ in named) / min_pieces))
        named = [(piece, n) for d, n in named for piece in cut_document(d, size)]
    n = len(named)
    n_val = max(1, round(val_fraction * n)) if val_fraction > 0 else 0
    n_test = max(1, round(test_fraction * n)) if test_fraction > 0 else 0
    if n - n_val - n_test < 1:
        raise DataError(f"{n} documents (after cutting) are too few for train, val ({n_val}) and test ({n_test})")
    order = np.random.default_rng(seed).permutation(n)
    chosen = {"val": order[:n_val], "test": order[n_val:n_val + n_test], "train": order[n_val + n_test:]}
    picked = {name: [named[i] for i in np.sort(chosen[name])] for name in SPLITS}
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
