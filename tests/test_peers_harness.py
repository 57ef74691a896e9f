"""benchmarks/peers.py's training harness: learntok trains with its own step (the policy's
learning-rate multiplier and the rate controller), every model gets the same AdamW settings,
and the learning-rate sweep and layout names parse."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from learntok.data import ByteData, DataConfig

_spec = importlib.util.spec_from_file_location("peers", Path(__file__).resolve().parents[1] / "benchmarks" / "peers.py")
peers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peers)

SMALL = dict(d_model=32, n_heads=2, n_down=1, n_mid=1, n_up=1)


@pytest.mark.parametrize(
    ("name", "kind", "layout"),
    [
        ("megabyte", "megabyte", {}),
        ("learntok-learned-0.2", "learntok-learned-0.2", {}),
        ("learntok-uniform-1/8@1-4-1", "learntok-uniform-1/8", {"n_down": 1, "n_mid": 4, "n_up": 1}),
    ],
)
def test_model_names_carry_a_layout(name, kind, layout):
    assert peers.split_model(name) == (kind, layout)


def test_learning_rates_sweep_and_per_model():
    models = ["megabyte", "plain"]
    assert peers.learning_rates(None, "1e-3,2e-3", models) == {"megabyte": [1e-3, 2e-3], "plain": [1e-3, 2e-3]}
    assert peers.learning_rates("megabyte=4e-3", "2e-3", models) == {"megabyte": [4e-3], "plain": [2e-3]}
    with pytest.raises(SystemExit, match="not in --models"):
        peers.learning_rates("hnet=1e-3", "2e-3", models)


def test_best_lr_picks_the_lowest_bits_per_byte_per_model():
    rows = [
        {"model": "a", "lr": 1e-3, "val_bpb": 3.0},
        {"model": "a", "lr": 2e-3, "val_bpb": 2.5},
        {"model": "b", "lr": 4e-3, "val_bpb": 2.9},
        {"model": "b", "lr": 1e-3, "error": "x"},
    ]
    assert peers.best_lr(rows) == "a=0.002,b=0.004"


def test_learntok_recipe_is_the_tiny_recipe_at_the_harness_learning_rate():
    cfg = peers.learntok_recipe("learntok-learned-0.2", {"n_mid": 4}, lr=4e-3, warmup=20)
    assert (cfg.model.d_model, cfg.model.n_mid, cfg.model.target_rate) == (224, 4, 0.2)
    assert (cfg.optim.lr, cfg.optim.warmup_steps, cfg.optim.policy_lr_mult) == (4e-3, 20, 16.0)
    assert cfg.objective.rate_gain > 0
    peer = peers.harness_config("megabyte", {}, 4e-3, 20)
    assert (peer.optim.lr, peer.optim.betas, peer.optim.grad_clip) == (4e-3, cfg.optim.betas, cfg.optim.grad_clip)


def test_learntok_step_runs_the_rate_controller(monkeypatch):
    """The harness's learntok step is learntok's train_step: after a step, the controller has moved
    (a plain loss-and-AdamW step, as the harness once ran, leaves it where it was)."""
    monkeypatch.setattr(peers, "LEARNTOK", SMALL)
    cfg = peers.learntok_recipe("learntok-learned-0.2", lr=1e-3, warmup=2)
    torch.manual_seed(0)
    model = peers.AUNet(cfg.model)
    data = ByteData.from_config(DataConfig(source="shakespeare"))
    before = [b.clone() for b in model.strategy.buffers()]
    run = peers.step_fn(model, data, 2, 64, cfg)
    bpb = run(0)
    assert bpb > 0
    after = list(model.strategy.buffers())
    assert any(not torch.equal(a, b) for a, b in zip(before, after)), "the rate controller did not move"
