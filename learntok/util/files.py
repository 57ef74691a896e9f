"""Files in and out, each one way (docs/reliability.md).

Inputs are regular files (or folders of them): `check_input` looks at a path with os.stat before
anything opens it, so a device (/dev/zero), a FIFO (whose open blocks until a writer comes) or a
socket is refused with one line instead of read without end or waited on forever. A name ending
in `.gz` is decompressed, whatever comes before it; a gzip stream cut short, or a file that is
not gzip, is one line naming the file. A read into memory has a byte bound (`read_input`), by
default `memory_budget()`: what this process can still allocate, divided by the copies a reader
makes, so a huge or endless input says so instead of growing until the kernel kills it.

Outputs are written whole (`write_text_atomic`): a temporary file beside the target, flushed
and renamed over it; a failure leaves the old file and no temporary one.

Two guards keep a run's writes inside its folder. A path built from a value that is not typed as
a path (a variant, run or strategy name) is made by `inside`, which resolves it and refuses one
that leaves its parent (`..`, an absolute name, a symbolic link out). A file in a run folder
(its lock, logs, appended rows, the temporary file of an atomic write) is opened by
`open_no_follow` (O_NOFOLLOW): a symbolic link put in its place is refused, never written through.
"""

from __future__ import annotations

import contextlib
import gzip
import errno
import os
import resource
import shutil
import stat
import zlib
from collections.abc import Iterator
from typing import IO, Callable
from pathlib import Path

from learntok.util.errors import NAME_FAULTS, ConfigError, DataError, OutputError, os_fault, os_reason, shown_path

READ_COPIES = 4  # a source read into memory is held about this many times over (documents, pieces, the split array)
READ_CHUNK = 1 << 20  # bytes a decompressed read takes at a time (never one allocation of the whole bound)
_GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


# Name faults that the checks of each path's kind already say in their own words (a path through a
# file is "a file, not a folder"; a link loop, "a symbolic link"): check_name leaves them to those.
LATER = (errno.ENOTDIR, errno.ELOOP)


def check_parents(path: Path, what: str, error: type[Exception] = OutputError) -> None:
    """Refuse a path to be written whose folder is a file (`a.txt/sub`), in one line."""
    for parent in Path(os.path.abspath(path)).parents:
        if parent.exists():
            if not parent.is_dir():
                raise error(
                    f"{what} {shown_path(path)}: {shown_path(parent)} is a file, not a folder (nothing was written)"
                )
            return


def check_name(path: str | os.PathLike, what: str) -> None:
    """Refuse, in one line naming `what`, a path whose name the system refuses (NAME_FAULTS: too
    long, a component too long, through a file, invalid bytes), whether or not it exists yet: the
    one check every path a user gives goes through before any work."""
    try:
        os.lstat(path)
    except OSError as e:
        if e.errno in NAME_FAULTS and e.errno not in LATER:
            raise ConfigError(f"{what} {shown_path(path)}: {NAME_FAULTS[e.errno]}") from None
    except ValueError as e:  # an embedded NUL byte
        raise ConfigError(f"{what} {shown_path(path)!r}: {e}") from None


def _kind(mode: int) -> str:
    return (
        "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a FIFO (named pipe)"
        if stat.S_ISFIFO(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "not a regular file"
    )


def check_input(path: str | Path, what: str, folder: bool = False, error: type[Exception] = DataError) -> Path:
    """`path` as a Path if it names a regular file (or, with `folder`, a folder); else `error`
    with one line: missing, a folder where a file is wanted, a device, FIFO or socket. Never opens it."""
    if str(path) == "":
        raise error(f"{what} is empty: give a file name")
    p = Path(path).expanduser()
    try:
        mode = p.stat().st_mode  # follows symlinks; opens nothing
    except FileNotFoundError:
        raise error(
            f"{what} {p} does not exist" + (" (a symlink to a missing file)" if p.is_symlink() else "")
        ) from None
    except OSError as e:
        raise os_fault(error(f"{what} {p}: {os_reason(e)}")) from None
    if stat.S_ISDIR(mode):
        if folder:
            return p
        raise error(f"{what} {p} is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise error(f"{what} {p} is {_kind(mode)}, not a regular file: give a file")
    return p


class InputFile:
    """A regular file opened for reading, decompressed when its name ends in .gz; gzip errors
    (cut short, not gzip) raise DataError naming the file. `tell()` is the position in the file
    on disk (compressed bytes), for progress bars."""

    def __init__(self, path: Path):
        self.path = path
        self.raw = open(path, "rb")
        self.stream = gzip.open(self.raw) if path.name.endswith(".gz") else self.raw

    def _checked(self, read, *args):
        try:
            return read(*args)
        except _GZIP_ERRORS as e:
            raise DataError(
                f"{self.path}: cannot be read as gzip ({' '.join(str(e).split()) or type(e).__name__}; "
                f"cut short, or not compressed?)"
            ) from None

    def read(self, n: int = -1) -> bytes:
        return self._checked(self.stream.read, n)

    def __iter__(self) -> Iterator[bytes]:
        while line := self._checked(self.stream.readline):
            yield line

    def tell(self) -> int:
        return self.raw.tell()

    def close(self) -> None:
        self.stream.close()
        self.raw.close()

    def __enter__(self) -> InputFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_input(path: str | Path, what: str, error: type[Exception] = DataError) -> InputFile:
    """A regular file (check_input), opened for streaming; .gz decompressed."""
    p = check_input(path, what, error=error)
    try:
        return InputFile(p)
    except OSError as e:
        raise os_fault(error(f"{what} {p}: {os_reason(e)}")) from None


def read_input(path: str | Path, what: str, limit: int | None = None, error: type[Exception] = DataError) -> bytes:
    """The whole (decompressed) content of a regular file, refused with one line when it holds
    more than `limit` bytes, before that much is read. Without `limit`: memory_budget(), and
    the message points to `learntok prepare`."""
    bound = memory_budget() if limit is None else limit
    with open_input(path, what, error) as f:
        size = None if f.path.name.endswith(".gz") else f.path.stat().st_size
        if size is not None and size <= bound:
            return f.read()
        chunks, total = [], 0
        while size is None and total <= bound and (chunk := f.read(READ_CHUNK)):  # decompressed: size unknown
            chunks.append(chunk)
            total += len(chunk)
    if (size or total) > bound:
        raise error(
            too_large(what, f.path, size, bound)
            if limit is None
            else f"{what} {f.path} holds more than {bound:,} bytes, more than one can be"
        )
    return b"".join(chunks)


def too_large(what: str, path: Path, size: int | None, budget: int) -> str:
    """Why a source is not read into memory, and what to do instead."""
    held = f"holds {size / 1e9:.2f} GB" if size is not None else f"holds more than {budget / 1e9:.2f} GB (decompressed)"
    return (
        f"{what} {path} {held}, more than is read into memory here ({budget / 1e9:.2f} GB, 1/{READ_COPIES} of "
        f"the memory this process can use): prepare it into memory-mapped shards with `learntok prepare` "
        f"(streamed) and train from that folder"
    )


def memory_budget() -> int:
    """Bytes a source may take when read into memory: the least of the memory the system has
    available, the cgroup's limit and this process's address-space limit (ulimit -v), less
    what is in use, divided by READ_COPIES."""
    free = [_meminfo_available()]
    try:
        limit, used = (int(Path("/sys/fs/cgroup", n).read_text().split()[0]) for n in ("memory.max", "memory.current"))
        free.append(limit - used)
    except (OSError, ValueError):  # no cgroup v2, or "max"
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        free.append(soft - _vm_size())
    known = [f for f in free if f is not None]
    return max(0, min(known)) // READ_COPIES if known else 1 << 62


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def _vm_size() -> int:
    """This process's virtual size in bytes (what RLIMIT_AS counts); 0 where /proc has none."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class OutputFile:
    """The one writer of a file a user named (--json, --html, segment's streamed JSON), whole or as
    it comes: into a temporary file beside it (opened through no link), flushed to disk and renamed
    over it by `commit` (over the file a symlink names, the link kept), so that a reader or a crash
    sees the old file or the new one; `abandon`, or an error in its block, removes what was written
    and the old file stays. A device or FIFO the user named (/dev/stdout) is written in place, a
    FIFO without a reader refused rather than waited on. An OS error is one line naming the path
    (OutputError)."""

    def __init__(self, path: str | Path):
        special = os.path.exists(path) and not os.path.isfile(path)
        self.path = Path(path if special else os.path.realpath(path))
        self.tmp = None if special else self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        try:
            if special:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO for a FIFO nobody reads
                os.set_blocking(fd, True)
                self.f = open(fd, "w", encoding="utf-8")
            else:
                self.f = open_no_follow(self.tmp, "w")
        except OSError as e:
            self._fail(e)

    def write(self, text: str) -> None:
        try:
            self.f.write(text)
        except OSError as e:
            self._fail(e)

    def commit(self) -> None:
        """Put the file in place (in place already for a device or FIFO)."""
        try:
            self.f.flush()
            if self.tmp is not None:
                os.fsync(self.f.fileno())
            self.f.close()
            if self.tmp is not None:
                os.replace(self.tmp, self.path)
        except OSError as e:
            self._fail(e)

    def abandon(self) -> None:
        """Drop what was written: the file named stays as it was."""
        try:
            self.f.close()
        except (OSError, AttributeError):  # its last flush may fail (a full disk); or never opened
            pass
        if self.tmp is not None:
            self.tmp.unlink(missing_ok=True)

    def _fail(self, e: OSError):
        self.abandon()
        raise OutputError(f"cannot write {self.path}: {os_reason(e)}") from None

    def __enter__(self) -> "OutputFile":
        return self

    def __exit__(self, kind, *_) -> None:
        self.abandon() if kind is not None else self.commit()


def write_output(path: str | Path, text: str) -> None:
    """A file a user named, written whole (`OutputFile`)."""
    with OutputFile(path) as f:
        f.write(text)


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` to write to; renamed over `path` when the block ends
    well, removed when it fails (the old file stays). For writers that take a path (savefig)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def remove_stale_tmp(folder: str | Path) -> list[Path]:
    """Remove what interrupted atomic writes left in `folder` (`.NAME.tmp-*` files and folders).
    Call it only while no other process writes there (a run folder's lock, learntok.run.folder)."""
    folder = Path(folder)
    stale = sorted(folder.glob(".*.tmp-*")) if folder.is_dir() else []
    for path in stale:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return stale


def resolved(path: str | Path, what: str, error: type[Exception] = ConfigError) -> Path:
    """`path` absolute, with every symbolic link followed (a missing part kept as named): the one
    way a path is resolved before it is compared with the folder it must stay in (`inside`, a
    run's `latest`). Symbolic links that loop (`a -> a`) are one line (`error`) naming `what`,
    where pathlib raises a RuntimeError (before Python 3.13) or leaves the loop in the path."""
    loop = f"{what} {shown_path(path)}: its symbolic links loop (too many levels of symbolic links)"
    try:
        real = Path(path).resolve()
    except RuntimeError:
        raise error(loop) from None
    try:
        still_a_link = stat.S_ISLNK(os.lstat(real).st_mode)
    except OSError as e:  # nothing there yet (a folder to make), or a loop in a part of it
        still_a_link = e.errno == errno.ELOOP
    if still_a_link:
        raise error(loop)
    return real


def inside(parent: str | Path, name: str, what: str, error: type[Exception] = ConfigError) -> Path:
    """`parent / name`, where `name` is a value (a variant, run or strategy name, a file an index
    lists) that must name a path below `parent`: checked after both are resolved (`resolved`), so
    `..`, an absolute name, or a symbolic link that leads out of `parent` or loops is one line (`error`)."""
    if not isinstance(name, str) or not name.strip() or "\0" in name or os.path.isabs(name):
        raise error(f"{what} {name!r} cannot name a folder below {parent}: give a plain name")
    path, root = Path(parent) / name, resolved(parent, what, error)
    real = resolved(path, what, error)
    if real == root or root not in real.parents:
        raise error(f"{what} {name!r} names {real}, outside {parent}: give a name without '..' or a link out")
    return path


def replaceable_folder(
    path: str | Path,
    names: frozenset[str],
    what: str,
    error: type[Exception] = OutputError,
    beside: Callable[[str], bool] | None = None,
) -> Path:
    """`path`, where a folder of `names` is about to be written whole (the old folder replaced):
    missing, empty, or a folder of those names alone, each a regular file (one this writer
    wrote), and of entries `beside` names (another writer's, which the caller writes beside
    and never touches). Anything else is `error` in one line, nothing touched: a run folder, a
    checkpoint, a folder of other files, a file, a symbolic link (replacing it would delete what
    is there), a name the system refuses or a path through a file (`check_name`, `check_parents`)."""
    p = Path(path)
    check_name(p, what)
    check_parents(p, what, error)
    if p.is_symlink():
        raise error(f"{what} {p} is a symbolic link: give the folder itself (nothing was written)")
    if not p.exists():
        return p
    if not p.is_dir():
        raise error(f"{what} {p} is a file, not a folder: give a new folder (nothing was written)")
    with os.scandir(p) as entries:
        others = sorted(
            e.name
            for e in entries
            if (e.name not in names or not e.is_file(follow_symlinks=False)) and not (beside and beside(e.name))
        )
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise error(
            f"{what} {p} holds {shown}: it is not a folder this writer made, and writing would replace "
            f"it whole; give a new folder or an empty one (nothing was written)"
        )
    return p


def no_follow_fd(path: str | Path, flags: int) -> int:
    """The one opener of run-folder files: `os.open(path, flags)` created if missing (0o644),
    never through a symbolic link at its name (O_NOFOLLOW: a link there is OSError ELOOP, and
    nothing is written through it: one line, OutputError), not inherited by child processes."""
    try:
        return os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError:
        if not os.path.islink(path):  # ELOOP on Linux, EMLINK or EFTYPE on BSDs
            raise
    raise OutputError(f"{path} is a symbolic link: a run folder's files are written in place only; remove the link")


def open_no_follow(path: str | Path, mode: str = "a") -> IO[str]:
    """A run-folder text file opened for writing through `no_follow_fd`: "a" appends, "w" truncates."""
    flags = {"a": os.O_WRONLY | os.O_APPEND, "w": os.O_WRONLY | os.O_TRUNC}[mode]
    return open(no_follow_fd(path, flags), mode, encoding="utf-8")


def write_text_atomic(path: str | Path, text: str) -> None:
    """Replace `path` by `text`: write a temporary file beside it, flush it to disk, rename it
    over `path` (a reader, or a crash, sees the old file or the new one, never a mix). On an
    error the temporary file is removed and the old file stays. The temporary file is opened
    through no link (`open_no_follow`); the rename replaces a link at `path`, never its target."""
    with replacing(path) as tmp, open_no_follow(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


# The kinds of path a command line names: each path option of learntok.cli has one of these as its
# argparse type, so that every output goes through one check (learntok.cli.outputs) before any work and
# every input through check_input; an option whose value is plain text says type=str.
def output_file(text: str) -> str:
    """A file the command writes (--json, --html)."""
    return text


def output_folder(text: str) -> str:
    """A folder the command writes into (--out)."""
    return text


def input_data(text: str) -> str:
    """A data source the command reads: a built-in name, a file or a folder of them."""
    return text


def input_file(text: str) -> str:
    """A file the command reads (--config, --task, --file)."""
    return text


def input_run(text: str) -> str:
    """A run, checkpoint or model folder the command reads."""
    return text


OUTPUT_TYPES, INPUT_TYPES = (output_file, output_folder), (input_data, input_file, input_run)
