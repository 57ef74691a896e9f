"""Corpora: turn a source (a built-in name or a path) into a list of documents as bytes.

Built-ins need no download: `shakespeare` and `kjv` ship with the package (see docs/data.md for
their attribution) and `python-stdlib` is the source of the running interpreter's standard
library; `python-docs` is the Python reference documentation that ships with the interpreter
(`pydoc_data.topics`): technical English with code, grammar, paths and lists, 0.5 MB; `python-rst`
ships with the package: the Python Library Reference's reStructuredText sources, 6.3 MB of the
same kind of text (code blocks, option lists, paths, indentation); `debref-de`, `-fr`, `-es`, `-ja`
and `-zh` ship with the package: the Debian Reference manual in German, French, Spanish, Japanese
and Simplified Chinese, one document per section, 0.5-0.6 MB each. Paths may be a text file, a
folder, JSONL(.gz) or parquet, each file read by `file_documents` (the one reader that training
and `learntok prepare` share, so both see the same documents): a JSONL record or a parquet row
is a document, and a text file is read in pieces of about PIECE_BYTES cut after a newline. Any
name ending in .gz is decompressed (x.txt.gz is text). Files are read through learntok.util.files:
regular files only, and a source read into memory is at most files.memory_budget() bytes in all.
Empty documents are dropped.
"""

from __future__ import annotations

import gzip
import re
import sysconfig
from collections.abc import Collection, Iterable, Iterator
from importlib import resources
from pathlib import Path

from learntok.util.errors import DataError, FormatError
from learntok.util.files import check_input, memory_budget, open_input, too_large
from learntok.util.progress import note
from learntok.util.json_toml import expect, expect_fields, parse_json

DEBIAN_REFERENCE = (
    "debref-de",
    "debref-fr",
    "debref-es",
    "debref-ja",
    "debref-zh",
)  # scripts/build_debian_reference.py
BUILTINS = ("shakespeare", "kjv", "python-stdlib", "python-docs", "python-rst", *DEBIAN_REFERENCE)
SHIPPED = ("shakespeare", "kjv", "python-rst", *DEBIAN_REFERENCE)  # learntok/corpora/NAME.jsonl.gz
_STDLIB_SKIP = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
_BINARY_PROBE = 8192  # bytes read to decide whether a file is binary (contains a NUL byte)
# A text file is read in pieces of about this many bytes (cut after a newline): a 1 MB file gives
# ~64 documents, so val and test get several, and a file of any size streams in bounded memory.
PIECE_BYTES = 1 << 14
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


def check_source(source: str) -> None:
    """Refuse, in one line, a data source that names nothing: empty, or neither a built-in corpus
    nor an existing path. Opens nothing (what the path holds is judged when it is read), so a
    command can check every source it will read before any work."""
    path = source_path(source)
    if source not in BUILTINS and not path.exists() and not path.is_symlink():
        raise DataError(
            f"data source {source!r} is neither a built-in corpus ({', '.join(BUILTINS)}) nor an existing path"
        )


def load_named_documents(source: str, text_field: str = "text") -> tuple[list[bytes], list[str] | None]:
    """(documents, their file names relative to the folder when `source` is a folder, else None).
    Sources are read into memory, at most files.memory_budget() bytes (larger: `learntok prepare`)."""
    path = source_path(source)
    if source not in BUILTINS and path.is_dir():
        return _folder_documents(path, text_field)
    return _unnamed_documents(source, text_field), None


def _unnamed_documents(source: str, text_field: str) -> list[bytes]:
    if source in SHIPPED:
        with (resources.files("learntok") / "corpora" / f"{source}.jsonl.gz").open("rb") as f, gzip.open(f) as lines:
            return _jsonl_documents(lines, "text", f"built-in corpus {source!r}")
    if source == "python-stdlib":
        return _stdlib_documents()
    if source == "python-docs":
        return _python_docs_documents()
    check_source(source)
    path = source_path(source)
    check_size(path, memory_budget())
    docs = [doc for doc in bounded((d for d, _ in file_documents(path, text_field)), "data source", path) if doc]
    if not docs:
        table = file_kind(path) != "text"
        raise DataError(
            f"{path} holds no documents"
            if table
            else f"file {path} is empty"
            if not path.stat().st_size
            else f"file {path} is binary (a NUL byte in its first {_BINARY_PROBE} bytes), not text"
        )
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


def check_size(path: Path, budget: int, limit: int | None = None) -> None:
    """Refuse (too_large) a regular, uncompressed file larger than `budget` bytes by its size alone,
    before reading it (`limit`: the whole bound, for the message; default `budget`)."""
    size = path.stat().st_size if path.is_file() else 0
    if not path.name.endswith(".gz") and size > budget:
        raise DataError(too_large("data source", path, size, budget if limit is None else limit))


def file_documents(
    path: Path, text_field: str = "text", piece_bytes: int = PIECE_BYTES, what: str = "data source"
) -> Iterator[tuple[bytes, int]]:
    """(document, bytes of the file read so far) for one file, streamed: JSONL(.gz) records
    (field `text_field`), parquet rows (column `text_field`), or a text file in pieces of about
    `piece_bytes` (nothing for a binary file: a NUL byte in its first 8 KB). Empty documents
    are yielded too (as b""); readers drop them. The file must be a regular one (files.check_input)."""
    kind = file_kind(path)
    if kind == "parquet":
        checked = check_input(path, what)
        yield from ((doc, 0) for doc in parquet_texts(checked, text_field))
        yield b"", checked.stat().st_size  # progress for the whole file at the end
        return
    with open_input(path, what) as f:
        if kind == "jsonl":
            docs = jsonl_texts(f, text_field, str(path))
        else:
            head = f.read(_BINARY_PROBE)
            if is_binary(head):
                return
            docs = _text_pieces(f, piece_bytes, head)
        for doc in docs:
            yield doc, f.tell()


def _text_pieces(f, piece_bytes: int, head: bytes = b"") -> Iterator[bytes]:
    """The whole file (after `head`, its first bytes, already read), or pieces of about
    piece_bytes cut just after a newline when one falls in a piece's second half
    (data.split.cut_document, streamed)."""
    carry = head
    while True:
        chunk = f.read(piece_bytes)
        buf = carry + chunk
        while len(buf) > piece_bytes:
            newline = buf.rfind(b"\n", piece_bytes // 2, piece_bytes)
            end = newline + 1 if newline >= 0 else piece_bytes
            yield buf[:end]
            buf = buf[end:]
        carry = buf
        if not chunk:
            break
    if carry:
        yield carry


def json_records(lines: Iterable[bytes | str], where: str, error: type[Exception] = None):
    """(line number, object) for each non-blank JSON line; bad UTF-8, bad JSON or a non-object
    names the line (raised as `error`, DataError by default)."""
    error = error or DataError
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = parse_json(line.decode("utf-8") if isinstance(line, bytes) else line)
        except UnicodeDecodeError as e:
            raise error(f"{where} line {lineno}: not UTF-8 text (byte {e.start}: {e.reason})") from None
        except FormatError as e:
            raise error(f"{where} line {lineno}: {e}") from None
        yield lineno, expect(record, "an object", f"{where} line {lineno}", error)


def jsonl_texts(lines: Iterable[bytes], text_field: str, where: str) -> Iterator[bytes]:
    """One JSON object a line; field `text_field` (a string) of each, as UTF-8 bytes, streamed
    (empty ones too). Blank lines are skipped."""
    for lineno, record in json_records(lines, where):
        yield expect_fields(record, {text_field: "a string"}, f"{where} line {lineno}", DataError)[text_field].encode()


def _jsonl_documents(lines: Iterable[bytes], text_field: str, where: str) -> list[bytes]:
    """The non-empty documents of a JSON-lines file (jsonl_texts)."""
    docs = [text for text in jsonl_texts(lines, text_field, where) if text]
    if not docs:
        raise DataError(f"{where} holds no documents")
    return docs


def parquet_texts(path: Path, text_field: str) -> Iterator[bytes]:
    """Column `text_field` of a parquet file, streamed in batches; str or binary values, empties
    skipped. A null is refused naming its row, as a JSONL record whose text is null is (a reader
    that dropped them would train on fewer documents than the file holds, without a word)."""
    import pyarrow
    import pyarrow.parquet as pq

    try:
        f = pq.ParquetFile(path)
        names = f.schema_arrow.names
        if names.count(text_field) != 1:
            found = "no column" if text_field not in names else f"{names.count(text_field)} columns named"
            raise DataError(f"{path}: {found} {text_field!r}, not one (columns: {', '.join(names)})")
        check_text_column(f.schema_arrow.field(text_field).type, f"{path}: column {text_field!r}")
        row = 0
        for batch in f.iter_batches(columns=[text_field], batch_size=1024):
            for v in batch.column(0).to_pylist():
                row += 1
                if v is None:
                    raise DataError(
                        f"{path} row {row}: column {text_field!r} is null, not a string "
                        f"(drop the rows with no text, or fill them)"
                    )
                if v:
                    yield v.encode("utf-8") if isinstance(v, str) else bytes(v)
    except (pyarrow.ArrowException, EOFError, OSError, ValueError) as e:  # not parquet, cut short, garbled (bad UTF-8)
        if isinstance(e, OSError) and e.errno is not None:  # the machine's error (permission denied): as it is
            raise
        raise DataError(
            f"{path}: cannot be read as parquet ({' '.join(str(e).split()) or type(e).__name__}; "
            f"cut short, or not a parquet file?)"
        ) from None


def check_text_column(column_type, where: str) -> None:
    """A parquet text column holds strings or binary (dictionary-encoded or not); a column of
    numbers, lists or structs would turn into whatever bytes its values convert to."""
    import pyarrow.types as t

    value_type = column_type.value_type if t.is_dictionary(column_type) else column_type
    kinds = (t.is_string, t.is_large_string, t.is_binary, t.is_large_binary, t.is_fixed_size_binary)
    kinds += tuple(getattr(t, k) for k in ("is_string_view", "is_binary_view") if hasattr(t, k))
    if not any(is_kind(value_type) for is_kind in kinds):
        raise DataError(f"{where} holds {column_type} values, not text (a string or binary column)")


def prepared_state(root: Path) -> str | None:
    """ "prepared" for a folder `learntok prepare` finished (its shards and index.json),
    "unfinished" for the shards a stopped `prepare` leaves without index.json, else None."""
    try:
        parts = any(_PREPARE_PARTS.fullmatch(p.name) for p in root.iterdir())
    except OSError:  # not a folder, or unreadable
        return None
    return ("prepared" if (root / "index.json").exists() else "unfinished") if parts else None


def check_not_prepared(root: Path) -> None:
    """A prepared data folder, finished or not (or any folder with an index.json), is never read
    as a folder of text files: its shards would become documents."""
    if (root / "index.json").exists():
        raise DataError(
            f"{root} is a prepared data folder (index.json): it is read as memory-mapped "
            f"shards by ByteData.from_config (data.source), not as a list of documents"
        )
    if prepared_state(root) == "unfinished":
        parts = sorted(p.name for p in root.iterdir() if _PREPARE_PARTS.fullmatch(p.name))
        raise DataError(
            f"{root} is an unfinished prepared folder ({', '.join(parts[:3])}, ... but no index.json: "
            f"`learntok prepare` stopped before the end); prepare it again into an empty folder"
        )


def _folder_documents(root: Path, text_field: str = "text") -> tuple[list[bytes], list[str]]:
    """The documents of every regular file below `root` (hidden entries skipped), sorted by path,
    each with its file's path relative to `root`. Binary files (`is_binary`) are skipped, and said
    in one line on stderr (how many, one example); a folder of binary files alone is refused."""
    check_not_prepared(root)
    docs, names, binary, limit = [], [], [], memory_budget()
    budget = limit
    for path in files_below(root):
        check_size(path, budget, limit)
        if file_kind(path) == "text" and _binary_file(path):
            binary.append(str(path.relative_to(root)))
            continue
        for doc, _ in file_documents(path, text_field):
            if doc:
                if len(doc) > budget:
                    raise DataError(too_large("data source", root, None, limit))
                docs.append(doc)
                names.append(str(path.relative_to(root)))
                budget -= len(doc)
    example = binary[0] if binary else ""
    skipped = f"{len(binary)} binary file{'s' * (len(binary) > 1)} (a NUL byte in the first 8 KB; e.g. {example})"
    if not docs:
        raise DataError(f"folder {root} holds no non-empty text files" + (f": skipped {skipped}" if binary else ""))
    if binary:
        note(f"warning: skipped {skipped} in folder {root}; read the {len(set(names))} text files")
    return docs, names


def _binary_file(path: Path) -> bool:
    """Whether a text-kind file is binary (`is_binary` on its first bytes, decompressed)."""
    with open_input(path, "data source") as f:
        return is_binary(f.read(_BINARY_PROBE))


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
