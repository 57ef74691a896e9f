"""Corpora: turn a source (a built-in name or a path) into a list of documents as bytes.

Built-ins need no download: `shakespeare` and `kjv` ship with the package (see docs/data.md for
their attribution) and `python-stdlib` is the source of the running interpreter's standard
library; `python-docs` is the Python reference documentation that ships with the interpreter
(`pydoc_data.topics`): technical English with code, grammar, paths and lists, 0.5 MB; `python-rst`
ships with the package: the Python Library Reference's reStructuredText sources, 6.3 MB of the
same kind of text (code blocks, option lists, paths, indentation); `debref-de`, `-fr`, `-es`, `-ja`
and `-zh` ship with the package: the Debian Reference manual in German, French, Spanish, Japanese
and Simplified Chinese, one document per section, 0.5-0.6 MB each. Paths may be a text file, a
folder, JSONL or parquet; any name ending in .gz is decompressed (x.txt.gz is text).
Files are read through learntok.files: regular files only, at most files.memory_budget() bytes in
all. Empty documents are dropped.
"""
from __future__ import annotations

import gzip
import json
import re
import sysconfig
from collections.abc import Collection, Iterable, Iterator
from importlib import resources
from pathlib import Path

from learntok.errors import DataError
from learntok.files import check_input, memory_budget, open_input, read_input, too_large

DEBIAN_REFERENCE = ("debref-de", "debref-fr", "debref-es", "debref-ja", "debref-zh")  # scripts/build_debian_reference.py
BUILTINS = ("shakespeare", "kjv", "python-stdlib", "python-docs", "python-rst", *DEBIAN_REFERENCE)
_SHIPPED = ("shakespeare", "kjv", "python-rst", *DEBIAN_REFERENCE)  # learntok/corpora/NAME.jsonl.gz
_STDLIB_SKIP = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
_BINARY_PROBE = 8192  # bytes read to decide whether a file is binary (contains a NUL byte)
# Files `learntok prepare` writes before its index.json (learntok.data.shards: shard_name, SplitWriter)
_PREPARE_PARTS = re.compile(r"(train|val|test)_(\d{5}\.bin|docs\.npy)|\.(train|val|test)_docs\.tmp")




def load_documents(source: str, text_field: str = "text") -> list[bytes]:
    """Built-in name or path -> documents (bytes, non-empty), in a deterministic order."""
    return load_named_documents(source, text_field)[0]


def source_path(source: str) -> Path:
    """The path a data source names; an empty source (which would be the current folder) is refused."""
    if not str(source).strip():
        raise DataError(f"data.source is empty: name a built-in corpus ({', '.join(BUILTINS)}) or a path")
    return Path(source).expanduser()


def load_named_documents(source: str, text_field: str = "text") -> tuple[list[bytes], list[str] | None]:
    """(documents, their file names relative to the folder when `source` is a folder, else None).
    Sources are read into memory, at most files.memory_budget() bytes (larger: `learntok prepare`)."""
    path = source_path(source)
    if source not in BUILTINS and path.is_dir():
        return _folder_documents(path)
    return _unnamed_documents(source, text_field), None


def _unnamed_documents(source: str, text_field: str) -> list[bytes]:
    if source in _SHIPPED:
        with (resources.files("learntok") / "corpora" / f"{source}.jsonl.gz").open("rb") as f, gzip.open(f) as lines:
            return _jsonl_documents(lines, "text", f"built-in corpus {source!r}")
    if source == "python-stdlib":
        return _stdlib_documents()
    if source == "python-docs":
        return _python_docs_documents()
    path = source_path(source)
    if not path.exists() and not path.is_symlink():
        raise DataError(f"data source {source!r} is neither a built-in corpus ({', '.join(BUILTINS)}) "
                        f"nor an existing path")
    kind = file_kind(path)
    if kind == "jsonl":
        with open_input(path, "data source") as f:
            docs = _jsonl_documents(f, text_field, str(path), memory_budget())
    elif kind == "parquet":
        docs = list(bounded(parquet_texts(check_input(path, "data source"), text_field), "data source", path))
    else:
        docs = [read_input(path, "data source")]
        if not docs[0]:
            raise DataError(f"file {path} is empty")
    if not docs:
        raise DataError(f"data source {source!r} holds no documents")
    return docs


def file_kind(path: Path) -> str:
    """How a file's documents are read, by its name (a trailing .gz aside): "jsonl" (one JSON
    object a line), "parquet" (a column) or "text" (the file is the text)."""
    name = path.name.removesuffix(".gz")
    return "jsonl" if name.endswith(".jsonl") else "parquet" if path.name.endswith(".parquet") else "text"


def bounded(docs: Iterable[bytes], what: str, path: Path, limit: int | None = None) -> Iterator[bytes]:
    """The documents, refused (too_large) once together they exceed `limit` bytes (default memory_budget())."""
    limit, total = memory_budget() if limit is None else limit, 0
    for doc in docs:
        total += len(doc)
        if total > limit:
            raise DataError(too_large(what, path, None, limit))
        yield doc


def json_records(lines: Iterable[bytes | str], where: str, error: type[Exception] = None):
    """(line number, object) for each non-blank JSON line; bad UTF-8, bad JSON or a non-object
    names the line (raised as `error`, DataError by default)."""
    error = error or DataError
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8") if isinstance(line, bytes) else line)
        except UnicodeDecodeError as e:
            raise error(f"{where} line {lineno}: not UTF-8 text (byte {e.start}: {e.reason})") from None
        except json.JSONDecodeError as e:
            raise error(f"{where} line {lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise error(f"{where} line {lineno}: not a JSON object")
        yield lineno, record


def jsonl_texts(lines: Iterable[bytes], text_field: str, where: str) -> Iterator[bytes]:
    """One JSON object a line; field `text_field` (a string) of each, as UTF-8 bytes, streamed
    (empty ones too). Blank lines are skipped."""
    for lineno, record in json_records(lines, where):
        if text_field not in record:
            raise DataError(f"{where} line {lineno}: no field {text_field!r}")
        text = record[text_field]
        if not isinstance(text, str):
            raise DataError(f"{where} line {lineno}: field {text_field!r} is {type(text).__name__}, not a string")
        yield text.encode("utf-8")


def _jsonl_documents(lines: Iterable[bytes], text_field: str, where: str, limit: int | None = None) -> list[bytes]:
    """The non-empty documents of a JSON-lines file (jsonl_texts), at most `limit` bytes of them."""
    texts = jsonl_texts(lines, text_field, where)
    docs = [text for text in (bounded(texts, "data source", Path(where), limit) if limit is not None else texts) if text]
    if not docs:
        raise DataError(f"{where} holds no documents")
    return docs


def parquet_texts(path: Path, text_field: str) -> Iterator[bytes]:
    """Column `text_field` of a parquet file, streamed in batches; str or binary values, nulls
    and empties skipped."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    if text_field not in f.schema_arrow.names:
        raise DataError(f"{path}: no column {text_field!r} (columns: {', '.join(f.schema_arrow.names)})")
    for batch in f.iter_batches(columns=[text_field], batch_size=1024):
        for v in batch.column(0).to_pylist():
            if v:
                yield v.encode("utf-8") if isinstance(v, str) else bytes(v)


def prepared_state(root: Path) -> str | None:
    """"prepared" for a folder `learntok prepare` finished (its shards and index.json),
    "unfinished" for the shards a stopped `prepare` leaves without index.json, else None."""
    try:
        parts = any(_PREPARE_PARTS.fullmatch(p.name) for p in root.iterdir())
    except OSError:                                              # not a folder, or unreadable
        return None
    return ("prepared" if (root / "index.json").exists() else "unfinished") if parts else None


def check_not_prepared(root: Path) -> None:
    """A prepared data folder, finished or not (or any folder with an index.json), is never read
    as a folder of text files: its shards would become documents."""
    if (root / "index.json").exists():
        raise DataError(f"{root} is a prepared data folder (index.json): it is read as memory-mapped "
                        f"shards by ByteData.from_config (data.source), not as a list of documents")
    if prepared_state(root) == "unfinished":
        parts = sorted(p.name for p in root.iterdir() if _PREPARE_PARTS.fullmatch(p.name))
        raise DataError(f"{root} is an unfinished prepared folder ({', '.join(parts[:3])}, ... but no index.json: "
                        f"`learntok prepare` stopped before the end); prepare it again into an empty folder")


def _folder_documents(root: Path) -> tuple[list[bytes], list[str]]:
    """Every regular, non-empty, non-binary file below `root` (hidden entries skipped), sorted by
    path, and its path relative to `root`."""
    check_not_prepared(root)
    docs, names, budget = [], [], memory_budget()
    for path in files_below(root):
        data = read_input(path, "data source", budget)
        if data and not is_binary(data):
            docs.append(data)
            names.append(str(path.relative_to(root)))
            budget -= len(data)
    if not docs:
        raise DataError(f"folder {root} holds no non-empty text files")
    return docs, names


def files_below(root: Path, skip: Collection[str] = (), suffix: str = "") -> list[Path]:
    """Regular files below `root` ending in `suffix`, sorted; hidden names and names in `skip` pruned."""
    found = []
    for path in sorted(root.iterdir()):
        if path.name.startswith(".") or path.name in skip or path.is_symlink():
            continue
        if path.is_dir():
            found.extend(files_below(path, skip, suffix))
        elif path.is_file() and path.name.endswith(suffix):
            found.append(path)
    return found


def is_binary(data: bytes) -> bool:
    # The same test git and grep use: a NUL byte near the start. Latin-1 or broken UTF-8 text passes.
    return b"\0" in data[:_BINARY_PROBE]


def _stdlib_documents() -> list[bytes]:
    """All .py files of the running interpreter's standard library, without tests and site-packages."""
    root = Path(sysconfig.get_paths()["stdlib"])
    docs = [data for path in files_below(root, _STDLIB_SKIP, ".py") if (data := path.read_bytes())]
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
