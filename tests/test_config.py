"""Run config: layering, strictness, type parsing, dumping; the learning-rate schedule."""
import json
import math
import tomllib

import pytest

from learntok.config import ConfigError, RunConfig, load_config, preset_names, save_config, to_toml
from learntok.train import lr_at


def test_defaults_preset_overrides_layer_in_order(tmp_path):
    assert load_config().train.seq_len == 4096                      # defaults
    tiny = load_config("tiny")
    assert tiny.train.seq_len == 256 and tiny.train.lr == 3e-3      # preset
    cfg = load_config("20M", overrides=["train.lr=1e-3", "model.boundary=uniform", "objective.early_baseline=false",
                                         "train.betas=0.8,0.99", "data.packed=1"])
    assert (cfg.model.d_model, cfg.train.batch_size) == (384, 32)   # preset kept
    assert cfg.train.lr == 1e-3 and cfg.model.boundary == "uniform"  # overrides win
    assert cfg.objective.early_baseline is False and cfg.data.packed is True
    assert cfg.train.betas == (0.8, 0.99)
    file = tmp_path / "my.toml"
    file.write_text("[train]\nsteps = 7\nlr = 1\n")                 # int accepted for a float
    cfg = load_config("tiny", file, ["train.steps=9"])
    assert (cfg.train.steps, cfg.train.lr, cfg.train.seq_len) == (9, 1.0, 256)


def test_every_preset_loads():
    assert {"tiny", "20M", "40M", "90M", "147M"} <= set(preset_names())
    assert load_config("147M").model.n_mid == 12 and load_config("90M").train.lr == 2e-3


@pytest.mark.parametrize("overrides, words", [
    (["train.stepz=3"], "train.stepz"),
    (["optim.lr=3"], "optim"),
    (["steps=3"], "section.key=value"),
    (["train.steps=3.5"], "train.steps=3.5"),
    (["train.compile=yes"], "train.compile=yes"),
    (["model.d_model=130"], "n_heads"),                             # invariant from __post_init__
    (["objective.batch_baseline=median"], "median"),
])
def test_bad_overrides_name_the_culprit(overrides, words):
    with pytest.raises(ConfigError, match=words.replace(".", r"\.")):
        load_config("tiny", overrides=overrides)


def test_bad_files_and_presets(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[train]\nsteps = "10"\n')
    with pytest.raises(ConfigError, match="train.steps"):
        load_config(file=bad)
    bad.write_text("[training]\nsteps = 10\n")
    with pytest.raises(ConfigError, match="training"):
        load_config(file=bad)
    with pytest.raises(ConfigError, match="nope"):
        load_config("nope")
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(file=tmp_path / "missing.toml")


def test_dump_round_trips_through_toml_and_json(tmp_path):
    cfg = load_config("40M", overrides=["train.betas=0.8,0.9", "train.device=cpu"])
    assert RunConfig.from_dict(tomllib.loads(to_toml(cfg))) == cfg
    save_config(cfg, tmp_path / "c.json")
    assert RunConfig.from_dict(json.loads((tmp_path / "c.json").read_text())) == cfg
    assert load_config(file=tmp_path / "c.json") == cfg
    with pytest.raises(ConfigError, match="model.bogus"):
        RunConfig.from_dict({"model": {"bogus": 1}})


def test_lr_schedule_warms_up_then_cosine_to_floor():
    cfg = load_config(overrides=["train.steps=100", "train.warmup_steps=10", "train.lr=1.0", "train.min_lr_ratio=0.1"]).train
    lrs = [lr_at(s, cfg) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(lrs[:10], lrs[1:10]))         # warm-up rises
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))           # then decays
    assert lrs[-1] == pytest.approx(0.1)                             # to the floor at the last step
    mid = 10 + (99 - 10) / 2
    assert lr_at(int(mid), cfg) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (int(mid) - 10) / 89)))
