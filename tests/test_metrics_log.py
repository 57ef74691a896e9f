"""learntok.run.metrics_log is the one writer and reader of a run's metrics.jsonl: old rows get
their kind once, in the reader; compare's progress reads the tail of a log being written; and no
other module of learntok/ names the file or parses it."""

import ast
import json
from pathlib import Path

import pytest

from learntok.run import metrics_log
from learntok.util.errors import DataError

PACKAGE = Path(__file__).resolve().parents[1] / "learntok"
OWNER = "learntok/run/metrics_log.py"
# the module that may name the log's path constant without reading the log: the run folder's
# checks (which names a run folder holds; whether it has logged steps is metrics_log's answer)
NAMES_ONLY = {"learntok/run/folder.py"}


def log_readers(source: str, names_allowed: bool = False) -> list[str]:
    """What in `source` (one module) names or parses metrics.jsonl itself: a string (not a
    docstring) holding the file's name, or (unless `names_allowed`) the path constant
    metrics_log.METRICS, imported or as an attribute. Each offence as `line N: what`."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if metrics_log.METRICS in node.value:
                found.append(f"line {node.lineno}: the string {node.value!r}")
        elif names_allowed:
            continue
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith("metrics_log"):
            if any(a.name == "METRICS" for a in node.names):
                found.append(f"line {node.lineno}: imports METRICS")
        elif isinstance(node, ast.Attribute) and node.attr == "METRICS":
            if isinstance(node.value, ast.Name) and node.value.id == "metrics_log":
                found.append(f"line {node.lineno}: metrics_log.METRICS")
    return found


@pytest.mark.parametrize(
    "snippet, offences",
    [
        ('rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]', 1),
        ('path = run / f"{name}/metrics.jsonl"', 1),
        ("from learntok.run.metrics_log import METRICS\nrows = (run / METRICS).read_text()", 1),
        ("from learntok.run import metrics_log\npath = run / metrics_log.METRICS", 1),
        ('"""Reads metrics.jsonl through metrics_log."""\nrows = metrics_log.read(run)', 0),
        ('def f():\n    """The last row of metrics.jsonl."""\n    return metrics_log.last_logged(r, "val")', 0),
    ],
)
def test_the_checker_finds_a_second_reader(snippet, offences):
    assert len(log_readers(snippet)) == offences


def test_no_module_but_metrics_log_names_or_parses_the_log():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE.parent).as_posix()
        if name != OWNER:
            found[name] = log_readers(path.read_text(), names_allowed=name in NAMES_ONLY)
    assert {k: v for k, v in found.items() if v} == {}


def write(run: Path, text: str) -> Path:
    run.mkdir(exist_ok=True)
    (run / metrics_log.METRICS).write_text(text)
    return run


def test_rows_without_a_kind_are_read_with_the_kind_their_keys_say(tmp_path):
    rows = [{"step": 1, "bpb": 2.0}, {"step": 1, "val_bpb": 2.1}, {"step": 2, "val_bpb": 2.0, "test_bpb": 2.0}]
    run = write(tmp_path / "r", "".join(json.dumps(r) + "\n" for r in rows))
    assert [r["kind"] for r in metrics_log.read(run)] == ["train", "val", "eval"]
    assert [r["kind"] for r in metrics_log.tail(run)] == ["train", "val", "eval"]
    train, val = metrics_log.split(metrics_log.read(run))
    assert [r["step"] for r in train] == [1] and [r["step"] for r in val] == [1]
    assert (run / metrics_log.METRICS).read_text().count("kind") == 0  # the file stays as written


def test_append_then_read_and_series(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    metrics_log.append(run, "fit", 0, {"vocab": 300})
    for step in (1, 2):
        metrics_log.append(run, "train", step, {"bpb": 3.0 - step, "bytes_seen": 100 * step})
        metrics_log.append(run, "val", step, {"val_bpb": 3.5 - step})
    with pytest.raises(ValueError, match="metrics kind"):
        metrics_log.append(run, "other", 3, {})
    train, val = metrics_log.split(metrics_log.read(run))
    assert metrics_log.series(train, "bpb", "bytes_seen") == ([100, 200], [2.0, 1.0])
    assert metrics_log.series(val, "val_bpb") == ([1, 2], [2.5, 1.5])
    assert metrics_log.last_logged(run, "val")["val_bpb"] == 1.5
    assert metrics_log.last_logged(tmp_path, "val") is None  # no log: nothing recorded


def test_latest_reads_a_log_being_written(tmp_path):
    run = write(tmp_path / "r", "")
    assert metrics_log.latest(run) == metrics_log.Latest(0, None, False)
    rows = [{"kind": "train", "step": 4}, {"kind": "val", "step": 4, "val_bpb": 1.25}, {"kind": "train", "step": 5}]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    write(run, text + '{"kind": "eval", "st')  # the writer mid-row
    assert metrics_log.latest(run) == metrics_log.Latest(5, 1.25, False)
    end = json.dumps(rows[-1]) + "\n" + json.dumps({"kind": "eval", "step": 5, "test_bpb": 1.2}) + "\n"
    write(run, text + end[len(json.dumps(rows[-1])) + 1 :])
    assert metrics_log.latest(run) == metrics_log.Latest(5, 1.25, True)
    cut = metrics_log.latest(run, size=len(end) + 3)  # the window starts inside the val row: skipped
    assert cut == metrics_log.Latest(5, None, True)


def test_a_bad_row_is_an_error_naming_its_line(tmp_path):
    run = write(tmp_path / "r", '{"step": 1}\n{"step": 2, "bpb": "x"}\n')
    with pytest.raises(DataError, match="line 2: field 'bpb'"):
        metrics_log.read(run)
    assert metrics_log.tail(run) == [{"kind": "train", "step": 1}]
