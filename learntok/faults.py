"""How the command line ends when the machine or the session stops a command (docs/reliability.md):
a fault of the machine by its errno (disk full, a size limit, a permission) in one line, and
the exit codes of Ctrl-C and of a pipe closed early."""

from __future__ import annotations

import os
import sys

from learntok.errors import MACHINE_FAULTS

SIGINT_EXIT, SIGPIPE_EXIT = 130, 141  # 128 + the signal, as the shell reports a kill


def fault_line(e: OSError) -> str | None:
    """The one line for an OS error that is a fault of the machine (disk full, a size limit, a
    permission), naming the file; None for any other OSError."""
    reason = MACHINE_FAULTS.get(e.errno)
    if reason is None:
        return None
    return f"{reason}: {e.filename}" if e.filename else reason


def quiet_stdout() -> None:
    """Point stdout at /dev/null: its reader is gone (a pipe closed early), and the interpreter's
    own flush at exit would otherwise report the broken pipe."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
