"""Who may write a run folder, and keeping it whole across crashes (docs/reliability.md).

Ownership: `claim(run_dir, resume)` takes an exclusive lock on RUN/.lock (fcntl.flock; the file
names the holder's pid and host) before anything in the folder is read or written. The kernel
drops a flock when its holder exits by any means, kill -9 included, so a lock file left behind
never blocks (a stale lock is simply taken over); a live holder gives a second writer one clear
error naming it. The lock is kept until `release` or the end of the process; claiming a folder
this process already holds is a no-op. Then the folder must suit the request:

    fresh run: a new or empty folder (a lock file aside), or one this command created and that
               never reached its first checkpoint (its leftovers are cleared);
               never a folder of foreign files, nor a run with checkpoints or with logged steps
    --resume:  a run folder with a checkpoint at a step no later than train.steps

Crash upkeep, done while holding the lock (so no writer is active): temporary files and
folders of interrupted atomic writes are removed, and on resume the logs (metrics.jsonl,
segments.txt) are cut back to the checkpoint's step by writing a new file and renaming it
over the old one, so a crash at any moment leaves either the old or the new file, whole.
"""

from __future__ import annotations

import atexit
import dataclasses
import fcntl
import json
import os
import shutil
import socket
from pathlib import Path

from learntok.model.pretrained import LATEST
from learntok.run.config import RunConfig, read_file
from learntok.run import metrics_log
from learntok.run.metrics_log import METRICS
from learntok.data.dataset import anchored_source
from learntok.util.errors import ConfigError, DataError, RunFolderError
from learntok.util.files import remove_stale_tmp, no_follow_fd, write_text_atomic
from learntok.util.json_toml import parse_json

LOCK = ".lock"
SEGMENTS, CONFIG, WANDB = "segments.txt", "config.toml", "wandb"
RUN_FILES = (METRICS, SEGMENTS, CONFIG, "checkpoints", WANDB)  # what `train` writes into a run folder
EVENTS = "events.out.tfevents."  # the name prefix of TensorBoard event files (log.tensorboard)
LOG = "train.log"  # a run's console log, kept by `compare --jobs` across resumes (never cleared)
FREE = ("system", "log", "checkpoint")  # sections of how a run is run and logged, not of what it computes

_held: dict[Path, int] = {}  # run folder (resolved) -> file descriptor of its locked .lock
_created: set[Path] = set()  # folders this process created to lock them (removed at exit if still empty)


def is_run_folder(folder: str | Path, by_lock: bool = True) -> bool:
    """Whether `folder` is a training run's: its checkpoints' pointer, its config and metrics, or
    (`by_lock`) its lock alone (a run that has not written a checkpoint yet; other tools name their
    locks so too, so a folder *above* a path is judged without it). Nothing but `train` writes there."""
    folder = Path(folder)
    return (
        (folder / "checkpoints" / LATEST).is_file()
        or ((folder / CONFIG).is_file() and (folder / METRICS).is_file())
        or (by_lock and (folder / LOCK).is_file())
    )


def claim(run_dir: str | Path, resume: bool) -> Path:
    """Lock `run_dir` for this process (creating it if needed), clear what interrupted writes
    left, and check that a fresh run (resume False) may write there. Returns the folder.
    A resume's checks need its checkpoint: `check_resume`, then `trim_logs`."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise RunFolderError(f"--out {run_dir} is a file, not a folder")
    _check_kinds(run_dir)
    ours = (run_dir / LOCK).is_file()  # left by an earlier `train` here
    _lock(run_dir)
    try:
        remove_stale_tmp(run_dir)
        remove_stale_tmp(run_dir / "checkpoints")
        if not resume:
            _check_fresh(run_dir, ours)
    except BaseException:
        release(run_dir)  # a refused folder is not kept locked by a process that goes on
        raise
    return run_dir


def _check_kinds(run_dir: Path) -> None:
    """Each name train uses in a run folder, where it exists, is what train makes of it (the lock
    and the logs files, checkpoints a folder), and not a symbolic link (whose writes would land
    outside the run): anything else is one line, before the lock is taken."""
    for name in (LOCK, LOG, *RUN_FILES):
        path, folder = run_dir / name, name in ("checkpoints", WANDB)
        if path.is_symlink() or (path.exists() and not (path.is_dir() if folder else path.is_file())):
            found = "a symbolic link" if path.is_symlink() else "a folder" if path.is_dir() else "not a regular file"
            raise RunFolderError(
                f"run folder {run_dir}: {name} is {found}, not a {'folder' if folder else 'file'}; "
                f"move it away or choose another --out"
            )


def release(run_dir: str | Path) -> None:
    """Give up the lock on `run_dir` (if this process holds it)."""
    fd = _held.pop(Path(run_dir).resolve(), None)
    if fd is not None:
        os.close(fd)  # closing drops the flock


def _lock(run_dir: Path) -> None:
    key = run_dir.resolve()
    if key in _held:
        return
    if not run_dir.exists():
        run_dir.mkdir(parents=True)
        _created.add(key)
    fd = no_follow_fd(run_dir / LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise RunFolderError(
            f"run folder {run_dir} is in use by {holder} (lock {run_dir / LOCK}); wait for "
            f"that run to end or choose another --out"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode())
    _held[key] = fd


def _holder(fd: int) -> str:
    try:
        info = parse_json(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {info['pid']} on {info['host']}"
    except (ValueError, KeyError, TypeError, OSError):
        return "another process"


@atexit.register
def _remove_unused_folders() -> None:
    """A folder made only to be locked, by a command that then failed, is not left behind."""
    for key in _created:
        if key.is_dir() and [p.name for p in key.iterdir()] == [LOCK]:
            (key / LOCK).unlink()
            key.rmdir()


def _check_fresh(run_dir: Path, ours: bool) -> None:
    names = sorted(p.name for p in run_dir.iterdir() if p.name not in (LOCK, LOG))
    if not names:
        return
    if (run_dir / "checkpoints" / LATEST).is_file():
        raise RunFolderError(f"run folder {run_dir} already has checkpoints; pass --resume or another --out")
    foreign = [n for n in names if n not in RUN_FILES and not n.startswith(EVENTS)]
    if foreign:
        raise RunFolderError(
            f"--out {run_dir} is not empty and not a run folder (it holds {', '.join(foreign[:3])}"
            f"{', ...' if len(foreign) > 3 else ''}); train writes only into a new or empty "
            f"folder, or resumes a run with --resume"
        )
    if metrics_log.logged_steps(run_dir) > 0:
        raise RunFolderError(
            f"run folder {run_dir} has logged steps but no checkpoint to resume from; its "
            f"{METRICS} would mix two runs: choose another --out"
        )
    if not ours:
        raise RunFolderError(
            f"--out {run_dir} is not empty ({', '.join(names)}) and was not started by learntok "
            f"train; train writes only into a new or empty folder, or resumes a run with --resume"
        )
    for name in names:  # our own start, killed before its first checkpoint
        path = run_dir / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def check_resume(run_dir: Path, ckpt_step: int, steps: int) -> None:
    """A resume may only go forward: train.steps below the checkpoint's step would report a
    step the run is not at and rewrite its config."""
    if steps < ckpt_step:
        raise RunFolderError(
            f"cannot resume {run_dir} to train.steps={steps}: its latest checkpoint is at step "
            f"{ckpt_step}; give train.steps >= {ckpt_step}"
        )


def anchored(cfg: RunConfig) -> RunConfig:
    """`cfg` as a run stores it: data.source a built-in name or an absolute path (anchored_source)."""
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, source=anchored_source(cfg.data.source)))


def changed_settings(stored: RunConfig, wanted: RunConfig, free: tuple[str, ...] = ()) -> list[str]:
    """`section.key (stored -> wanted)` for each setting of what a run computes that differs:
    every section but FREE (how it is run and logged) and the `free` keys; sources anchored."""
    a, b = anchored(stored).to_dict(), anchored(wanted).to_dict()
    return [
        f"{section}.{key} ({a[section].get(key)!r} -> {b[section].get(key)!r})"
        for section in a
        if section not in FREE
        for key in sorted(set(a[section]) | set(b[section]))
        if f"{section}.{key}" not in free and a[section].get(key) != b[section].get(key)
    ]


def check_same_settings(run_dir: Path, stored: RunConfig, wanted: RunConfig, action: str, free=()) -> None:
    """Refuse to `action` (resume, reuse the results of) a run whose stored settings differ from
    the ones asked for: its figures would be reported, or its config rewritten, under settings it
    was not trained with. One line naming the differing keys."""
    changes = changed_settings(stored, wanted, free)
    if changes:
        more = f" and {len(changes) - 3} more" if len(changes) > 3 else ""
        raise RunFolderError(
            f"cannot {action} {run_dir}: it was trained with other settings: {'; '.join(changes[:3])}{more}; "
            f"give the run's own settings ({run_dir / CONFIG}) or choose another --out"
        )


def stored_config(run_dir: Path) -> RunConfig:
    """The config a run was trained with (RUN/config.toml), or one line saying it cannot be read."""
    try:
        return RunConfig.from_dict(read_file(run_dir / CONFIG))
    except (ConfigError, DataError, OSError, ValueError, TypeError) as e:
        raise RunFolderError(
            f"{run_dir / CONFIG}: {' '.join(str(e).split())}; its settings cannot be checked"
        ) from None


def trim_logs(run_dir: Path, step: int) -> None:
    """Cut metrics.jsonl and segments.txt back to `step` (what was logged after the checkpoint
    we resume from, and a last line torn by a crash, goes), each replaced atomically."""
    metrics_log.trim(run_dir, step)
    segments = run_dir / SEGMENTS
    if segments.is_file():
        keep, current = [], 0
        for line in _lines(segments):
            if line.startswith("== step "):
                current = int(line[len("== step ") :]) if line[len("== step ") :].isdigit() else step + 1
            if current <= step:
                keep.append(line + "\n")
        write_text_atomic(segments, "".join(keep))


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def open_folder(cfg: RunConfig, out_dir: str | Path, resume: bool, is_main: bool) -> tuple[RunConfig, Path]:
    """Step 2 of training: `cfg` as the run stores it (anchored) and its folder, claimed by rank 0
    (locked, and refused when it is not a fresh run's or this run's own)."""
    run_dir = Path(out_dir)
    cfg = anchored(cfg)  # data.source absolute: evaluated later from anywhere, the same file
    if is_main:
        claim(run_dir, resume)
    return cfg, run_dir
