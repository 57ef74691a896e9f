"""The training loop: run folder contents, exact resume, divergence, evaluation, optimizer groups."""

import json

import pytest
import torch

import learntok.train.step as step_mod
from learntok.run.checkpoint import load_checkpoint
from learntok.run.config import load_config
from learntok.data import ByteData
from learntok.util.errors import ConfigError, TrainingDiverged
from learntok.model.aunet import AUNet
from learntok.train.loop import train
from learntok.train.step import build_optimizer
from learntok.train.report import validate


@pytest.fixture
def cfg(train_cfg):
    return lambda *overrides: train_cfg(*overrides)


def _losses(run_dir):
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r.get("loss"), r.get("bpb"), r.get("boundary_rate"), r.get("val_bpb")) for r in records]


def test_run_folder_and_summary(cfg, tmp_path):
    summary = train(cfg(), tmp_path / "run", progress=False)
    run = tmp_path / "run"
    assert load_config(file=run / "config.toml") == cfg()
    assert load_checkpoint(run).step == 8
    assert "== step 4" in (run / "segments.txt").read_text()
    steps = [s for s, loss, *_ in _losses(run) if loss is not None]
    assert steps == list(range(1, 9))
    assert 0 < summary["val_bpb"] < 10 and 0 <= summary["val_boundary_rate"] <= 1
    assert {"val_whitespace_rate", "bytes_per_s", "run_dir"} <= set(summary)
    with pytest.raises(ConfigError, match="already has checkpoints"):  # never overwrite a run silently
        train(cfg(), run, progress=False)


def test_resume_reproduces_an_uninterrupted_run_exactly(cfg, tmp_path):
    train(cfg(), tmp_path / "full", progress=False)
    part = tmp_path / "part"
    train(cfg(), part, until=6, progress=False)  # interrupted after step 6 ...
    ckpts = part / "checkpoints"  # ... whose checkpoint was lost: resume from step 4
    for p in (ckpts / "step_0000006").iterdir():
        p.unlink()
    (ckpts / "step_0000006").rmdir()
    (ckpts / "latest").write_text("step_0000004")
    train(cfg(), part, resume=True, progress=False)
    assert _losses(part) == _losses(tmp_path / "full")
    a, b = load_checkpoint(part).model_state, load_checkpoint(tmp_path / "full").model_state
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_nan_loss_stops_and_names_the_last_good_checkpoint(cfg, tmp_path, monkeypatch):
    calls, real_loss = [], step_mod.loss

    def poisoned(out, x, objective):  # NaN at the 6th step
        total, metrics = real_loss(out, x, objective)
        calls.append(1)
        return (total * float("nan") if len(calls) == 6 else total), metrics

    monkeypatch.setattr(step_mod, "loss", poisoned)
    run = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match=r"step 6.*step_0000004"):
        train(cfg("log.log_every=2"), run, progress=False)
    assert load_checkpoint(run).step == 4  # intact, and nothing newer written
    assert not (run / "checkpoints" / "step_0000006").exists()


def test_evaluate_bpb_is_seeded_and_leaves_the_rng_alone(cfg):
    c = cfg()
    data, model = ByteData.from_config(c.data), AUNet(c.model)
    torch.manual_seed(1)
    before = torch.get_rng_state()
    c = cfg("train.batch_size=4", "train.seq_len=48", "log.eval_bytes=256")
    a = validate(model, data, c, None, None)
    assert torch.equal(torch.get_rng_state(), before)
    assert validate(model, data, c, None, None) == a
    assert a["val_bytes"] == 256 and 7 < a["val_bpb"] < 10  # near-uniform over 256 bytes at init


def test_no_weight_decay_on_norms_biases_embeddings(cfg):
    model = AUNet(cfg().model)
    tc = cfg("optim.policy_lr_mult=16").optim
    groups = build_optimizer(model, tc, torch.device("cpu")).param_groups
    decay = [p for g in groups if g["weight_decay"] > 0 for p in g["params"]]
    rest = [p for g in groups if g["weight_decay"] == 0 for p in g["params"]]
    assert decay and id(model.embed.weight) in {id(p) for p in rest} and all(p.dim() == 2 for p in decay)
    assert len(decay) + len(rest) == len(list(model.parameters()))
    policy = {id(p) for p in model.strategy.parameters()}
    for g in groups:
        assert g["lr_mult"] == (16.0 if id(g["params"][0]) in policy else 1.0)
        assert all((id(p) in policy) == (id(g["params"][0]) in policy) for p in g["params"])


@pytest.mark.parametrize("boundary", ["nawrot", "hnet"])
def test_policy_lr_multiplier_is_for_the_score_function_policy_only(cfg, boundary):
    """nawrot's and hnet's predictors train at the backbone's rate: the multiplier undoes the
    learned policy's logit scaling, which they do not have (it would confound the comparison)."""
    c = cfg(f"model.boundary={boundary}", "optim.policy_lr_mult=16")
    groups = build_optimizer(AUNet(c.model), c.optim, torch.device("cpu")).param_groups
    assert all(g["lr_mult"] == 1.0 for g in groups)
