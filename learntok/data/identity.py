"""A data source's identity: what a run records of the bytes it was trained on, so that a resume
or a rerun that reuses finished results notices when the same path now holds other data.

The identity maps each file of the source to its size and a BLAKE2b hash: of all of it up to
WHOLE_BYTES, else of its first and last EDGE_BYTES (cheap at any size; an edit in the middle of a
large file that keeps its size goes unnoticed, as with rsync's quick check). A text, JSONL or
parquet file is one entry; a folder one entry per file it reads (`corpora.files_below`); a
prepared folder its index.json (which lists every shard's size and document count); a shipped
corpus its packaged file; `python-stdlib` and `python-docs` the interpreter's version.
"""

from __future__ import annotations

import hashlib
import platform
from importlib import resources
from pathlib import Path

import learntok.data.shards as shards
from learntok.data.corpora import BUILTINS, SHIPPED, files_below, source_path
from learntok.util.errors import DataError

WHOLE_BYTES = 1 << 20  # files up to this size are hashed whole
EDGE_BYTES = 1 << 16  # a larger file: its first and last this many bytes
DATA_IDENTITY = "data_identity"  # its key in a checkpoint's state.pt and in compare's done.json


def file_identity(path) -> str:
    """ "SIZE bytes, blake2b HEX" of one file (its head and tail only above WHOLE_BYTES)."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(0)
        if size <= WHOLE_BYTES:
            h.update(f.read())
        else:
            h.update(f.read(EDGE_BYTES))
            f.seek(size - EDGE_BYTES)
            h.update(f.read(EDGE_BYTES))
    return f"{size} bytes, blake2b {h.hexdigest()}"


def source_identity(source: str) -> dict[str, str]:
    """{file name: file_identity} of the files `source` is read from (names relative to a folder)."""
    if source in SHIPPED and not shards.is_prepared(source):
        with resources.as_file(resources.files("learntok") / "corpora" / f"{source}.jsonl.gz") as path:
            return {f"{source}.jsonl.gz": file_identity(path)}
    if source in BUILTINS and not shards.is_prepared(source):
        return {source: f"Python {platform.python_version()}"}
    path = source_path(source)
    try:
        if shards.is_prepared(path):
            return {shards.INDEX: file_identity(path / shards.INDEX)}
        if path.is_dir():
            return {str(p.relative_to(path)): file_identity(p) for p in files_below(path)}
        return {path.name: file_identity(path)}
    except OSError as e:
        raise DataError(f"cannot read data source {path}: {e.strerror or e}") from None


def changes(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    """What differs between two identities, one phrase a file: changed, removed or added."""
    found = []
    for name in sorted(set(recorded) | set(now)):
        was, is_ = recorded.get(name), now.get(name)
        if was == is_:
            continue
        if was is None:
            found.append(f"{name} was added")
        elif is_ is None:
            found.append(f"{name} was removed")
        elif was.split(",")[0] != is_.split(",")[0]:
            found.append(f"{name} changed size ({was.split(',')[0]} -> {is_.split(',')[0]})")
        else:
            found.append(f"{name} changed content ({was.split(',')[0]}, another hash)")
    return found


def check_identity(recorded, source: str, action: str, where: Path) -> None:
    """Refuse to `action` (resume, reuse the results of) the run at `where` when the data source
    it recorded now holds other bytes: one line naming the file and what changed. A run recorded
    before identities were (`recorded` None) is not checked."""
    if recorded is None:
        return
    if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
        raise DataError(f"{where}: its data identity is {recorded!r}, not a map of files; a damaged run?")
    found = changes(recorded, source_identity(source))
    if found:
        more = f" and {len(found) - 2} more" if len(found) > 2 else ""
        raise DataError(
            f"cannot {action} {where}: its data source {source} changed since it was trained: "
            f"{'; '.join(found[:2])}{more}; restore the data or train into another --out"
        )
