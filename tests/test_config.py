"""Run config: layering, strictness, type parsing, dumping; the learning-rate schedule."""

import json
import math
import tomllib

import pytest

from learntok.run.config import RunConfig, load_config, preset_names, save_config, to_toml
from learntok.util.errors import ConfigError
from learntok.train.step import lr_at


def test_defaults_preset_overrides_layer_in_order(tmp_path):
    assert load_config().train.seq_len == 4096  # defaults
    tiny = load_config("tiny")
    assert tiny.train.seq_len == 256 and tiny.optim.lr == 3e-3  # preset
    cfg = load_config(
        "20M",
        overrides=[
            "optim.lr=1e-3",
            "model.boundary=uniform",
            "objective.early_baseline=false",
            "optim.betas=0.8,0.99",
            "data.packed=1",
        ],
    )
    assert (cfg.model.d_model, cfg.train.batch_size) == (384, 32)  # preset kept
    assert cfg.optim.lr == 1e-3 and cfg.model.boundary == "uniform"  # overrides win
    assert cfg.objective.early_baseline is False and cfg.data.packed is True
    assert cfg.optim.betas == (0.8, 0.99)
    file = tmp_path / "my.toml"
    file.write_text("[train]\nsteps = 7\n[optim]\nlr = 1\n")  # int accepted for a float
    cfg = load_config("tiny", file, ["train.steps=9"])
    assert (cfg.train.steps, cfg.optim.lr, cfg.train.seq_len) == (9, 1.0, 256)


def test_every_preset_loads():
    assert {"tiny", "20M", "40M", "90M", "147M"} <= set(preset_names())
    assert load_config("147M").model.n_mid == 12 and load_config("90M").optim.lr == 2e-3


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["train.stepz=3"], "train.stepz"),
        (["optimizer.lr=3"], "optimizer"),
        (["train.lr=3"], "train.lr"),  # moved to [optim]: named, not ignored
        (["strategy.temperature=2"], "strategy 'learned'"),  # another strategy's option
        (["model.boundary=foo"], "'foo' is not a boundary strategy"),
        (["steps=3"], "section.key=value"),
        (["train.steps=3.5"], "train.steps=3.5"),
        (["system.compile=yes"], "system.compile=yes"),
        (["model.d_model=130"], "n_heads"),  # invariant from __post_init__
        (["objective.batch_baseline=median"], "median"),
    ],
)
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
    cfg = load_config("40M", overrides=["optim.betas=0.8,0.9", "system.device=cpu"])
    assert RunConfig.from_dict(tomllib.loads(to_toml(cfg))) == cfg
    save_config(cfg, tmp_path / "c.json")
    assert RunConfig.from_dict(json.loads((tmp_path / "c.json").read_text())) == cfg
    assert load_config(file=tmp_path / "c.json") == cfg
    with pytest.raises(ConfigError, match="model.bogus"):
        RunConfig.from_dict({"model": {"bogus": 1}})


def test_lr_schedule_warms_up_then_cosine_to_floor():
    cfg = load_config(
        overrides=["train.steps=100", "optim.warmup_steps=10", "optim.lr=1.0", "optim.min_lr_ratio=0.1"]
    ).optim
    lrs = [lr_at(s, cfg, 100) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(lrs[:10], lrs[1:10]))  # warm-up rises
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))  # then decays
    assert lrs[-1] == pytest.approx(0.1)  # to the floor at the last step
    mid = 10 + (99 - 10) / 2
    assert lr_at(int(mid), cfg, 100) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (int(mid) - 10) / 89)))


def test_strategy_options_are_their_own_strict_section(tmp_path):
    cfg = load_config(overrides=["model.boundary=nawrot", "strategy.temperature=0.5"])
    assert cfg.model.strategy == {"temperature": 0.5, "prior_weight": 1.0, "hidden_mult": 1.0}
    assert RunConfig.from_dict(tomllib.loads(to_toml(cfg))) == cfg  # [strategy] round-trips
    assert load_config(overrides=["model.boundary=uniform"]).model.strategy == {}
    file = tmp_path / "s.toml"
    file.write_text('[model]\nboundary = "hnet"\n[strategy]\nprior_weight = 2.0\n')
    with pytest.raises(ConfigError, match="prior_weight is not an option of strategy 'hnet'"):
        load_config(file=file)
    with pytest.raises(ConfigError, match="strategy.temperature"):
        load_config(overrides=["model.boundary=nawrot", "strategy.temperature=hot"])


def test_budget_in_bytes_gives_the_steps():
    cfg = load_config("20M")  # the paper's 8.3e8 bytes, 6.2e7 warm-up
    assert cfg.train.steps == math.ceil(8.3e8 / (32 * 4096))
    assert cfg.optim.warmup_steps == math.ceil(6.2e7 / (32 * 4096))
    assert load_config("20M", overrides=["train.steps=30"]).train.steps == 30  # explicit steps win
    with pytest.raises(ConfigError, match="train_bytes"):
        load_config(overrides=["train.steps=0"])


def test_the_authors_optimizer_options():
    """warmup_start (LinearLR start_factor) and decay_all (AdamW on every parameter), as the paper presets use them."""
    from learntok import AUNet
    from learntok.train.step import build_optimizer

    cfg = load_config(
        "tiny",
        overrides=[
            "optim.warmup_steps=10",
            "optim.warmup_start=0.1",
            "optim.lr=1.0",
            "optim.decay_all=true",
            "optim.weight_decay=0.01",
        ],
    )
    assert lr_at(0, cfg.optim, 100) == pytest.approx(0.1 + 0.9 / 10) and lr_at(9, cfg.optim, 100) == pytest.approx(1.0)
    model = AUNet(cfg.model)
    groups = build_optimizer(model, cfg.optim, __import__("torch").device("cpu")).param_groups
    assert all(g["weight_decay"] == 0.01 for g in groups)
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


@pytest.mark.parametrize(
    ("overrides", "warned"),
    [
        (["train.steps=50"], True),  # the tiny preset warms up over 100 steps
        (["train.steps=100"], False),
        (["train.steps=50", "optim.warmup_steps=10"], False),
        (["train.steps=1500"], False),
    ],
)
def test_a_warm_up_longer_than_the_run_is_a_warning(overrides, warned):
    from learntok.run.config import config_warnings

    lines = config_warnings(load_config("tiny", None, overrides))
    assert bool(lines) == warned
    assert all("optim.warmup_steps" in line and "train.steps" in line for line in lines)


def test_train_prints_the_config_warnings(tmp_path, capsys):
    from learntok.cli import main

    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world, the model cuts its own tokens.\n" * 400)
    args = ["train", "--preset", "tiny", "--out", str(tmp_path / "r"), f"data.source={corpus}", "train.steps=2"]
    assert main([*args, "model.d_model=32", "model.n_heads=2", "train.seq_len=32", "train.batch_size=2"]) == 0
    assert "warning: optim.warmup_steps 100 is more than train.steps 2" in capsys.readouterr().err
