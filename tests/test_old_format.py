"""A run and a model folder written in an older config format load and give the figures they
gave when they were written (tests/data/old-format/README.md)."""

import json
import shutil
from pathlib import Path

import pytest

from learntok.run.checkpoint import load_run
from learntok.compare.runner import parse_variant
from learntok.run.config import load_config
from learntok.data import ByteData
from learntok.evaluation.evaluate import EvalOptions, evaluate_bpb

OLD = Path(__file__).resolve().parent / "data" / "old-format"
EXPECTED = json.loads((OLD / "expected.json").read_text())
WEIGHTS = OLD / "run" / "checkpoints" / "step_0000002" / "model.safetensors"


def figures(model, data) -> dict:
    out = {}
    for mode in ("sampled", "greedy"):
        r = evaluate_bpb(
            model, data, "val", EvalOptions(batch_size=4, seq_len=64, max_bytes=4096, greedy=mode == "greedy", seed=3)
        )
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


def test_the_moved_keys_are_read_as_the_learned_policys_options():
    _, cfg = load_run(OLD / "run")
    assert cfg.model.strategy == {"window": 4, "logit_scale": 0.125, "softcap": 5.0}
    assert "policy_window" not in cfg.to_dict()["model"]


@pytest.mark.parametrize(
    "overrides, boundary, options",
    [
        (
            ["model.policy_window=2", "model.logit_scale=0.5", "model.softcap=3"],
            "learned",
            {"window": 2, "logit_scale": 0.5, "softcap": 3.0},
        ),
        (
            ["model.boundary=frozen", "model.policy_window=2"],
            "frozen",
            {"window": 2, "logit_scale": 0.0625, "softcap": 6.0},
        ),
        (["model.boundary=uniform", "model.policy_window=2"], "uniform", {}),  # ignored, as it always was there
        (
            ["model.policy_window=2", "strategy.window=3"],
            "learned",
            {"window": 3, "logit_scale": 0.0625, "softcap": 6.0},
        ),
    ],
)
def test_old_keys_on_the_command_line_are_mapped(overrides, boundary, options):
    cfg = load_config(overrides=overrides)
    assert (cfg.model.boundary, cfg.model.strategy) == (boundary, options)


def test_the_compare_alias_w_is_the_new_key():
    assert parse_variant("learned+w=1")[1] == ["model.boundary=learned", "strategy.window=1"]


@pytest.mark.parametrize("preset_then, window", [("learned", 1), ("frozen", 1), ("uniform", None)])
def test_a_preset_keeps_the_policy_options_for_strategies_that_have_them(preset_then, window):
    cfg = load_config("tiny", overrides=[f"model.boundary={preset_then}"])
    assert cfg.model.strategy.get("window") == window


@pytest.mark.parametrize("boundary", ["learned", "frozen", "uniform", "entropy"])
@pytest.mark.parametrize("old, new, value", [("policy_window", "window", 3), ("logit_scale", "logit_scale", 2.5)])
def test_an_old_key_reads_at_its_new_place_in_every_reader(tmp_path, boundary, old, new, value):
    """Each reader upgrades a table once, where it reads it (learntok.boundaries.options.upgraded):
    an override, a config file, a checkpoint's config.json (RunConfig.from_dict) and a model
    folder's (model_config) read an old [model] key as the strategy's option where the strategy
    has it, and drop it where it does not, as the new key (or nothing) reads."""
    from learntok.boundaries.options import option_types
    from learntok.model.pretrained import model_config
    from learntok.run.config import RunConfig

    has = new in option_types(boundary)
    want = load_config(preset="tiny", overrides=[f"model.boundary={boundary}", *([f"strategy.{new}={value}"] * has)])
    assert load_config(preset="tiny", overrides=[f"model.boundary={boundary}", f"model.{old}={value}"]) == want
    (tmp_path / "old.toml").write_text(f'[model]\nboundary = "{boundary}"\n{old} = {value}\n')
    assert load_config(preset="tiny", file=tmp_path / "old.toml") == want
    d = want.to_dict()
    options = {k: v for k, v in d.pop("strategy").items() if k != new}
    assert RunConfig.from_dict({**d, "model": {**d["model"], old: value}, "strategy": options}) == want
    assert model_config({**d["model"], old: value, "strategy": options}) == want.model
