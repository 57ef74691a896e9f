"""A run and a model folder written in an older config format load and give the figures they
gave when they were written (tests/data/old-format/README.md)."""
import json
import shutil
from pathlib import Path

import pytest

from learntok.checkpoint import load_run
from learntok.config import load_config
from learntok.data import ByteData
from learntok.evaluate import EvalOptions, evaluate_bpb

OLD = Path(__file__).resolve().parent / "data" / "old-format"
EXPECTED = json.loads((OLD / "expected.json").read_text())
WEIGHTS = OLD / "run" / "checkpoints" / "step_0000002" / "model.safetensors"


def figures(model, data) -> dict:
    out = {}
    for mode in ("sampled", "greedy"):
        r = evaluate_bpb(model, data, "val", EvalOptions(batch_size=4, seq_len=64, max_bytes=4096,
                                                         greedy=mode == "greedy", seed=3))
        out[mode] = {k: r[k] for k in EXPECTED[mode]}
    return out


def assert_same(got: dict) -> None:
    for mode, values in EXPECTED.items():
        for key, value in values.items():
            assert got[mode][key] == pytest.approx(value, rel=1e-9, abs=1e-12), (mode, key)


def test_an_old_run_folder_loads_and_gives_the_same_figures():
    model, cfg = load_run(OLD / "run")
    assert_same(figures(model, ByteData.from_config(cfg.data)))


def test_an_old_model_folder_loads_and_gives_the_same_figures(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(OLD / "model" / "config.json", folder)
    shutil.copy(WEIGHTS, folder)
    model, cfg = load_run(folder)
    assert cfg is None
    _, run_cfg = load_run(OLD / "run")
    assert_same(figures(model, ByteData.from_config(run_cfg.data)))


def test_an_old_config_toml_loads_as_the_run_it_describes():
    from_toml = load_config(file=OLD / "run" / "config.toml")
    _, from_checkpoint = load_run(OLD / "run")
    assert from_toml == from_checkpoint
