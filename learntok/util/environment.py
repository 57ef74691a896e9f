"""Every environment variable learntok reads, read and checked here and nowhere else.

`VARIABLES` is the list (docs/usage.md); `check_environment` runs at the start of every
command, so a bad value is one line and exit 2 before any work, never a traceback deep inside
or a wait without end (a MASTER_ADDR that does not resolve is found here, not after torch's
rendezvous has retried it for 900 s). Imports nothing heavy: the command line calls it before
torch is loaded.
"""

from __future__ import annotations

import math
import os
import socket

from learntok.util.errors import ConfigError

MAX_WORLD = 1 << 16  # processes a run may span: a larger WORLD_SIZE is a typo, not a cluster to wait for
PARENT = "LEARNTOK_JOBS_PARENT"  # a `compare --jobs` child's environment: its parent's pid (jobs.follow_parent)

# name -> what it holds; each checked by `check_environment`
VARIABLES = {
    "WORLD_SIZE": f"processes of the run (torchrun sets it): a whole number in 1..{MAX_WORLD}",
    "RANK": "this process's rank (torchrun sets it): a whole number below WORLD_SIZE",
    "LOCAL_RANK": "this process's rank on its machine (torchrun sets it): a whole number below WORLD_SIZE",
    "MASTER_ADDR": "the host of rank 0, when WORLD_SIZE > 1: a name or address that resolves",
    "MASTER_PORT": "its port, when WORLD_SIZE > 1: a whole number in 1..65535",
    "TQDM_MININTERVAL": "seconds between progress lines when stderr is a log: a number >= 0",
    "TQDM_DELAY": "seconds before a progress bar shows: a number >= 0",
    PARENT: "set by `compare --jobs` in its children: the parent's process id",
}


def _text(name: str) -> str:
    """The variable's value, stripped ("" when unset). Set but empty (or blank) is a bad value,
    not "unset": tqdm and torch read it as set and fail on it (float(""))."""
    text = os.environ.get(name, "").strip()
    if not text and name in os.environ:
        raise ConfigError(
            f"environment variable {name} is set but empty; it must be {VARIABLES[name].split(': ', 1)[1]}: "
            "give a value or unset it"
        )
    return text


def _refused(name: str, text: str, fix: str = "unset it") -> ConfigError:
    return ConfigError(f"environment variable {name}={text!r} is not {VARIABLES[name].split(': ', 1)[1]}; {fix}")


def whole(name: str, default: int) -> int:
    """A whole-number variable (`default` when unset; set but empty is refused)."""
    text = _text(name)
    if text and not (text.isascii() and text.isdigit()):
        raise _refused(name, text)
    return int(text) if text else default


def seconds(name: str, default: float) -> float:
    """A variable of seconds: a finite number >= 0 (`default` when unset; set but empty is refused)."""
    text = _text(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise _refused(name, text) from None
    if not math.isfinite(value) or value < 0:
        raise _refused(name, text)
    return value


def launch_vars() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's RANK, WORLD_SIZE and LOCAL_RANK (0, 1, 0 when
    unset): whole numbers, 1 <= world <= MAX_WORLD and both ranks in [0, world). A bad value is
    one ConfigError line, never a traceback or a wait for peers that cannot come."""
    fix = "unset it to run one process"
    world = whole("WORLD_SIZE", 1)
    if not 1 <= world <= MAX_WORLD:
        raise _refused("WORLD_SIZE", str(world), fix)
    rank, local = whole("RANK", 0), whole("LOCAL_RANK", 0)
    for name, value in (("RANK", rank), ("LOCAL_RANK", local)):
        if value >= world:
            raise ConfigError(f"{name}={value} must be below WORLD_SIZE={world} (ranks count from 0)")
    return rank, world, local


def launch_rank() -> int:
    """This process's rank under torchrun (its RANK variable), 0 when started plainly."""
    return launch_vars()[0]


def rendezvous() -> tuple[str, int]:
    """(MASTER_ADDR, MASTER_PORT) of a world above 1, checked: both given, the port in
    1..65535, the address resolvable (socket.getaddrinfo); torch would retry an address that does
    not resolve for its whole timeout (900 s) without a word."""
    addr, port = _text("MASTER_ADDR"), _text("MASTER_PORT")
    start = "start the run with torchrun --nproc-per-node N, or unset WORLD_SIZE"
    if not addr or not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        raise ConfigError(
            f"WORLD_SIZE={_text('WORLD_SIZE')} without MASTER_ADDR and a MASTER_PORT in 1..65535 "
            f"(got {addr!r}, {port!r}): {start}"
        )
    try:
        socket.getaddrinfo(addr, int(port))
    except (OSError, UnicodeError) as e:  # socket.gaierror: an unknown host
        reason = getattr(e, "strerror", None) or str(e)
        raise ConfigError(f"MASTER_ADDR={addr!r} does not resolve ({reason}): give rank 0's host, or {start}") from None
    return addr, int(port)


def parent_pid() -> int | None:
    """The pid PARENT names (a `compare --jobs` child), None when unset."""
    pid = whole(PARENT, 0)
    if _text(PARENT) and pid < 1:
        raise _refused(PARENT, _text(PARENT))
    return pid or None


def check_environment() -> None:
    """Every variable of VARIABLES that is set, checked: one ConfigError line for the first bad one."""
    _, world, _ = launch_vars()
    if world > 1:
        rendezvous()
    for name in ("MASTER_ADDR", "MASTER_PORT"):  # read by torch only in a world above 1, but never right empty
        _text(name)
    for name in ("TQDM_MININTERVAL", "TQDM_DELAY"):
        seconds(name, 0.0)
    parent_pid()
