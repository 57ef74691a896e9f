"""`learntok prepare`: sources -> a prepared data folder of uint8 shards (learntok.data.shards).

Streaming, so memory stays bounded whatever the input size: documents are read one at a time
(JSONL line by line, parquet in record batches, a large text file in pieces), filtered, given a
split, and appended to that split's current shard. The split is a pure function of (seed,
document ordinal): u = splitmix64(seed, ordinal) / 2^64; val if u < val_fraction, test if
u < val_fraction + test_fraction, else train. No shuffle in memory, and the same sources and
seed always give the same folder. Fractions are expected fractions of documents.

Inputs (several may be given; folders are walked in sorted path order, hidden entries skipped):
  *.jsonl, *.jsonl.gz   one JSON object a line; the document is field `text_field`
  *.parquet             column `text_field` (strings or binary), nulls and empties skipped
  anything else         a text file (binary files, with a NUL byte in the first 8 KB, are
                        skipped): one document, or pieces of about `piece_bytes` cut after a
                        newline when the file is larger than that (as data.split does for big files)
Any name ending in .gz is decompressed first (x.txt.gz is text). Devices, FIFOs and sockets are
refused (learntok.files.check_input); inside folders only regular files are read.
Filters: documents shorter than `min_doc_bytes` are dropped; longer than `max_doc_bytes` are cut
to it with `truncate` (the paper's 4096-byte cut) or dropped without it.
"""
from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from learntok.data.corpora import (DataError, check_not_prepared, file_kind, files_below, is_binary, jsonl_texts,
                                   parquet_texts, source_path)
from learntok.data.shards import FORMAT, INDEX, VERSION, SplitWriter
from learntok.data.split import SPLITS
from learntok.files import check_input, open_input

_MASK64 = (1 << 64) - 1


@dataclass
class PrepareOptions:
    text_field: str = "text"          # JSONL field / parquet column holding the text
    min_doc_bytes: int = 1            # drop documents shorter than this (bytes)
    max_doc_bytes: int | None = None  # longer documents are cut (truncate) or dropped; None = no limit
    truncate: bool = False            # cut long documents to max_doc_bytes instead of dropping them
    val_fraction: float = 0.05        # expected fraction of documents in val
    test_fraction: float = 0.05       # expected fraction of documents in test
    seed: int = 0                     # seed of the split hash
    shard_bytes: int = 256 << 20      # target size of one shard file (bytes)
    # text files larger than this are read as pieces of about this size (16 KiB: a 1 MB file gives
    # ~64 documents, so val and test get some)
    piece_bytes: int = 1 << 14

    def __post_init__(self) -> None:
        if self.val_fraction < 0 or self.test_fraction < 0 or self.val_fraction + self.test_fraction >= 1:
            raise DataError(f"val_fraction {self.val_fraction} + test_fraction {self.test_fraction} "
                            "must be in [0, 1), each >= 0")
        too_small = not self.truncate and self.max_doc_bytes is not None and self.max_doc_bytes < self.min_doc_bytes
        if self.max_doc_bytes is not None and (self.max_doc_bytes < 1 or too_small):
            raise DataError(f"max_doc_bytes {self.max_doc_bytes} is below min_doc_bytes {self.min_doc_bytes}")
        if self.truncate and self.max_doc_bytes is None:
            raise DataError("truncate needs max_doc_bytes")
        if self.shard_bytes < 1 or self.piece_bytes < 1:
            raise DataError("shard_bytes and piece_bytes must be >= 1")


def splitmix64(x: int) -> int:
    """The splitmix64 finaliser (Steele et al. 2014): a cheap, well-mixed 64-bit hash."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def split_of(ordinal: int, seed: int, val_fraction: float, test_fraction: float) -> str:
    """The split of document `ordinal` (0-based over every document read, before filtering)."""
    u = splitmix64(splitmix64(seed) ^ ordinal) / 2.0 ** 64
    return "val" if u < val_fraction else "test" if u < val_fraction + test_fraction else "train"


# ---------------------------------------------------------------- reading sources


def input_files(sources: list[str]) -> list[Path]:
    """The files of the sources: each a regular file, or a folder walked (learntok.files.check_input:
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


def _text_docs(raw, piece_bytes: int, buf: bytes = b"") -> Iterator[bytes]:
    """The whole file (after `buf`, already read from it), or pieces of about piece_bytes cut just
    after a newline when one falls in a piece's second half (data.split.cut_document, streamed)."""
    while True:
        chunk = raw.read(piece_bytes)
        buf += chunk
        while len(buf) > piece_bytes:
            newline = buf.rfind(b"\n", piece_bytes // 2, piece_bytes)
            end = newline + 1 if newline >= 0 else piece_bytes
            yield buf[:end]
            buf = buf[end:]
        if not chunk:
            break
    if buf:
        yield buf


def documents(path: Path, opts: PrepareOptions) -> Iterator[tuple[bytes, int]]:
    """(document, input bytes consumed so far) for one file, streamed."""
    kind = file_kind(path)
    if kind == "parquet":
        yield from ((doc, 0) for doc in parquet_texts(path, opts.text_field))
        yield b"", path.stat().st_size                                          # progress for the whole file at the end
        return
    with open_input(path, "prepare: source") as raw:                          # .gz decompressed
        if kind == "jsonl":
            docs = jsonl_texts(raw, opts.text_field, str(path))
        else:
            head = raw.read(8192)
            if is_binary(head):
                return
            docs = _text_docs(raw, opts.piece_bytes, head)
        for doc in docs:
            yield doc, raw.tell()


# ---------------------------------------------------------------- the command


def empty_split(splits: dict[str, dict], opts: PrepareOptions, n_read: int) -> str | None:
    """Why the prepared folder would be unusable (a split that a run or `eval` may ask for holds
    no document), with how to fix it; None when every requested split has documents."""
    fractions = {"train": 1.0, "val": opts.val_fraction, "test": opts.test_fraction}
    for split, info in splits.items():
        if fractions[split] > 0 and not info["documents"]:
            if split == "train":
                return f"prepare: no training documents kept ({n_read} read): check --min-doc-bytes / --max-doc-bytes"
            return (f"prepare: the {split} split got no documents ({n_read} documents read, expected fraction "
                    f"{fractions[split]}): cut text files into more documents with a smaller --piece-bytes "
                    f"(now {opts.piece_bytes}), raise --{split}-fraction, or try another --seed")
    return None


def prepare(sources: list[str], out: str | Path, opts: PrepareOptions | None = None, progress: bool = True) -> dict:
    """Write a prepared data folder at `out` (which must not exist or be empty). Returns the index."""
    opts = opts or PrepareOptions()
    out = Path(out).expanduser()
    files = input_files(sources)
    if out.exists() and any(out.iterdir()):
        raise DataError(f"prepare: output folder {out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    writers = {s: SplitWriter(out, s, opts.shard_bytes) for s in SPLITS}
    counts = {"read": 0, "dropped_short": 0, "dropped_long": 0, "truncated": 0}
    t0, total = time.perf_counter(), sum(f.stat().st_size for f in files)
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="prepare", disable=not progress,
               delay=1.0)                                        # a quick failure stays one line
    try:
        for path in files:
            done = 0
            for doc, pos in documents(path, opts):
                bar.update(max(0, pos - done))
                done = max(done, pos)
                if not doc:
                    continue
                ordinal = counts["read"]
                counts["read"] += 1
                if len(doc) < opts.min_doc_bytes:
                    counts["dropped_short"] += 1
                    continue
                if opts.max_doc_bytes is not None and len(doc) > opts.max_doc_bytes:
                    if not opts.truncate:
                        counts["dropped_long"] += 1
                        continue
                    doc = doc[:opts.max_doc_bytes]
                    counts["truncated"] += 1
                writers[split_of(ordinal, opts.seed, opts.val_fraction, opts.test_fraction)].add(doc)
    except BaseException:
        bar.close()
        for w in writers.values():
            w.close()
        shutil.rmtree(out, ignore_errors=True)                    # never leave a folder that looks usable
        raise
    bar.close()
    splits = {s: w.close() for s, w in writers.items()}
    empty = empty_split(splits, opts, counts["read"])
    if empty:
        shutil.rmtree(out, ignore_errors=True)
        raise DataError(empty)
    seconds = time.perf_counter() - t0
    index = {"format": FORMAT, "version": VERSION, "splits": splits, "documents": counts,
             "sources": [str(f) for f in files] if len(files) <= 1000 else [str(s) for s in sources],
             "input_bytes": total, "seconds": round(seconds, 3), "options": asdict(opts)}
    (out / INDEX).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")  # last: marks the folder complete
    return index
