"""Numbers that are not numbers, by kind (docs/reliability.md, "Numbers that are not numbers"):
weights that hold NaN or an infinity are refused where every model is read
(`pretrained.read_weights`), a figure that would come out NaN or infinite is refused where the
figures are summed (`evaluate.finite_sums`), and a NaN or infinite value in a checkpoint's
config.json or a metrics row is refused by the readers' type check. Each is one line naming
the checkpoint or the file and field; nothing that was there is changed.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import learntok.evaluation.metrics as evaluate
import learntok.evaluation.score as score
import learntok.evaluation.tasks as eval_tasks
from conftest import assert_one_line_error, checksums, cli_in_process, run_cli
from learntok import AUNet, Tokenizer
from learntok.util.errors import NotFiniteError

CKPT = "run/checkpoints/step_0000003"
VALUES = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
COMMANDS = {
    "eval": ["eval", "run", "--max-bytes", "256"],
    "sample": ["sample", "run", "--prompt", "a", "--max-bytes", "2"],
    "segment": ["segment", "run", "some text"],
    "eval-tasks": ["eval-tasks", "run", "--task", "task.jsonl"],
}


def poison_weights(root, value) -> str:
    """Put `value` into one entry of the checkpoint's first floating weight; returns its name."""
    path = root / CKPT / "model.safetensors"
    weights = load_file(str(path))
    name = next(k for k, v in weights.items() if v.is_floating_point())
    weights[name] = weights[name].clone()
    weights[name].view(-1)[0] = value
    save_file({k: v.contiguous() for k, v in weights.items()}, str(path))
    return name


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("command", COMMANDS)
def test_weights_that_are_not_numbers_are_refused_by_every_command(workdir, capsys, command, value):
    name = poison_weights(workdir, VALUES[value])
    before = checksums(workdir)
    code, err = cli_in_process(COMMANDS[command], capsys)
    assert_one_line_error(code, err, f"weight {name} holds", before, checksums(workdir))
    assert CKPT in err and ("NaN" if value == "nan" else "infinity") in err
    assert "incompatible" not in err  # not a version's fault


def test_weights_that_are_not_numbers_in_a_child_process(workdir):
    poison_weights(workdir, float("nan"))
    before = checksums(workdir)
    r = run_cli(*COMMANDS["eval"], cwd=workdir)
    assert_one_line_error(r.returncode, r.stderr, "holds NaN", before, checksums(workdir))


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("load", [Tokenizer.from_pretrained, AUNet.from_pretrained], ids=["Tokenizer", "AUNet"])
def test_from_pretrained_refuses_weights_that_are_not_numbers(workdir, load, value):
    poison_weights(workdir, VALUES[value])
    with pytest.raises(NotFiniteError, match=f"{CKPT}/model.safetensors: weight .* holds"):
        load("run")


def poison_config(root, section, key, value):
    path = root / CKPT / "config.json"
    config = json.loads(path.read_text())
    config[section][key] = value
    path.write_text(json.dumps(config))  # NaN and Infinity, as json writes them


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("key", ["optim.lr", "model.target_rate", "model.init_std", "train.train_bytes"])
def test_a_config_json_value_that_is_not_a_number_is_refused(workdir, capsys, key, value):
    poison_config(workdir, *key.split("."), VALUES[value])
    before = checksums(workdir)
    code, err = cli_in_process(COMMANDS["eval"], capsys)
    assert_one_line_error(code, err, key, before, checksums(workdir))
    assert f"{CKPT}/config.json" in err


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize(
    "command, field",
    [
        (["plot", "run", "--out", "plots"], "val_bpb"),
        (["plot", "run", "--out", "plots"], "bytes_seen"),
        (["segment", "run", "--held-out"], "val_boundary_rate"),
        (["segment", "run", "--held-out"], "time"),
    ],
)
def test_a_metrics_row_that_is_not_a_number_is_refused(workdir, capsys, command, field, value):
    row = {"kind": "val", "step": 3, "time": 1.0, "bytes_seen": 768, "val_bpb": 8.0, "val_boundary_rate": 0.2}
    with open(workdir / "run" / "metrics.jsonl", "a") as f:
        f.write(json.dumps({**row, field: VALUES[value]}) + "\n")
    before = checksums(workdir)
    code, err = cli_in_process(command, capsys)
    assert_one_line_error(code, err, f"field {field!r} is", before, checksums(workdir))
    assert "metrics.jsonl line" in err and "not a finite number" in err


def nan_scores(*args, **kwargs):
    return [(float("nan"), 4, False)] * len(args[1])


@pytest.mark.parametrize(
    "command, module, name, fake",
    [
        ("eval", score, "token_ce", lambda logits, x: (torch.full(x[:, 1:].shape, float("nan")), x[:, 1:] >= 0)),
        ("eval-tasks", eval_tasks, "score_requests", nan_scores),
    ],
)
def test_a_figure_that_comes_out_not_finite_is_refused_naming_the_checkpoint(
    workdir, capsys, monkeypatch, command, module, name, fake
):
    monkeypatch.setattr(module, name, fake)  # a model whose outputs overflow
    before = checksums(workdir)
    code, err = cli_in_process(COMMANDS[command], capsys)
    said = "\n".join(line for line in err.splitlines() if line.startswith("learntok"))  # eval's notes aside
    assert_one_line_error(code, said, "came out NaN or infinite", before, checksums(workdir))
    assert CKPT in said


@pytest.mark.parametrize("value", VALUES)
def test_finite_sums_refuses_any_value_that_is_not_a_number(value):
    assert evaluate.finite_sums(np.array([1.0, 2.0]), "x").tolist() == [1.0, 2.0]
    with pytest.raises(NotFiniteError, match="bpb came out NaN or infinite"):
        evaluate.finite_sums(np.array([1.0, VALUES[value]]), "bpb")
