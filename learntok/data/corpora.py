"""Corpora: turn a source (a built-in name or a path) into a list of documents as bytes.

Built-ins need no download: `shakespeare` and `kjv` ship with the package (see docs/data.md for
their attribution) and `python-stdlib` is the source of the running interpreter's standard
library; `python-docs` is the Python reference documentation that ships with the interpreter
(`pydoc_data.topics`): technical English with code, grammar, paths and lists. Paths may be a
text file, a folder, JSONL(.gz) or parquet. Empty documents are dropped.
"""
from __future__ import annotations

import gzip
import json
import sysconfig
from collections.abc import Collection, Iterable
from importlib import resources
from pathlib import Path

BUILTINS = ("shakespeare", "kjv", "python-stdlib", "python-docs")
_STDLIB_SKIP = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
_BINARY_PROBE = 8192  # bytes read to decide whether a file is binary (contains a NUL byte)


class DataError(Exception):
    """A data source or split that cannot be used; the message says which and why, in one line."""


def load_documents(source: str, text_field: str = "text") -> list[bytes]:
    """Built-in name or path -> documents (bytes, non-empty), in a deterministic order."""
    if source in ("shakespeare", "kjv"):
        with (resources.files("learntok") / "corpora" / f"{source}.jsonl.gz").open("rb") as f, gzip.open(f) as lines:
            return _jsonl_documents(lines, "text", f"built-in corpus {source!r}")
    if source == "python-stdlib":
        return _stdlib_documents()
    if source == "python-docs":
        return _python_docs_documents()
    path = Path(source).expanduser()
    if not path.exists():
        raise DataError(f"data source {source!r} is neither a built-in corpus ({', '.join(BUILTINS)}) "
                        f"nor an existing path")
    if path.is_dir():
        docs = _folder_documents(path)
    elif path.name.endswith(".jsonl.gz"):
        with gzip.open(path) as f:
            docs = _jsonl_documents(f, text_field, str(path))
    elif path.suffix == ".jsonl":
        with path.open("rb") as f:
            docs = _jsonl_documents(f, text_field, str(path))
    elif path.suffix == ".parquet":
        docs = _parquet_documents(path, text_field)
    else:
        docs = [path.read_bytes()]
        if not docs[0]:
            raise DataError(f"file {path} is empty")
    if not docs:
        raise DataError(f"data source {source!r} holds no documents")
    return docs


def json_records(lines: Iterable[bytes | str], where: str, error: type[Exception] = None):
    """(line number, object) for each non-blank JSON line; bad JSON or a non-object names the
    line (raised as `error`, DataError by default)."""
    error = error or DataError
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise error(f"{where} line {lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise error(f"{where} line {lineno}: not a JSON object")
        yield lineno, record


def _jsonl_documents(lines: Iterable[bytes], text_field: str, where: str) -> list[bytes]:
    """One JSON object a line; field `text_field` is the document. Blank lines are skipped."""
    docs = []
    for lineno, record in json_records(lines, where):
        if text_field not in record:
            raise DataError(f"{where} line {lineno}: no field {text_field!r}")
        text = record[text_field]
        if not isinstance(text, str):
            raise DataError(f"{where} line {lineno}: field {text_field!r} is {type(text).__name__}, not a string")
        if text:
            docs.append(text.encode("utf-8"))
    if not docs:
        raise DataError(f"{where} holds no documents")
    return docs


def _parquet_documents(path: Path, text_field: str) -> list[bytes]:
    """Column `text_field` of a parquet file; str or binary values, nulls and empties skipped."""
    import pyarrow.parquet as pq

    names = pq.read_schema(path).names
    if text_field not in names:
        raise DataError(f"{path}: no column {text_field!r} (columns: {', '.join(names)})")
    values = pq.read_table(path, columns=[text_field]).column(text_field).to_pylist()
    return [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in values if v]


def _folder_documents(root: Path) -> list[bytes]:
    """Every regular, non-empty, non-binary file below `root` (hidden entries skipped), sorted by path."""
    if (root / "index.json").exists():
        raise DataError(f"{root} is a prepared data folder (index.json): it is read as memory-mapped "
                        f"shards by ByteData.from_config (data.source), not as a list of documents")
    docs = [data for path in _files_below(root) if (data := path.read_bytes()) and not _is_binary(data)]
    if not docs:
        raise DataError(f"folder {root} holds no non-empty text files")
    return docs


def _files_below(root: Path, skip: Collection[str] = (), suffix: str = "") -> list[Path]:
    """Regular files below `root` ending in `suffix`, sorted; hidden names and names in `skip` pruned."""
    found = []
    for path in sorted(root.iterdir()):
        if path.name.startswith(".") or path.name in skip or path.is_symlink():
            continue
        if path.is_dir():
            found.extend(_files_below(path, skip, suffix))
        elif path.is_file() and path.name.endswith(suffix):
            found.append(path)
    return found


def _is_binary(data: bytes) -> bool:
    # The same test git and grep use: a NUL byte near the start. Latin-1 or broken UTF-8 text passes.
    return b"\0" in data[:_BINARY_PROBE]


def _stdlib_documents() -> list[bytes]:
    """All .py files of the running interpreter's standard library, without tests and site-packages."""
    root = Path(sysconfig.get_paths()["stdlib"])
    docs = [data for path in _files_below(root, _STDLIB_SKIP, ".py") if (data := path.read_bytes())]
    if not docs:
        raise DataError(f"built-in corpus 'python-stdlib': no .py files under {root}")
    return docs


def _python_docs_documents() -> list[bytes]:
    """The running interpreter's reference documentation (`pydoc_data.topics`, the text `help()`
    shows): one document per topic, in sorted topic order. About 0.5 MB on CPython 3.11."""
    try:  # part of CPython's standard library, but some distributions package it separately
        from pydoc_data.topics import topics
    except ImportError:
        raise DataError("built-in corpus 'python-docs': this Python has no pydoc_data module") from None
    return [topics[name].encode("utf-8") for name in sorted(topics) if topics[name]]
