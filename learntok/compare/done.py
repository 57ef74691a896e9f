"""A finished run's marker, RUN/done.json: the figures `compare` reports for it, written once its
evaluation is done and read back by a rerun instead of training and evaluating again
(docs/reliability.md, "Nothing reused that no longer matches").

A marker is reused only while it still describes what is asked: it must be a record of the
fields `compare` writes (`check_record`), of the same run at the same seed, strategy and
steps (`check_same_run`), evaluated on the same --eval-bytes,
and the run's stored config (RUN/config.toml) must hold the settings asked for
(runfolder.check_same_settings, every section but how the run was run and logged). Anything else
is one line; the marker is never rewritten by a reader.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from learntok.run.config import RunConfig
from learntok.util.errors import RunFolderError
from learntok.util.files import read_input, write_text_atomic
from learntok.data.identity import DATA_IDENTITY, check_identity
from learntok.run.folder import check_same_settings, stored_config
from learntok.util.json_toml import parse_json

DONE = "done.json"
DONE_BYTES = 1 << 20  # a marker is a few hundred bytes; more is not one
TEXT, WHOLE, NUMBER = (str,), (int,), (int, float)
FIELDS = {"variant": TEXT, "run": TEXT, "strategy": TEXT, "seed": WHOLE, "steps": WHOLE, "bytes_per_s": NUMBER}
SPLIT_FIGURES = {
    "bpb": NUMBER,
    "doc_bpb": NUMBER,
    "doc_se": NUMBER,
    "docs": WHOLE,
    "bytes": WHOLE,
    "boundary_rate": NUMBER,
    "whitespace_rate": NUMBER,
}


def expected_fields() -> dict[str, tuple[type, ...]]:
    """Every field a marker must hold, with the types it may have."""
    splits = {f"{s}_{k}": t for s in ("val", "test") for k, t in SPLIT_FIGURES.items()}
    return {**FIELDS, **splits}


def check_record(record, path: Path, run: str) -> dict:
    """`record` if it is a marker of `run`: an object with every expected field of its type
    (numbers finite); else RunFolderError naming the first field that is not."""
    if not isinstance(record, dict):
        raise RunFolderError(f"{path}: not a JSON object; remove it to evaluate the run again")
    for key, types in expected_fields().items():
        value = record.get(key)
        ok = isinstance(value, types) and not isinstance(value, bool)
        if not ok or (isinstance(value, float) and not math.isfinite(value)):
            raise RunFolderError(
                f"{path}: field {key!r} is {value!r}, not {'text' if types is TEXT else 'a number'}; "
                f"remove it to evaluate the run again"
            )
    if record["run"] != run:
        raise RunFolderError(f"{path}: a marker of run {record['run']!r}, not {run!r}; remove it to evaluate again")
    return record


def marked(run_dir: Path) -> bool:
    """Whether anything stands at the run's marker name: a file, but also a folder, a link or a
    FIFO, which `read_done` then refuses in one line before any work (rather than training the
    run again and failing to write its marker at the end)."""
    return os.path.lexists(run_dir / DONE)


def check_same_run(record: dict, path: Path, cfg: RunConfig) -> None:
    """A marker's own settings against its run's stored config `cfg`: its seed, strategy and
    steps (a marker copied from another run, or edited, describes figures this run never made)."""
    stored = {"seed": cfg.train.seed, "strategy": cfg.model.boundary, "steps": cfg.train.steps}
    for key, value in stored.items():
        if record[key] != value:
            raise RunFolderError(
                f"{path}: field {key!r} is {record[key]!r}, this run's is {value!r} (a marker of "
                f"another run?); remove it to evaluate the run again"
            )


def read_done(run_dir: Path, run: str, cfg: RunConfig, eval_bytes: int | None) -> dict:
    """The marker of a finished run, checked to be what this command would compute now."""
    path = run_dir / DONE
    try:
        record = parse_json(read_input(path, "done marker", DONE_BYTES, RunFolderError).decode("utf-8"))
    except ValueError as e:  # not UTF-8, or not JSON
        raise RunFolderError(f"{path}: {' '.join(str(e).split())}; remove it to evaluate the run again") from None
    check_record(record, path, run)
    if record.get("eval_bytes", eval_bytes) != eval_bytes:
        raise RunFolderError(
            f"cannot reuse the results of {run_dir}: they were evaluated with --eval-bytes "
            f"{record['eval_bytes']}, this command asks for {eval_bytes}; give the same or choose another --out"
        )
    stored = stored_config(run_dir)
    check_same_run(record, path, stored)
    check_same_settings(run_dir, stored, cfg, "reuse the results of")
    check_identity(record.get(DATA_IDENTITY), cfg.data.source, "reuse the results of", run_dir)
    return record


def write_done(run_dir: Path, record: dict) -> None:
    write_text_atomic(run_dir / DONE, json.dumps(record, indent=2) + "\n")
