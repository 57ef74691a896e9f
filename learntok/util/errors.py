"""Every error class of learntok, one class for each mistake it expects from its users; the
command line prints their one-line message and exits 2 (anything else is a bug and keeps its
traceback). And the words for an OS error, the same wherever it is reported. Every module takes
its error classes from here, and this module imports nothing of learntok (nor torch). The messages
of a wrong argument (`wrong_type`, `wrong_value`) and of a str that is no Unicode text
(`not_unicode`) are made here too, one way."""

import errno
from typing import Any

# Faults of the machine, not of learntok, by errno: one line instead of a traceback
MACHINE_FAULTS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large (a file size limit, ulimit -f?)",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EIO: "input/output error",
}

# Names the operating system refuses, by errno: a path a user gave (read or written) that no file
# can have. One line, the name shortened, wherever the path is first touched.
NAME_FAULTS = {
    errno.ENAMETOOLONG: "file name too long (a name is at most 255 bytes a component and 4096 in all)",
    errno.ENOTDIR: "not a directory (a component of the path is a file)",
    errno.ELOOP: "too many levels of symbolic links",
    errno.EILSEQ: "a name this file system cannot store (invalid bytes)",
    errno.EINVAL: "invalid argument (a name this file system refuses?)",
}
SHOWN_NAME = 120  # characters of a path a message shows: its start and end, and its length


def shown_path(name) -> str:
    """A path for a one-line message: as it is when short, else its start, its end and its length."""
    text = str(name)
    if len(text) <= SHOWN_NAME:
        return text
    return f"{text[: SHOWN_NAME // 2]}...{text[-SHOWN_NAME // 3 :]} ({len(text)} characters)"


def os_reason(e: OSError) -> str:
    """What an OS error says, in learntok's words for the machine's faults (MACHINE_FAULTS),
    else the OS's own (lower-case, as the rest of a learntok message)."""
    reason = MACHINE_FAULTS.get(e.errno) or (NAME_FAULTS.get(e.errno) if e.filename else None) or e.strerror or str(e)
    return reason[:1].lower() + reason[1:]


def fault_line(e: OSError) -> str | None:
    """The one line for an OS error that is a fault of the machine (disk full, a size limit, a
    permission) or a name the system refuses (too long, not a directory: NAME_FAULTS), naming the
    file; None for any other OSError (a bug, which keeps its traceback)."""
    reason = MACHINE_FAULTS.get(e.errno) or (NAME_FAULTS.get(e.errno) if e.filename else None)
    if reason is None:
        return None
    return f"{reason}: {shown_path(e.filename)}" if e.filename else reason


class ConfigError(ValueError):
    """A configuration mistake: unknown name, wrong type or an invalid value (one-line message)."""


class DataError(Exception):
    """A data source or split that cannot be used; the message says which and why, in one line."""


class CheckpointError(RuntimeError):
    """A missing or unreadable model file or checkpoint (one-line message)."""


class NotFiniteError(CheckpointError):
    """Weights that hold NaN or an infinity, or a figure that came out so: numbers that are not
    numbers (one-line message naming the checkpoint; `checkpoint.figures_of` adds it to a figure's)."""


class OutputError(Exception):
    """An output file that cannot be written (one-line message naming it and why)."""


class OutputRefused(ConfigError):
    """An output path that the command must not write (one line naming the option and why)."""


class FormatError(ValueError):
    """Text that is not the JSON or TOML it should be (one-line message, no file name)."""


class TaskError(DataError):
    """A task file that cannot be used; the message names the file, the line and the field."""


class RunFolderError(ConfigError):
    """A run folder that this command must not write: in use, foreign, or not resumable."""


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the message names the step and the last good checkpoint."""


def os_fault(e: Exception) -> Exception:
    """`e`, marked as reporting an OS error (a file that could not be opened or read), so that a
    caller that would add a guess about the file's content (an old format?) does not."""
    e.os_fault = True
    return e


def described(value: Any) -> str:
    """A value for a message: its repr (cut short) and its type."""
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    kind = type(value).__name__
    return f"{text} ({'an' if kind[0] in 'aeiou' else 'a'} {kind})"


def wrong_type(where: str, name: str, what: str, value: Any) -> TypeError:
    return TypeError(f"{where}: {name} must be {what}; got {described(value)}")


def wrong_value(where: str, name: str, what: str, value: Any) -> ValueError:
    return ValueError(f"{where}: {name} must be {what}; got {described(value)}")


def not_unicode(text: str) -> str | None:
    """Why `text` is no Unicode text (it holds a lone surrogate: the one thing a Python str can
    hold that UTF-8 cannot), in a phrase naming it and where; None if it is text. The one check
    of every text reader (JSON strings here, the API's texts in learntok.util.checks, config
    strings in learntok.util.typed_fields). Every surrogate is refused, U+DC80..U+DCFF too: in a str given
    to the API they are no bytes (the command line turns an argument's bytes that are not UTF-8
    into bytes before the API sees them, learntok.cli.values.text_arg)."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"a lone surrogate {text[e.start]!r} at character {e.start}, which is not Unicode text"
    return None
