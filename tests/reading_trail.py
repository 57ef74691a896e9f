"""The reading trail a newcomer follows through the package: the files of the learntok calls a
function makes, `levels` deep (the function itself, its calls, theirs, ...), in the order they
run, until a function named `stop` is called; a file entered again after the reading has left it
is a return. Used by tests/test_train_setup.py and tests/test_reading_walks.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import learntok

PACKAGE = str(Path(learntok.__file__).parent)


def returns(files: list[str]) -> int:
    """How often the reading comes back to a file it had left (a file's consecutive calls are one visit)."""
    visits = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    return sum(1 for i, f in enumerate(visits) if f in visits[:i])


def trail(fn: Callable[[], object], levels: int, stop: str | None = None) -> list[str]:
    """The files (relative to learntok/) of the learntok calls `fn` makes, `levels` deep, until
    a function named `stop` is called (None: until `fn` returns)."""
    out: list[str] = []
    done: list[bool] = []

    def depth(frame) -> int:
        n = 0
        while frame is not None:
            n += frame.f_code.co_filename.startswith(PACKAGE)
            frame = frame.f_back
        return n

    def profile(frame, event, arg):
        code = frame.f_code
        if done or event != "call" or not code.co_filename.startswith(PACKAGE) or code.co_name.startswith("<"):
            return
        if code.co_name == stop:
            done.append(True)
        elif depth(frame) <= levels:
            out.append(code.co_filename[len(PACKAGE) + 1 :])

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return out
