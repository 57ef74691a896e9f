"""A prepared data folder: uint8 byte shards read through numpy memmaps (docs/design.md §6).

Layout written by `learntok prepare` (learntok.data.prepare):

    DATA_DIR/index.json          format version, per-split counts, shard files, the options used
    DATA_DIR/{split}_{k:05d}.bin  raw bytes of whole documents, end to end (about shard_bytes each)
    DATA_DIR/{split}_docs.npy     (n_docs + 1,) int64 offsets of the split's documents into the
                                  concatenation of its shards: document i is bytes [o[i], o[i + 1])

A document never straddles two shards, so a shard is a plain file of whole documents. Readers
see a split as one virtual byte array (`ShardedBytes`) and never load it into memory: a batch
reads only the bytes of its rows. `index.json` is written last; its presence marks a complete
folder.
"""

from __future__ import annotations

import os
import shutil
from array import array
from pathlib import Path

import numpy as np

from learntok.data.split import SPLITS
from learntok.util.errors import DataError
from learntok.util.files import inside
from learntok.util.json_toml import parse_json

FORMAT = "learntok-shards"
VERSION = 1
INDEX = "index.json"


def is_prepared(path: str | Path) -> bool:
    p = Path(path).expanduser()
    return p.is_dir() and (p / INDEX).is_file()


def shard_name(split: str, k: int) -> str:
    return f"{split}_{k:05d}.bin"


class ShardedBytes:
    """Several uint8 memmaps seen as one array: len(), int-array indexing and slicing. With
    one shard, use the memmap itself (`open_split` does)."""

    def __init__(self, parts: list[np.ndarray]):
        self.parts = parts
        self.starts = np.cumsum([0] + [len(p) for p in parts])  # (n_parts + 1,) int64
        self.dtype = np.dtype(np.uint8)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            start, stop, step = idx.indices(len(self))
            if step != 1:
                raise IndexError("ShardedBytes slices must be contiguous")
            return self._range(start, stop)
        idx = np.asarray(idx, dtype=np.int64)
        part = np.searchsorted(self.starts, idx, side="right") - 1  # same shape as idx
        out = np.empty(idx.shape, dtype=np.uint8)
        for k in np.unique(part):
            sel = part == k
            out[sel] = self.parts[k][idx[sel] - self.starts[k]]
        return out

    def _range(self, start: int, stop: int) -> np.ndarray:
        if stop <= start:
            return np.empty(0, dtype=np.uint8)
        first, last = (int(np.searchsorted(self.starts, i, side="right")) - 1 for i in (start, stop - 1))
        pieces = [
            self.parts[k][max(start, self.starts[k]) - self.starts[k] : min(stop, self.starts[k + 1]) - self.starts[k]]
            for k in range(first, last + 1)
        ]
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def read_index(root: str | Path) -> dict:
    root = Path(root).expanduser()
    try:
        index = parse_json((root / INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {root / INDEX}: {' '.join(str(e).split())}") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT or index.get("version") != VERSION:
        found = index if isinstance(index, dict) else {}
        raise DataError(
            f"{root / INDEX}: format {found.get('format')!r} version {found.get('version')!r}; "
            f"this learntok reads {FORMAT!r} version {VERSION}"
        )
    _check_splits(index.get("splits"), root / INDEX)
    return index


def _check_splits(splits, where: Path) -> None:
    """Every split of the index: {"documents": int, "bytes": int, "shards": [[name, size], ...]}."""
    if not isinstance(splits, dict) or set(splits) != set(SPLITS):
        got = sorted(splits) if isinstance(splits, dict) else "none"
        raise DataError(f"{where}: 'splits' must name {', '.join(SPLITS)} (found {got}); a damaged index?")
    for name, info in splits.items():
        ok = (
            isinstance(info, dict)
            and all(isinstance(info.get(k), int) for k in ("documents", "bytes"))
            and isinstance(info.get("shards"), list)
            and all(
                isinstance(x, list)
                and len(x) == 2
                and isinstance(x[0], str)
                and isinstance(x[1], int)
                and "/" not in x[0]
                for x in info["shards"]
            )
        )
        if not ok:
            raise DataError(f"{where}: split {name!r} is not {{documents, bytes, shards: [[file, size], ...]}}")


def open_split(root: str | Path, split: str, index: dict | None = None) -> tuple[np.ndarray | ShardedBytes, np.ndarray]:
    """(bytes, offsets) of one split, memory-mapped: bytes supports len(), int-array indexing and
    contiguous slices; offsets (n_docs + 1,) int64."""
    root = Path(root).expanduser()
    info = (index or read_index(root))["splits"][split]
    parts = []
    for name, size in info["shards"]:
        path = inside(root, name, f"{root / INDEX}: shard", DataError)  # a name read from a file
        if not path.is_file() or path.stat().st_size != size:
            raise DataError(f"{path}: missing or not {size} bytes as {root / INDEX} says (an interrupted copy?)")
        if size:
            parts.append(np.memmap(path, dtype=np.uint8, mode="r"))
    offsets = _load_offsets(root / f"{split}_docs.npy")
    if len(offsets) != info["documents"] + 1 or (len(offsets) and int(offsets[-1]) != info["bytes"]):
        raise DataError(f"{root / f'{split}_docs.npy'} does not match {root / INDEX}")
    _check_ascending(root / f"{split}_docs.npy", offsets)
    data = parts[0] if len(parts) == 1 else (ShardedBytes(parts) if parts else np.empty(0, dtype=np.uint8))
    return data, offsets


OFFSET_CHUNK = 1 << 22  # offsets checked this many at a time (32 MiB), however many documents


def _check_ascending(path: Path, offsets: np.ndarray) -> None:
    """Document offsets start at 0 and never decrease (each document a slice of the bytes after
    the one before): else a DataError naming the file and the first offset out of order."""
    if len(offsets) and int(offsets[0]) != 0:
        raise DataError(f"{path}: the first document offset is {int(offsets[0])}, not 0 (not written by prepare?)")
    for a in range(0, max(len(offsets) - 1, 0), OFFSET_CHUNK):
        chunk = np.asarray(offsets[a : a + OFFSET_CHUNK + 1])
        down = np.flatnonzero(chunk[1:] < chunk[:-1])
        if len(down):
            i = a + int(down[0]) + 1
            raise DataError(
                f"{path}: document offset {i} ({int(offsets[i])}) is below the one before it "
                f"({int(offsets[i - 1])}): the folder is corrupt or not written by prepare; prepare it again"
            )


def _load_offsets(path: Path) -> np.ndarray:
    """A split's (n_docs + 1,) int64 offsets, memory-mapped; anything else is a DataError."""
    try:
        offsets = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:  # missing, truncated, or Python objects
        raise DataError(f"cannot read {path}: {' '.join(str(e).split())}") from None
    if offsets.dtype != np.int64 or offsets.ndim != 1:
        raise DataError(f"{path} holds {offsets.dtype} of shape {offsets.shape}, not (n_docs + 1,) int64 offsets")
    return offsets


class SplitWriter:
    """Appends documents of one split to shards of about `shard_bytes` and their offsets to a
    temporary file (memory stays bounded: buffers are flushed every `flush_docs` documents)."""

    def __init__(self, root: Path, split: str, shard_bytes: int, flush_docs: int = 1 << 16):
        self.root, self.split, self.shard_bytes, self.flush_docs = root, split, shard_bytes, flush_docs
        self.shards: list[list] = []  # [name, bytes] per shard
        self.n_docs, self.n_bytes = 0, 0
        self._file = None
        self._pending = array("q")  # offsets not yet on disk
        self._offsets_tmp = root / f".{split}_docs.tmp"
        self._offsets = open(self._offsets_tmp, "wb")
        self._offsets.write(np.zeros(1, dtype=np.int64).tobytes())  # offset of document 0

    def add(self, doc: bytes) -> None:
        if self._file is None or (self.shards[-1][1] and self.shards[-1][1] + len(doc) > self.shard_bytes):
            self._next_shard()
        self._file.write(doc)
        self.shards[-1][1] += len(doc)
        self.n_docs += 1
        self.n_bytes += len(doc)
        self._pending.append(self.n_bytes)
        if len(self._pending) >= self.flush_docs:
            self._flush()

    def _next_shard(self) -> None:
        if self._file is not None:
            self._file.close()
        name = shard_name(self.split, len(self.shards))
        self._file = open(self.root / name, "wb", buffering=1 << 22)
        self.shards.append([name, 0])

    def _flush(self) -> None:
        self._offsets.write(self._pending.tobytes())
        self._pending = array("q")

    def close(self) -> dict:
        """Finish the shard and write {split}_docs.npy; returns this split's index entry."""
        if self._file is not None:
            self._file.close()
        self._flush()
        self._offsets.close()
        # a .npy header, then the offsets copied in pieces (bounded memory) by plain writes: a
        # memory map written on a full disk would kill the process (SIGBUS) instead of raising
        n = os.path.getsize(self._offsets_tmp) // 8
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.int64)), "fortran_order": False, "shape": (n,)}
        with open(self._offsets_tmp, "rb") as src, open(self.root / f"{self.split}_docs.npy", "wb") as dst:
            np.lib.format.write_array_header_1_0(dst, header)
            shutil.copyfileobj(src, dst, 1 << 22)
        os.remove(self._offsets_tmp)
        return {"documents": self.n_docs, "bytes": self.n_bytes, "shards": self.shards}

    def discard(self) -> None:
        """Close the open files without finishing them (the caller removes the folder)."""
        for f in (self._file, self._offsets):
            if f is not None:
                try:
                    f.close()
                except OSError:  # its last flush may fail: the disk is full
                    pass
