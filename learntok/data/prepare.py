"""`learntok prepare`: sources -> a prepared data folder of uint8 shards (learntok.data.shards).

Streaming, so memory stays bounded whatever the input size: documents are read one at a time
(JSONL line by line, parquet in record batches, a text file in pieces) by the reader training
uses (`corpora.file_documents`), given a split, filtered, and appended to that split's current
shard. The split is `data.split.plan_split`'s, the one training on the raw source uses: a first
pass counts the documents (and, when there are few, cuts them as training does), so a prepared
folder of one source holds the same documents in the same splits as `data.source=SOURCE` (with
the same seed and fractions, default piece size and no filters). Documents are not shuffled in
memory: the same sources and seed always give the same folder.

Inputs (several may be given; folders are walked in sorted path order, hidden entries skipped):
  *.jsonl, *.jsonl.gz   one JSON object a line; the document is field `text_field`
  *.parquet             column `text_field` (strings or binary), nulls and empties skipped
  anything else         a text file (binary files, with a NUL byte in the first 8 KB, are
                        skipped): pieces of about `piece_bytes` cut after a newline
Any name ending in .gz is decompressed first (x.txt.gz is text). Devices, FIFOs and sockets are
refused (learntok.util.files.check_input); inside folders only regular files are read.
Filters: documents shorter than `min_doc_bytes` are dropped; longer than `max_doc_bytes` are cut
to it with `truncate` (the paper's 4096-byte cut) or dropped without it. They act after the
split: a document keeps the split it would have had without them.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from learntok.data.corpora import PIECE_BYTES, check_not_prepared, file_documents, files_below, source_path
from learntok.data.shards import FORMAT, INDEX, VERSION, SplitWriter
from learntok.data.split import SPLITS, plan_split, small_split
from learntok.util.errors import DataError
from learntok.util.files import check_input
from learntok.util.progress import Progress, note


@dataclass
class PrepareOptions:
    text_field: str = "text"  # JSONL field / parquet column holding the text
    min_doc_bytes: int = 1  # drop documents shorter than this (bytes)
    max_doc_bytes: int | None = None  # longer documents are cut (truncate) or dropped; None = no limit
    truncate: bool = False  # cut long documents to max_doc_bytes instead of dropping them
    val_fraction: float = 0.05  # expected fraction of documents in val
    test_fraction: float = 0.05  # expected fraction of documents in test
    seed: int = 0  # seed of the split hash
    shard_bytes: int = 256 << 20  # target size of one shard file (bytes)
    piece_bytes: int = PIECE_BYTES  # text files are read in pieces of about this many bytes (the default is training's)

    def __post_init__(self) -> None:
        if self.val_fraction < 0 or self.test_fraction < 0 or self.val_fraction + self.test_fraction >= 1:
            raise DataError(
                f"val_fraction {self.val_fraction} + test_fraction {self.test_fraction} must be in [0, 1), each >= 0"
            )
        too_small = not self.truncate and self.max_doc_bytes is not None and self.max_doc_bytes < self.min_doc_bytes
        if self.max_doc_bytes is not None and (self.max_doc_bytes < 1 or too_small):
            raise DataError(f"max_doc_bytes {self.max_doc_bytes} is below min_doc_bytes {self.min_doc_bytes}")
        if self.truncate and self.max_doc_bytes is None:
            raise DataError("truncate needs max_doc_bytes")
        if self.shard_bytes < 1 or self.piece_bytes < 1:
            raise DataError("shard_bytes and piece_bytes must be >= 1")


# ---------------------------------------------------------------- reading sources


def input_files(sources: list[str]) -> list[Path]:
    """The files of the sources: each a regular file, or a folder walked (learntok.util.files.check_input:
    a device, FIFO or socket is refused before anything opens it)."""
    files = []
    for s in sources:
        p = check_input(source_path(s), "prepare: source", folder=True)
        if p.is_dir():
            check_not_prepared(p)
        files.extend(files_below(p) if p.is_dir() else [p])
    if not files:
        raise DataError(f"prepare: no files in {', '.join(sources)}")
    return files


def read_documents(files: list[Path], opts: PrepareOptions, bar: Progress | None = None) -> Iterator[bytes]:
    """The non-empty documents of every file in order (`corpora.file_documents`), moving `bar`
    by the input bytes read."""
    for path in files:
        done = 0
        for doc, pos in file_documents(path, opts.text_field, opts.piece_bytes, "prepare: source"):
            if bar is not None:
                bar.update(max(0, pos - done))
                done = max(done, pos)
            if doc:
                yield doc


# ---------------------------------------------------------------- the command


def empty_split(splits: dict[str, dict], opts: PrepareOptions, n_read: int) -> str | None:
    """Why the prepared folder would be unusable (a split that a run or `eval` may ask for holds
    no document), with how to fix it; None when every requested split has documents."""
    fractions = {"train": 1.0, "val": opts.val_fraction, "test": opts.test_fraction}
    for split, info in splits.items():
        if fractions[split] > 0 and not info["documents"]:
            if split == "train":
                return f"prepare: no training documents kept ({n_read} read): check --min-doc-bytes / --max-doc-bytes"
            return (
                f"prepare: the {split} split got no documents ({n_read} documents read, expected fraction "
                f"{fractions[split]}): cut text files into more documents with a smaller --piece-bytes "
                f"(now {opts.piece_bytes}), raise --{split}-fraction, or try another --seed"
            )
    return None


def kept(piece: bytes, opts: PrepareOptions, counts: dict[str, int]) -> bytes | None:
    """A document piece as it is written (cut to --max-doc-bytes with --truncate), or None where
    it is dropped: shorter than --min-doc-bytes, or longer than --max-doc-bytes without
    --truncate. `counts` adds up which."""
    if len(piece) < opts.min_doc_bytes:
        counts["dropped_short"] += 1
        return None
    if opts.max_doc_bytes is not None and len(piece) > opts.max_doc_bytes:
        if not opts.truncate:
            counts["dropped_long"] += 1
            return None
        counts["truncated"] += 1
        return piece[: opts.max_doc_bytes]
    return piece


def prepare(sources: list[str], out: str | Path, opts: PrepareOptions | None = None, progress: bool = True) -> dict:
    """Write a prepared data folder at `out` (which must not exist or be empty). Returns the index."""
    opts = opts or PrepareOptions()
    out = Path(out).expanduser()
    files = input_files(sources)
    if all(f.stat().st_size == 0 for f in files):
        raise DataError(
            f"prepare: every source is empty ({', '.join(map(str, files[:3]))}{', ...' if len(files) > 3 else ''})"
        )
    if out.exists() and any(out.iterdir()):
        raise DataError(f"prepare: output folder {out} is not empty")
    counts = {"read": 0, "dropped_short": 0, "dropped_long": 0, "truncated": 0}
    t0, total = time.perf_counter(), sum(f.stat().st_size for f in files)
    bar = lambda desc: Progress(total=total, unit="B", unit_scale=True, desc=desc, enabled=progress)  # noqa: E731
    writers: dict[str, SplitWriter] = {}
    out.mkdir(parents=True, exist_ok=True)
    try:
        for split in SPLITS:
            writers[split] = SplitWriter(out, split, opts.shard_bytes)
        with bar("prepare: count") as counting:  # pass 1: the split plan
            plan = plan_split(
                lambda: read_documents(files, opts, counting), opts.seed, opts.val_fraction, opts.test_fraction
            )
        with bar("prepare: write") as writing:  # pass 2: every document to its split's shards
            for piece in (p for doc in read_documents(files, opts, writing) for p in plan.pieces(doc)):
                split = plan.split_of(counts["read"])
                counts["read"] += 1
                if (piece := kept(piece, opts, counts)) is not None:
                    writers[split].add(piece)
        splits = {s: w.close() for s, w in writers.items()}
        empty = empty_split(splits, opts, counts["read"])
        if empty:
            raise DataError(empty)
        seconds = time.perf_counter() - t0
        for split in ("val", "test"):
            if warning := small_split(split, splits[split]["documents"], splits[split]["bytes"]):
                note(f"warning: {warning}", progress)
        index = {
            "format": FORMAT,
            "version": VERSION,
            "splits": splits,
            "documents": counts,
            "split": plan.describe(),
            "sources": [str(f) for f in files] if len(files) <= 1000 else [str(s) for s in sources],
            "input_bytes": total,
            "seconds": round(seconds, 3),
            "options": asdict(opts),
        }
        (out / INDEX).write_text(
            json.dumps(index, indent=2) + "\n", encoding="utf-8"
        )  # last: marks the folder complete
    except BaseException:  # Ctrl-C, disk full, bad data: nothing half-written stays
        for w in writers.values():
            w.discard()
        shutil.rmtree(out, ignore_errors=True)  # never leave a folder that looks usable
        raise
    return index
