"""A run's metrics log, RUN/metrics.jsonl: the one module that writes, reads and classifies it.

One JSON object a line, each with its `kind`, its `step` and the wall-clock `time` it was
written (Unix seconds); every other field a finite number:

    train  the mean of each training metric over the steps since the last row (loss, bpb,
           boundary_rate, whitespace_rate, grad_norm, bytes_per_s, ...), lr and bytes_seen
    val    a periodic validation: val_bpb, val_boundary_rate, val_whitespace_rate, val_bytes
    fit    what the strategy's fit reports (step 0; e.g. the bpe tokenizer's vocabulary)
    eval   compare's final evaluation of the run (val_* and test_* figures)

Rows are appended while the run trains, so a crash (kill -9 mid-write) may leave a last line
cut short: every reader drops such a line, and `read` names any other line that is not a row.
Runs written before rows had a `kind` are read as if they had one (`kind_of`, applied once in
the readers), so no caller classifies rows by their keys.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from learntok.util.errors import DataError, FormatError
from learntok.util.files import open_no_follow, read_input, write_text_atomic
from learntok.util.json_toml import expect, expect_fields, parse_json

METRICS = "metrics.jsonl"  # the log's name in a run folder
KINDS = ("train", "val", "fit", "eval")
TRAINING = ("train", "fit")  # the rows a training curve draws (the fit's figures at step 0 among them)
TAIL = 1 << 16  # bytes from the end of the log that `latest` reads


def log_path(run: str | Path) -> Path:
    """RUN/metrics.jsonl of a run folder, or `run` itself when it names the file."""
    path = Path(run)
    return path / METRICS if path.is_dir() else path


def append(run_dir: str | Path, kind: str, step: int, row: dict) -> dict:
    """Append one row of `kind` at `step` to RUN/metrics.jsonl, stamped with the time; returns it."""
    if kind not in KINDS:
        raise ValueError(f"metrics kind {kind!r} is not one of {', '.join(KINDS)}")
    record = {"kind": kind, "step": step, "time": round(time.time(), 3), **row}
    with open_no_follow(Path(run_dir) / METRICS) as f:  # never through a link out of the run
        f.write(json.dumps(record) + "\n")
    return record


def check_row(row, where: str) -> dict:
    """`row` when it is a metrics row: an object with an integer `step`, its `kind` a string and
    every other field a finite number (a figure that is NaN, a string or null would plot as
    nothing or print as nan); else a DataError naming the field."""
    expect_fields(row, {"step": "an integer"}, where, DataError)
    for key, value in row.items():
        expect(value, "a string" if key == "kind" else "a finite number", f"{where}: field {key!r}", DataError)
    return row


def kind_of(row: dict) -> str:
    """A row's kind: its `kind` field, or for a row written before rows had one, what its keys
    say (test_* figures: compare's evaluation; val_* figures: a validation; else training)."""
    if "kind" in row:
        return row["kind"]
    if any(k.startswith("test_") for k in row):
        return "eval"
    return "val" if any(k.startswith("val_") for k in row) else "train"


def _upgraded(row: dict) -> dict:
    return row if "kind" in row else {"kind": kind_of(row), **row}


def _lines(path: Path) -> list[tuple[str, dict]]:
    """(line, row as written) for each row of the log; a torn last line is left out, any other
    line that is not a row is a DataError naming it."""
    text = read_input(path, "metrics file").decode("utf-8", errors="replace")
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    rows = []
    for i, (lineno, line) in enumerate(lines):
        try:
            row = parse_json(line)
        except FormatError as e:
            if i == len(lines) - 1 and not text.endswith("\n"):  # torn by a crash
                break
            raise DataError(f"{path} line {lineno}: {e}") from None
        rows.append((line, check_row(row, f"{path} line {lineno}")))
    return rows


def read(run: str | Path) -> list[dict]:
    """Every row of a run's log (a run folder or the file), each with its kind: a last line cut
    before its newline that does not parse is left out; any other line that is not a row is an
    error naming it. A log that is not there is one line asking whether `run` is a run."""
    path = log_path(run)
    if not path.exists() and not path.is_symlink():
        raise DataError(f"{path} does not exist: is {run} a run folder?")
    return [_upgraded(row) for _, row in _lines(path)]


def split(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(training rows, validation rows): the strategy's fit row counts as training, compare's
    final evaluation row as neither."""
    return [r for r in rows if r["kind"] in TRAINING], [r for r in rows if r["kind"] == "val"]


def series(rows: list[dict], key: str, x: str = "step") -> tuple[list[float], list[float]]:
    """(xs, ys) of the rows that have both `x` and `key`."""
    pts = [(r[x], r[key]) for r in rows if key in r and x in r]
    return [p[0] for p in pts], [p[1] for p in pts]


def last(rows: list[dict], kind: str) -> dict | None:
    """The last row of `kind`, or None."""
    return next((r for r in reversed(rows) if r["kind"] == kind), None)


def last_logged(run_dir: str | Path, kind: str) -> dict | None:
    """The last row of `kind` in RUN/metrics.jsonl; None when there is none, the folder has no
    log or an empty one (a model or checkpoint folder, a run that logged nothing yet). A log
    that is there is read whole: a bad row is an error."""
    path = Path(run_dir) / METRICS
    if not path.is_file() or not path.stat().st_size:
        return None
    return last(read(path), kind)


def logged_steps(run_dir: Path) -> int:
    """The highest step with a row in RUN/metrics.jsonl (0 if none, or no log)."""
    path = Path(run_dir) / METRICS
    return max((row["step"] for _, row in _lines(path)), default=0) if path.is_file() else 0


def trim(run_dir: Path, step: int) -> None:
    """Cut RUN/metrics.jsonl back to `step` (what was logged after the checkpoint a run resumes
    from, and a last line torn by a crash, goes), replaced atomically; the rows kept as written."""
    path = Path(run_dir) / METRICS
    if path.is_file():
        write_text_atomic(path, "".join(line + "\n" for line, row in _lines(path) if row["step"] <= step))


def tail(run_dir: Path, size: int = TAIL) -> list[dict]:
    """The rows in the last `size` bytes of RUN/metrics.jsonl, which its writer may be appending
    to: a line cut by the start of the window, torn by the writer or not a row is skipped
    (nothing here is an error: a log being written is looked at, not checked)."""
    path = Path(run_dir) / METRICS
    if not path.is_file():
        return []
    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - size))
        lines = f.read().splitlines()
    rows = []
    for line in lines:
        try:
            rows.append(_upgraded(check_row(parse_json(line), str(path))))
        except (ValueError, DataError):
            continue
    return rows


@dataclass(frozen=True)
class Latest:
    """Where a training run stands by the end of its log: what `compare --jobs` shows of a child."""

    step: int  # the latest training step logged (0 before any)
    val_bpb: float | None  # the latest validation bits per byte
    evaluated: bool  # whether compare's final evaluation row is there


def latest(run_dir: Path, size: int = TAIL) -> Latest:
    """The latest training step, validation bpb and whether the run is evaluated, from the tail
    of its log (`tail`)."""
    rows = tail(run_dir, size)
    val = last(rows, "val")
    return Latest(
        step=max((r["step"] for r in rows if r["kind"] == "train"), default=0),
        val_bpb=val.get("val_bpb") if val else None,
        evaluated=any(r["kind"] == "eval" for r in rows),
    )
