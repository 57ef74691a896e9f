"""optim.ema: the weights' exponential moving average, against its plain recurrence, saved as a
model folder beside each checkpoint, restored exactly on resume, and scored by compare."""

import pytest
import torch

import learntok.train.loop as train_mod
from learntok.run.checkpoint import EMA, load_checkpoint, load_run
from learntok.compare.runner import evaluate_run
from learntok.run.config import load_config
from learntok.run.distributed import DistEnv
from learntok.util.errors import ConfigError
from learntok.model.pretrained import WEIGHTS, read_weights
from learntok.train.loop import train

DECAY = 0.75
ENV = DistEnv(0, 1, 0, torch.device("cpu"))


@pytest.fixture
def cfg(train_cfg):
    return lambda *overrides: train_cfg("log.segment_every=0", *overrides)


def average_of(run_dir, step):
    return read_weights(run_dir / "checkpoints" / f"step_{step:07d}" / EMA / WEIGHTS, "cpu")


def test_the_average_is_the_plain_recurrence_over_the_weights_after_each_step(cfg, tmp_path, monkeypatch):
    seen, real_step = [], train_mod.train_step

    def recording(eng, *args, **kwargs):
        out = real_step(eng, *args, **kwargs)
        seen.append({k: v.detach().clone() for k, v in eng.model.state_dict().items()})
        return out

    monkeypatch.setattr(train_mod, "train_step", recording)
    train(cfg(f"optim.ema={DECAY}"), tmp_path / "run", progress=False)
    reference = dict(seen[0])  # the first update copies the weights
    for weights in seen[1:]:
        reference = {k: DECAY * reference[k] + (1 - DECAY) * weights[k] for k in reference}
    got = average_of(tmp_path / "run", 8)
    assert got.keys() == reference.keys()
    for k in got:  # the rate controller's bias (a buffer) is averaged as well
        torch.testing.assert_close(got[k], reference[k], rtol=1e-5, atol=1e-6)
    assert not all(torch.equal(got[k], seen[-1][k]) for k in got)
    assert load_checkpoint(tmp_path / "run").state["ema_updates"] == 8


def test_a_resumed_run_ends_with_the_same_average(cfg, tmp_path):
    c = cfg(f"optim.ema={DECAY}")
    train(c, tmp_path / "full", progress=False)
    train(c, tmp_path / "part", until=4, progress=False)
    train(c, tmp_path / "part", resume=True, progress=False)
    a, b = average_of(tmp_path / "part", 8), average_of(tmp_path / "full", 8)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_no_average_by_default(cfg, tmp_path):
    train(cfg(), tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / "checkpoints" / "step_0000008" / EMA).exists()
    assert "ema_test_bpb" not in evaluate_run(tmp_path / "run", cfg(), 256, ENV)


def test_the_average_loads_as_a_model_and_compare_scores_it(cfg, tmp_path):
    c = cfg(f"optim.ema={DECAY}")
    train(c, tmp_path / "run", progress=False)
    model, run_cfg = load_run(tmp_path / "run" / "checkpoints" / "step_0000008" / EMA)
    assert run_cfg == load_config(file=tmp_path / "run" / "config.toml")
    assert all(torch.equal(p, average_of(tmp_path / "run", 8)[k]) for k, p in model.state_dict().items())
    figures = evaluate_run(tmp_path / "run", c, 256, ENV)
    assert 0 < figures["ema_test_bpb"] < 10 and 0 <= figures["ema_test_boundary_rate"] <= 1
    assert figures["ema_test_bpb"] != figures["test_bpb"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["optim.ema=1"], "optim.ema"),
        (["optim.ema=-0.1"], "optim.ema"),
        (["optim.ema=1.5"], "optim.ema"),
        (["optim.ema=nan"], "optim.ema"),
        (["optim.ema=0.9", "system.fsdp=true"], "optim.ema 0.9 with system.fsdp"),
    ],
)
def test_impossible_averages_are_refused(cfg, overrides, message):
    with pytest.raises(ConfigError, match=message):
        cfg(*overrides)
