"""Progress of the long commands (train, eval, segment, diagnose, eval-tasks, compare, prepare,
the lm-eval adapter): one `tqdm` subclass for all of them, on stderr.

On a terminal it is tqdm's bar, with the rate and the time left. When stderr is not a terminal
(a log file, a pipe, a `compare --jobs` child) every display is instead one whole line with a
timestamp, written and flushed at once, at most every LOG_INTERVAL seconds and once at the end;
never a carriage return. Nothing shows for a task done within DELAY seconds.

    2026-03-01 14:02:07 train:  40% 120/300 step [00:42<01:03, 2.84step/s, loss=2.10, bpb=2.95]

`note` prints a message line the same way (above the bars on a terminal). Under torchrun only
rank 0 shows anything (`environment.launch_rank`).
"""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

from learntok.util.environment import launch_rank, seconds

LOG_INTERVAL = 30.0  # seconds between progress lines in a log (not a terminal); TQDM_MININTERVAL overrides
DELAY = 1.0  # seconds before anything shows, so that a quick command stays quiet; TQDM_DELAY overrides
LOG_FORMAT = "{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} {unit} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


def stamp() -> str:
    """The local wall-clock time at the head of a log line."""
    return time.strftime("%Y-%m-%d %H:%M:%S")


def is_log(stream=None) -> bool:
    """Whether `stream` (stderr) is a log rather than a terminal."""
    stream = sys.stderr if stream is None else stream
    return not (hasattr(stream, "isatty") and stream.isatty())


def note(message: str, enabled: bool = True) -> None:
    """One line on stderr (rank 0 only): above any bars on a terminal, timestamped in a log."""
    if not enabled or launch_rank() != 0:
        return
    if is_log():
        print(f"{stamp()} {message}", file=sys.stderr, flush=True)
    else:
        tqdm.write(message, file=sys.stderr)


class _Discard:
    """Where tqdm's own writes go in log mode: `Progress.display` writes the lines itself."""

    encoding = "utf-8"

    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass


class Progress(tqdm):
    """`tqdm` with learntok's defaults: on stderr, off on ranks other than 0 (and with
    enabled=False), whole timestamped lines when stderr is not a terminal."""

    def __init__(
        self,
        iterable=None,
        desc: str | None = None,
        total: float | None = None,
        unit: str = "it",
        enabled: bool = True,
        **kwargs,
    ):
        self._stream = sys.stderr
        self._log = is_log(self._stream)
        if self._log:
            kwargs.update(
                file=_Discard(),
                ascii=True,
                bar_format=LOG_FORMAT if total is not None else None,
                mininterval=seconds("TQDM_MININTERVAL", LOG_INTERVAL),
            )
        else:
            kwargs.setdefault("dynamic_ncols", True)
            kwargs["file"] = self._stream
        kwargs.setdefault("delay", seconds("TQDM_DELAY", DELAY))
        super().__init__(
            iterable, desc=desc, total=total, unit=unit, disable=not enabled or launch_rank() != 0, **kwargs
        )

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if not self._log:
            return super().display(msg, pos)
        if msg is None:  # a status (msg "" would clear a bar)
            print(f"{stamp()} {self}", file=self._stream, flush=True)
        return True
