"""Ctrl-C during a command: held back while a module is being imported, then raised as Python's
own handler raises it (KeyboardInterrupt), so the command ends with its one line and exit 130
(learntok.cli.main) and never inside a half-made module."""

from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import threading
import time
from typing import Iterator


@contextlib.contextmanager
def interrupts_between_imports() -> Iterator[None]:
    """SIGINT handled by `_interrupt_unless_importing` for the block, from the main thread only
    (a thread has no signals), and an ignored Ctrl-C (a background job) stays ignored."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return
    previous = signal.signal(signal.SIGINT, _interrupt_unless_importing)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def importing() -> list:
    """The specs of the modules being imported right now (`__spec__._initializing`, set by
    importlib while a module's code runs)."""
    specs = (getattr(m, "__spec__", None) for m in list(sys.modules.values()))
    return [spec for spec in specs if getattr(spec, "_initializing", False)]


def _interrupt_unless_importing(signum, frame) -> None:
    """SIGINT: KeyboardInterrupt, as Python's own handler raises it, except while a module is
    being imported. An exception raised inside an import leaves the module half made (torch then
    fails later in its own words, or aborts in its C++), and a C extension's initialisation can
    swallow it (numpy.random's did: the Ctrl-C was lost and the command ran on), so the interrupt
    waits for the imports under way to end and comes then."""
    pending = importing()
    if pending:
        threading.Thread(target=_interrupt_after_import, args=(pending, signum), daemon=True).start()
        return
    raise KeyboardInterrupt


def _interrupt_after_import(specs: list, signum: int) -> None:
    while any(getattr(spec, "_initializing", False) for spec in specs):
        time.sleep(0.01)
    _thread.interrupt_main(signum)  # the handler again, now that those modules are whole
