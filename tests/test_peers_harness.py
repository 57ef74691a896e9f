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
        ("learntok-learned-0.2+objective.lambda_early=0", "learntok-learned-0.2", {"objective.lambda_early": "0"}),
        (
            "learntok-learned-0.2@1-5-1+model.d_model=208+model.n_heads=8",
            "learntok-learned-0.2",
            {"n_down": 1, "n_mid": 5, "n_up": 1, "model.d_model": "208", "model.n_heads": "8"},
        ),
    ],
)
def test_model_names_carry_a_layout(name, kind, layout):
    assert peers.split_model(name) == (kind, layout)


def test_the_narrow_layout_is_its_fields_and_meets_the_parameter_target():
    kind, fields = peers.split_model("learntok-learned-0.2@1-3-1+model.d_model=272+model.n_heads=8+model.d_bytes=144")
    narrow = peers.build(kind, 0, 1024, 0.2, fields)
    named = peers.build("learntok-learned-0.2", 0, 1024, 0.2, peers.parse_layout("narrow"))
    assert named.cfg.byte_width == 144 and named.cfg.d_model == 272 and named.cfg.n_mid == 3
    assert peers.n_params(named) == peers.n_params(narrow)
    assert abs(peers.n_params(named) / 4.03e6 - 1) < 0.02  # equal parameters: within 2% of the target


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


def test_recipe_overrides_in_a_model_name_reach_the_config():
    kind, layout = peers.split_model(
        "learntok-learned-0.2@1-5-1+model.d_model=208+model.n_heads=8+objective.lambda_early=0"
    )
    cfg = peers.learntok_recipe(kind, layout)
    assert (cfg.model.n_down, cfg.model.n_mid, cfg.model.n_up) == (1, 5, 1)
    assert (cfg.model.d_model, cfg.model.n_heads, cfg.objective.lambda_early) == (208, 8, 0.0)


def _arms(**kw):
    ns = dict(seeds="0,1,2", schedule_of=None)
    return peers.ttq_arms(type("A", (), {**ns, **kw})(), ["a", "b"], {"a": [1e-3], "b": [2e-3]})


def test_ttq_arms_cross_models_and_seeds_each_at_its_schedule():
    arms = _arms()
    assert len(arms) == 6 and {a["seed"] for a in arms} == {0, 1, 2}
    assert {a["schedule"] for a in arms} == {"constant"}
    arms = _arms(schedule_of="b=cosine")
    assert sorted({(a["model"], a["schedule"]) for a in arms}) == [("a", "constant"), ("b", "cosine")]
    for bad in ("c=cosine", "a=linear"):
        with pytest.raises(SystemExit, match="--schedule-of"):
            _arms(schedule_of=bad)


def test_seed_table_pairs_each_arm_with_the_reference_by_seed():
    """The paired difference is the mean over seeds of (arm - reference at that seed); its s.e. is
    the spread of those differences over sqrt(n), not of either arm alone."""
    ref = [2.50, 2.60, 2.40]
    arm = [2.45, 2.58, 2.33]  # differences -0.05, -0.02, -0.07
    rows = [
        {"model": m, "lr": 2e-3, "seed": s, "val_bpb": v, "steps_done": 10, "curve": []}
        for m, vals in (("megabyte", ref), ("learntok", arm))
        for s, v in enumerate(vals)
    ]
    table = peers.ttq_seed_table(rows, "megabyte")
    line = next(x for x in table.splitlines() if x.startswith("| learntok"))
    d = [a - r for a, r in zip(arm, ref)]
    mean = sum(d) / 3
    se = (sum((x - mean) ** 2 for x in d) / 2) ** 0.5 / 3**0.5
    assert f"{mean:+.3f} ({se:.3f}), 3 seeds" in line
    assert table.splitlines()[2].startswith("| learntok")  # best first


def test_cosine_schedule_decays_over_the_budget(monkeypatch):
    """With the cosine schedule, the learning rate at the budget's end is min_lr_ratio x lr, and
    at its start (past warm-up) lr; the constant schedule stays at lr."""
    monkeypatch.setattr(peers, "LEARNTOK", SMALL)
    cfg = peers.harness_config("megabyte", {}, 1e-3, 1)
    seen = []
    model = peers.PeerLM(torch.nn.Sequential(torch.nn.Embedding(320, 8), torch.nn.Linear(8, 320)), "plain")
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda self, *a, **k: seen.append(self.param_groups[0]["lr"]))
    data = ByteData.from_config(DataConfig(source="shakespeare"))
    for schedule in ("cosine", "constant"):
        run = peers.step_fn(model, data, 2, 16, cfg, seed=0, schedule=schedule)
        run(5, 0.0)
        run(6, 1.0)
    assert seen[0] == pytest.approx(1e-3) and seen[1] == pytest.approx(1e-3 * cfg.optim.min_lr_ratio)
    assert seen[2:] == [pytest.approx(1e-3)] * 2


def test_the_seed_table_merges_runs_once_and_pairs_by_seed():
    spec = importlib.util.spec_from_file_location(
        "ttq_seeds", Path(__file__).resolve().parents[1] / "docs" / "results" / "ttq_seeds.py"
    )
    ttq_seeds = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ttq_seeds)

    def row(model, seed, bpb, schedule="constant"):
        return {"model": model, "seed": seed, "val_bpb": bpb, "lr": 2e-3, "schedule": schedule, "steps_done": 9}

    main = {"rows": [row("megabyte", s, 2.0 + s) for s in range(3)] + [row("a", s, 1.9 + s) for s in range(3)]}
    narrow = {"rows": [row("b", s, 2.1 + s) for s in range(3)]}
    explore = {"rows": [row("a", 0, 9.9), row("a", 0, 1.5, "cosine")]}  # a's constant seed 0 again: dropped
    rows = ttq_seeds.merged_rows(main, [narrow, explore])
    assert len(rows) == 10 and [r["val_bpb"] for r in rows if r["model"] == "a" and r["seed"] == 0] == [1.9, 1.5]
    table = peers.ttq_seed_table(rows, "megabyte")
    assert "| b (lr 0.002) | 3 |" in table and "+0.100 (0.000), 3 seeds" in table
    assert "-0.100 (0.000), 3 seeds" in table  # a, paired with megabyte seed by seed
