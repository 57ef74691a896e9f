"""Child processes that each train a run, a few at a time (`compare --jobs`), without silence.

Each child's whole output (stdout and stderr, its progress as timestamped lines: it is not on a
terminal) is appended to RUN/train.log, so a rerun that resumes a variant keeps its earlier log.
Meanwhile the parent shows one progress line per running child, read from the child's
metrics.jsonl every POLL_S seconds: its latest step (with tqdm's rate and time left), its latest
validation bits per byte, and "evaluating" once every step is done and the run is not yet marked
finished. A failed child's error names its log (`last_line` gives what it said last).

No child outlives its parent: Ctrl-C or SIGTERM in the parent sends every child SIGTERM and starts
no other (`Children`); a parent killed outright (kill -9), which can run nothing, is followed by
each child itself (`follow_parent`: the kernel's parent-death signal on Linux, a watch of the
parent's pid elsewhere). A child stopped so leaves its run whole at its latest checkpoint.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from learntok.util.environment import PARENT, parent_pid
from learntok.util.files import open_no_follow
from learntok.util.progress import Progress
from learntok.run import metrics_log
from learntok.run.folder import LOG

POLL_S = 2.0  # seconds between looks at a running child's metrics.jsonl (and, off Linux, at its parent)
PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass(frozen=True)
class Job:
    name: str  # what its progress line and errors call it
    run_dir: Path  # the run folder it trains (its log goes there)
    steps: int  # its train.steps, the end of its progress bar
    command: list[str]  # the child's command line

    @property
    def log(self) -> Path:
        return self.run_dir / LOG


class Children:
    """The running children, started and stopped under one lock: once `stop` has run (Ctrl-C or
    SIGTERM in the parent) every child is sent SIGTERM and none is started after."""

    def __init__(self):
        self.lock, self.procs, self.stopped = threading.Lock(), [], False

    def start(self, command: list[str], **kwargs) -> subprocess.Popen | None:
        with self.lock:
            if self.stopped:
                return None
            self.procs.append(subprocess.Popen(command, **kwargs))
            return self.procs[-1]

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            for proc in self.procs:
                if proc.poll() is None:
                    proc.terminate()


def run_jobs(jobs: list[Job], at_once: int, progress: bool = True) -> list[int]:
    """Run every job, `at_once` at a time, each child with one CPU thread; their exit codes.
    Ctrl-C or SIGTERM stops every child before the parent ends; a parent killed outright (kill
    -9) cannot act, so each child follows its parent itself (`follow_parent`)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env[PARENT] = str(os.getpid())
    children = Children()
    with sigterm_as_interrupt(), ThreadPoolExecutor(max_workers=at_once) as pool:
        try:
            return list(pool.map(lambda job: _run(job, env, progress, children), jobs))
        except BaseException:  # KeyboardInterrupt: Ctrl-C, or SIGTERM (sigterm_as_interrupt)
            children.stop()
            raise


@contextlib.contextmanager
def sigterm_as_interrupt():
    """In the main thread: SIGTERM and SIGINT raise KeyboardInterrupt, so either ends the parent as
    Ctrl-C does (its children stopped, one line), even where SIGINT was ignored when the process
    started (a shell's background job); the handlers before are restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def follow_parent() -> None:
    """In a child of `run_jobs` (PARENT names its parent): end with the parent, however it ends.
    Linux: prctl(PR_SET_PDEATHSIG, SIGTERM), the kernel's SIGTERM when the parent's thread that
    started this child ends, kill -9 included; elsewhere a daemon thread checks the parent's pid
    every POLL_S seconds. A parent already gone before this ran ends the child at once."""
    parent = parent_pid()
    if parent is None:
        return
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    else:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)


def _run(job: Job, env: dict, progress: bool, children: Children) -> int:
    if children.stopped:  # stopped before its turn: nothing written
        return -signal.SIGTERM
    job.run_dir.mkdir(parents=True, exist_ok=True)
    with (
        open_no_follow(job.log) as log,
        Progress(desc=job.name, total=job.steps, unit="step", enabled=progress) as bar,
    ):
        proc = children.start(job.command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if proc is None:  # stopped while its folder was made
            return -signal.SIGTERM
        while True:
            try:
                proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                show_state(bar, job)
        show_state(bar, job)
    return proc.returncode


def show_state(bar: Progress, job: Job) -> None:
    """Move a child's bar to its latest logged step, with its latest val bpb and, once every step
    is done, that it is being evaluated."""
    now = metrics_log.latest(job.run_dir)
    figures = {"val_bpb": f"{now.val_bpb:.4f}"} if now.val_bpb is not None else {}
    evaluating = now.step >= job.steps and not now.evaluated
    bar.set_postfix(**figures, **({"now": "evaluating"} if evaluating else {}), refresh=False)
    bar.update(max(0, now.step - bar.n))  # displays, at most every mininterval


def last_line(log: Path) -> str:
    """The last non-blank line of a log: what a failed child said last (without its `learntok:
    error:` prefix, as it goes into the parent's own error)."""
    lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    return lines[-1].strip().removeprefix("learntok: error: ") if lines else "no output"
