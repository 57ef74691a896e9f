"""What a reader takes on trust, by kind (docs/reliability.md, "Content read by type"): every
reader of a file's content checks the type of what it reads (a parquet text column, a JSON-lines
row and its text field, a config file and its sections, a task file's fields, a metrics row's
figures, a checkpoint's config.json sections and state.pt counts). A value of the wrong type is
one line naming the file, the field and the type found; nothing that was there is changed.

The table runs the command line in this process (`cli.main`: exit code, stderr, no exception
escaping it) on a copy of the trained tiny run; one row per reader also runs as a child process.
"""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from conftest import TINY_RUN, assert_one_line_error, checksums, cli_in_process, run_cli
from learntok.run.checkpoint import STATE, latest_checkpoint, load_checkpoint
from learntok.util.errors import CheckpointError, FormatError
from learntok.util.json_toml import expect, expect_fields, type_found

CKPT = "run/checkpoints/step_0000003"
TRAIN = ["train", "--preset", "tiny", *TINY_RUN, "train.steps=1"]


def parquet(values):
    def write(root):
        pq.write_table(pa.table({"text": pa.array(values * 40)}), root / "bad.parquet")

    return write


def jsonl(name, rows):
    def write(root):
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows * 40))

    return write


def text(name, content):
    return lambda root: (root / name).write_text(content)


def edit_json(path, change):
    def write(root):
        data = json.loads((root / path).read_text())
        change(data)
        (root / path).write_text(json.dumps(data))

    return write


def metrics_row(row):
    def write(root):
        with open(root / "run" / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"kind": "val", "step": 3, "bytes_seen": 768, **row}) + "\n")

    return write


def set_state(key, value):
    def write(root):
        path = root / CKPT / STATE
        state = torch.load(path, weights_only=True)
        state[key] = value
        torch.save(state, path)

    return write


def section(name, value):
    return edit_json(f"{CKPT}/config.json", lambda c: c.__setitem__(name, value))


# (id, what to write, command line, words the line must hold: the file or field, the type found)
CASES = [
    ("parquet-int", parquet([1]), [*TRAIN, "data.source=bad.parquet", "--out", "o"], ("bad.parquet", "int64")),
    ("parquet-float", parquet([1.5]), ["prepare", "bad.parquet", "--out", "o"], ("'text'", "double")),
    ("parquet-bool", parquet([True]), [*TRAIN, "data.source=bad.parquet", "--out", "o"], ("'text'", "bool")),
    ("parquet-list", parquet([[1, 2]]), ["prepare", "bad.parquet", "--out", "o"], ("'text'", "list")),
    ("parquet-struct", parquet([{"a": "x"}]), [*TRAIN, "data.source=bad.parquet", "--out", "o"], ("struct",)),
    ("jsonl-int", jsonl("d.jsonl", [{"text": 5}]), [*TRAIN, "data.source=d.jsonl", "--out", "o"], ("'text'", "an integer")),
    ("jsonl-null", jsonl("d.jsonl", [{"text": None}]), ["prepare", "d.jsonl", "--out", "o"], ("'text'", "null")),
    ("jsonl-list", jsonl("d.jsonl", [{"text": ["a"]}]), [*TRAIN, "data.source=d.jsonl", "--out", "o"], ("a list",)),
    ("jsonl-row-list", jsonl("d.jsonl", [["a"]]), [*TRAIN, "data.source=d.jsonl", "--out", "o"], ("line 1 is a list",)),
    ("jsonl-row-str", jsonl("d.jsonl", ["a"]), ["prepare", "d.jsonl", "--out", "o"], ("line 1 is a string",)),
    ("config-json-list", text("c.json", "[1]"), ["config", "--config", "c.json"], ("c.json is a list",)),
    ("config-json-str", text("c.json", '"x"'), [*TRAIN, "--config", "c.json", "--out", "o"], ("c.json is a string",)),
    ("config-section-int", text("c.toml", "train = 5\n"), ["config", "--config", "c.toml"], ("[train] is an integer",)),
    ("config-section-list", text("c.json", '{"optim": [1]}'), ["config", "--config", "c.json"], ("[optim] is a list",)),
    ("config-value-str", text("c.toml", "[train]\nsteps = 'x'\n"), ["config", "--config", "c.toml"], ("train.steps",)),
    ("task-context-int", jsonl("t.jsonl", [{"context": 1, "continuation": "x"}]), ["eval-tasks", "run", "--task", "t.jsonl"], ("'context' is an integer",)),
    ("task-choices-str", jsonl("t.jsonl", [{"query": "q", "choices": "ab", "gold": 0}]), ["eval-tasks", "run", "--task", "t.jsonl"], ("'choices' is a string",)),
    ("task-choice-int", jsonl("t.jsonl", [{"query": "q", "choices": ["a", 2], "gold": 0}]), ["eval-tasks", "run", "--task", "t.jsonl"], ("'choices' is a list",)),
    ("task-gold-str", jsonl("t.jsonl", [{"query": "q", "choices": ["a", "b"], "gold": "0"}]), ["eval-tasks", "run", "--task", "t.jsonl"], ("'gold' is a string",)),
    ("task-gold-bool", jsonl("t.jsonl", [{"query": "q", "choices": ["a", "b"], "gold": True}]), ["eval-tasks", "run", "--task", "t.jsonl"], ("'gold' is a boolean",)),
    ("task-gold-float", jsonl("t.jsonl", [{"query": "q", "choices": ["a", "b"], "gold": 0.0}]), ["eval-tasks", "run", "--task", "t.jsonl"], ("'gold' is a number",)),
    ("task-row-list", jsonl("t.jsonl", [[1]]), ["eval-tasks", "run", "--task", "t.jsonl"], ("line 1 is a list",)),
    ("task-continuation-empty", jsonl("t.jsonl", [{"context": "a", "continuation": ""}]), ["eval-tasks", "run", "--task", "t.jsonl", "--delimiter", ""], ("'continuation' holds no text",)),
    ("task-choice-empty", jsonl("t.jsonl", [{"query": "q", "choices": ["a", ""], "gold": 0}]), ["eval-tasks", "run", "--task", "t.jsonl"], ("'choices' holds no text",)),
    ("task-choices-none", jsonl("t.jsonl", [{"query": "q", "choices": [], "gold": 0}]), ["eval-tasks", "run", "--task", "t.jsonl"], ("'choices' holds no text",)),
    ("metrics-figure-str", metrics_row({"val_bpb": "x"}), ["plot", "run", "--out", "plots"], ("metrics.jsonl", "'val_bpb' is a string")),
    ("metrics-figure-null", metrics_row({"val_bpb": None}), ["segment", "run", "--held-out"], ("'val_bpb' is null",)),
    ("metrics-figure-list", metrics_row({"bytes_seen": [1]}), ["plot", "run", "--out", "plots"], ("'bytes_seen' is a list",)),
    ("metrics-kind-int", metrics_row({"kind": 1}), ["segment", "run", "--held-out"], ("'kind' is an integer",)),
    ("metrics-step-str", metrics_row({"step": "3"}), ["plot", "run", "--out", "plots"], ("'step' is a string",)),
    ("metrics-row-list", text("run/metrics.jsonl", "[1]\n"), ["plot", "run", "--out", "plots"], ("line 1 is a list",)),
    ("config.json-model-list", section("model", [1]), ["eval", "run", "--max-bytes", "256"], ("config.json", "[model] is a list")),
    ("config.json-strategy-list", section("strategy", [1]), ["sample", "run", "--prompt", "a", "--max-bytes", "2"], ("[strategy] is a list",)),
    ("config.json-data-str", section("data", "x"), ["eval", "run", "--max-bytes", "256"], ("config.json", "[data] is a string")),
    ("config.json-value-str", edit_json(f"{CKPT}/config.json", lambda c: c["model"].__setitem__("d_model", "32")), ["segment", "run", "hi"], ("model.d_model",)),
    ("config.json-list", text(f"{CKPT}/config.json", "[1]"), ["eval", "run", "--max-bytes", "256"], ("config.json", "a JSON list")),
    ("state-step-str", set_state("step", "3"), ["train", "--out", "run", "--resume", "train.steps=4"], (STATE, "'step' is a string")),
    ("state-bytes-float", set_state("bytes_seen", 1.5), ["train", "--out", "run", "--resume", "train.steps=4"], ("'bytes_seen' is a number",)),
    ("state-step-negative", set_state("step", -5), ["train", "--out", "run", "--resume", "train.steps=4"], ("'step' is -5",)),
    ("state-step-other", set_state("step", 2), ["train", "--out", "run", "--resume", "train.steps=4"], ("step_0000003",)),
    ("state-bytes-negative", set_state("bytes_seen", -1), ["train", "--out", "run", "--resume", "train.steps=4"], ("'bytes_seen' is -1",)),
    ("state-rng-list", set_state("rng", [1, 2]), ["train", "--out", "run", "--resume", "train.steps=4"], ("'rng' is a list",)),
    ("state-rng-lacks", set_state("rng", {"python": 1}), ["train", "--out", "run", "--resume", "train.steps=4"], ("'rng' lacks numpy",)),
    ("config-value-empty", text("c.toml", "[log]\nwandb = ''\n"), ["config", "--config", "c.toml"], ("log.wandb is empty",)),
    ("override-value-empty", text("c.toml", ""), ["config", "log.wandb="], ("log.wandb is empty",)),
]  # fmt: skip


@pytest.mark.parametrize("write, argv, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_content_of_the_wrong_type_is_one_line_naming_it(workdir, capsys, write, argv, words):
    write(workdir)
    before = checksums(workdir)
    code, err = cli_in_process(argv, capsys)
    assert_one_line_error(code, err, words[0], before, checksums(workdir))
    assert all(w in err for w in words), err
    made = sorted(p.name for p in (workdir / "o").iterdir()) if (workdir / "o").exists() else []
    assert made in ([], [".lock"]), made  # the output a command was refused before (its lock aside)


# One row of each reader as a user meets it: its own process.
CHILD = [
    "parquet-int",
    "jsonl-null",
    "config-json-list",
    "task-gold-bool",
    "metrics-figure-str",
    "config.json-strategy-list",
]


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in CHILD], ids=CHILD)
def test_content_of_the_wrong_type_in_a_child_process(workdir, case):
    _, write, argv, words = case
    write(workdir)
    before = checksums(workdir)
    r = run_cli(*argv, cwd=workdir)
    assert_one_line_error(r.returncode, r.stderr, words[0], before, checksums(workdir))


def test_a_parquet_column_of_strings_or_binary_is_read(workdir, capsys):
    pq.write_table(
        pa.table({"text": pa.array(["some words here. " * 20] * 40).dictionary_encode()}), workdir / "d.parquet"
    )
    pq.write_table(pa.table({"text": pa.array([b"some bytes here. " * 20] * 40)}), workdir / "b.parquet")
    for name in ("d", "b"):
        code, err = cli_in_process(["prepare", f"{name}.parquet", "--out", f"p{name}"], capsys)
        assert code == 0, err


@pytest.mark.parametrize(
    "value, kind, found",
    [
        ("x", "an integer", "a string"),
        (True, "an integer", "a boolean"),
        (1.0, "an integer", "a number"),
        (float("nan"), "a finite number", "NaN"),
        (float("-inf"), "a finite number", "-Infinity"),
        (None, "a string", "null"),
        ({}, "a list", "an object"),
        (["a", 1], "a list of strings", "a list"),
        (0, "true or false", "an integer"),
    ],
)
def test_expect_names_the_type_found(value, kind, found):
    with pytest.raises(FormatError) as e:
        expect(value, kind, "f.json line 2: field 'x'")
    assert str(e.value) == f"f.json line 2: field 'x' is {found}, not {kind}"
    assert type_found(value) == found


@pytest.mark.parametrize("value", [1, "x", 0.5, None])
def test_expect_fields_passes_what_is_of_its_kind(value):
    schema = {"a": "an integer", "b": "a string", "c": "a finite number", "d": "a string?"}
    record = {"a": 1, "b": "x", "c": 0.5, "d": value if value is None else "y"}
    assert expect_fields(record, schema, "w") is record
    with pytest.raises(FormatError, match="no field 'b'"):
        expect_fields({"a": 1}, schema, "w")


def test_a_state_of_the_wrong_type_is_refused_by_the_api(workdir):
    set_state("step", 3.0)(workdir)
    with pytest.raises(CheckpointError, match="'step' is a number, not an integer"):
        load_checkpoint(latest_checkpoint("run"))
    shutil.rmtree(workdir / "run")
