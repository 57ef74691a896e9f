"""Data parallelism: micro-batch plan, gradient weighting, the baseline's semantics, a 2-process
gloo run against one process, and torch.compile's recompiles (docs/scaling.md)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from learntok import AUNet, ModelConfig, ObjectiveConfig
from learntok.run.checkpoint import load_checkpoint
from learntok.run.config import load_config
from learntok.run.distributed import DistEnv, compile_model, micro_plan, slot_seed
from learntok.util.errors import ConfigError
from learntok.model.objective import loss
from learntok.train.loop import train
from learntok.train.step import Engine, train_step

OVERRIDES = [
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_mid=1",
    "system.device=cpu",
    "train.seq_len=48",
    "train.batch_size=8",
    "train.micro_batch_size=2",
    "train.steps=6",
    "optim.warmup_steps=2",
    "log.log_every=1",
    "log.eval_every=3",
    "log.eval_bytes=512",
    "checkpoint.every=2",
    "log.segment_every=0",
    "objective.rate_gain=0.05",
]


def test_micro_plan_checks_the_split():
    assert micro_plan(32, 0, 4) == (8, 1) and micro_plan(32, 2, 4) == (2, 4)
    with pytest.raises(ConfigError, match="batch_size 12 is not a multiple of world size 8"):
        micro_plan(12, 0, 8)
    with pytest.raises(ConfigError, match="micro_batch_size 3 does not divide the per-rank batch 8"):
        micro_plan(16, 3, 2)
    assert len({slot_seed(0, s, k) for s in range(50) for k in range(8)}) == 400


def _batch(B=4, T=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (B, T), generator=g)
    x[:, 0] = 256
    return x


@pytest.mark.parametrize("baseline", ["none", "mean"])
def test_accumulated_micro_batches_vs_one_batch(baseline):
    """Two micro-batches of 2 rows against one batch of 4 rows, same rows and boundaries
    (prescribed): the gradients agree to float precision with no batch baseline, and differ
    with `mean`, whose baseline is then a per-micro-batch mean (what data parallelism computes)."""
    torch.manual_seed(0)
    model, x = AUNet(ModelConfig(d_model=32, n_heads=2, n_mid=1)), _batch()
    with torch.no_grad():
        a = model(x).boundaries
    obj = ObjectiveConfig(batch_baseline=baseline, lambda_pi=1.0)

    def grads(rows):
        model.zero_grad()
        for r in rows:
            out = model(x[r], boundaries=a[r])
            total, _ = loss(out, x[r], obj)
            (total * len(r) / len(x)).backward()  # all rows full: byte weight = row share
        return torch.cat([p.grad.flatten() for p in model.strategy.parameters()])

    one, two = grads([list(range(4))]), grads([[0, 1], [2, 3]])
    if baseline == "none":
        torch.testing.assert_close(two, one, rtol=1e-5, atol=1e-7)
    else:
        assert not torch.allclose(two, one, rtol=1e-3, atol=1e-6)


def test_train_step_accumulation_matches_one_batch_without_policy_gradient():
    """train_step over 2 micro-batches == over 1 batch of the same rows and draws, lambda_pi = 0.
    SGD, so the parameters' change is the gradient (Adam's first step, g / |g|, would magnify
    float noise in near-zero gradients)."""
    cfg = load_config(overrides=[*OVERRIDES[:3], "objective.lambda_pi=0", "model.boundary=fixed"])
    x = _batch(4, 48)
    states = []
    for rows in ([x], [x[:2], x[2:]]):
        torch.manual_seed(0)
        model = AUNet(cfg.model)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        env = DistEnv(0, 1, 0, torch.device("cpu"))
        m = train_step(Engine(model, model, model, opt, env, None), rows, cfg.objective, cfg.optim, lr=1.0)
        states.append((float(m["loss"]), torch.cat([p.detach().flatten() for p in model.parameters()])))
    assert states[0][0] == pytest.approx(states[1][0], rel=1e-6)
    torch.testing.assert_close(states[1][1], states[0][1], rtol=1e-5, atol=1e-6)


LAUNCH = """
import sys
from learntok.run.config import load_config
from learntok.train.loop import train
train(load_config(overrides=sys.argv[2:]), sys.argv[1], until=4, progress=False)
"""


def _losses(run):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: (r["loss"], r["boundary_rate"]) for r in rows if "loss" in r}, {
        r["step"]: r["val_bpb"] for r in rows if "val_bpb" in r
    }


def test_two_gloo_processes_match_one_process_and_resume_on_one(tmp_path):
    """torchrun, 2 CPU ranks (gloo), global batch 8 in micro-batches of 2 (2 per rank), until
    step 4; then resumed to step 6 on one process. Against one process with the same global
    batch and micro-batch size: micro-batch k draws its rows and boundaries from (seed, step, k)
    on any world size, so the runs differ only by float summation order (the gradient all-reduce,
    the metrics mean): losses agree to 1e-5 relative, the learned policy's mean baseline included."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join(f"the quick brown fox {i} jumps over the lazy dog." for i in range(300)))
    overrides = [*OVERRIDES, f"data.source={corpus}"]
    (tmp_path / "launch.py").write_text(textwrap.dedent(LAUNCH))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd()}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(tmp_path / "launch.py"),
            str(tmp_path / "dist"),
            *overrides,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert load_checkpoint(tmp_path / "dist").step == 4
    train(load_config(overrides=overrides), tmp_path / "dist", resume=True, progress=False)  # one process
    train(load_config(overrides=overrides), tmp_path / "ref", progress=False)
    (dist, dist_val), (ref, ref_val) = _losses(tmp_path / "dist"), _losses(tmp_path / "ref")
    assert sorted(dist) == sorted(ref) == list(range(1, 7))
    for step in ref:
        assert dist[step][0] == pytest.approx(ref[step][0], rel=1e-5), step
        assert dist[step][1] == pytest.approx(ref[step][1], abs=1e-6), step
    assert ref_val.keys() <= dist_val.keys() and all(  # dist also evaluated at its stop (4)
        dist_val[s] == pytest.approx(ref_val[s], rel=1e-5) for s in ref_val
    )
    a, b = load_checkpoint(tmp_path / "dist").model_state, load_checkpoint(tmp_path / "ref").model_state
    assert all(torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-6) for k in a)


@pytest.mark.slow
def test_compile_keeps_recompiles_bounded():
    """torch.compile (eager backend: dynamo's guards and recompiles, no C++ build) over batches
    whose padded token count S changes from call to call: once a second S has been seen (the one
    recompile, which makes S symbolic), new values of S compile nothing more."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = AUNet(ModelConfig(d_model=32, n_heads=2, n_mid=1, token_pad_multiple=8))
    fwd = compile_model(model, backend="eager")
    sizes, graphs_when_dynamic = set(), None
    for seed in range(8):
        out = fwd(_batch(4, 256, seed))
        sizes.add(-(-int(out.n_tokens.max()) // 8) * 8)
        if len(sizes) == 2 and graphs_when_dynamic is None:
            graphs_when_dynamic = counters["stats"]["unique_graphs"]
    assert len(sizes) >= 3, sizes
    assert counters["stats"]["unique_graphs"] == graphs_when_dynamic, (sizes, dict(counters["stats"]))


def test_compare_under_torchrun_on_a_prepared_folder_matches_one_process(tmp_path):
    """`torchrun -m learntok compare` (2 CPU ranks): each variant trains data-parallel, the
    evaluation is shared between the ranks, rank 0 writes the table; the figures equal one
    process's up to float summation order."""
    from learntok.data.prepare import PrepareOptions, prepare

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"the quick brown fox {i} jumps over the lazy dog." for i in range(600)))
    prepare([str(corpus)], tmp_path / "prepared", PrepareOptions(piece_bytes=600), progress=False)
    args = [
        "compare",
        "--strategies",
        "learned,uniform",
        "--steps",
        "2",
        "--eval-bytes",
        "1024",
        f"data.source={tmp_path / 'prepared'}",
        *[o for o in OVERRIDES if not o.startswith("train.steps")],
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd()}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "learntok",
            *args,
            "--out",
            str(tmp_path / "dist"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    one = subprocess.run(
        [sys.executable, "-m", "learntok", *args, "--out", str(tmp_path / "one")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert one.returncode == 0, one.stderr[-3000:]
    dist, ref = (json.loads((tmp_path / d / "results.json").read_text())["results"] for d in ("dist", "one"))
    for a, b in zip(dist, ref):
        assert a["variant"] == b["variant"]
        assert a["test_bpb"] == pytest.approx(b["test_bpb"], rel=1e-4) and a["test_bytes"] == b["test_bytes"]
