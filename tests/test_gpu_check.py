"""scripts/gpu_check.sh end to end on the CPU at toy sizes (the same script a GPU machine runs),
and the pieces of its learned-against-uniform pair that decide what it claims: equal initial
weights and steps that fit the time budget."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import assert_one_line_error, checksums, tiny_model

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
BENCH = ROOT / "benchmarks" / "gpu_check.py"
ENV = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

_spec = importlib.util.spec_from_file_location("gpu_check", BENCH)
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=ENV, timeout=300)


@pytest.fixture(scope="module")
def toy_report(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("gpu_check")
    p = run("--device", "cpu", "--toy", "--seed", "3", "--out", str(out))
    assert p.returncode == 0, p.stderr
    return json.loads((out / "gpu_check.json").read_text()), (out / "gpu_check.md").read_text()


def test_report_has_every_part(toy_report):
    report, md = toy_report
    assert set(report) == {"meta", "tests", "pair", "throughput", "torchrun"}
    meta = report["meta"]
    assert meta["seeds"]["pair"] == 3 and "--seed 3" in meta["command"] and meta["toy"] is True
    assert len(meta["commit"]) == 40 or meta["commit"] == os.environ.get("COMMIT", "unknown")
    assert report["tests"]["rc"] == 0 and "passed" in report["tests"]["summary"]
    rows = report["throughput"]["rows"]
    assert {r["strategy"] for r in rows} == {"learned", "uniform"}
    assert all(r["bytes_per_s"] > 0 and r["peak_mem_gib"] > 0 and 0 <= r["mfu"] < 1 for r in rows)
    assert report["torchrun"]["rc"] == 0 and report["torchrun"]["last_metrics"]["step"] == 2
    for words in (
        "| preset | params | boundaries | compile |",
        "torchrun (1 process): exit 0",
        "| boundaries | params | steps |",
    ):
        assert words in md


def test_pair_arms_start_from_identical_weights(toy_report):
    report, md = toy_report
    pair = report["pair"]
    assert pair["preset"] == "40M" and pair["seed"] == 3 and pair["toy"] is True
    assert set(pair["arms"]) == {"learned", "uniform"}
    digests = {a["initial_backbone_sha256"] for a in pair["arms"].values()}
    assert pair["identical_init"] is True and len(digests) == 1
    assert pair["delta_val_bpb"] == pytest.approx(
        pair["arms"]["learned"]["val_bpb"] - pair["arms"]["uniform"]["val_bpb"]
    )
    for arm in pair["arms"].values():
        assert 1 <= arm["steps"] <= 3 and arm["train_seconds"] > 0 and arm["calibrated_step_s"] > 0
        assert 0 < arm["val_bpb"] < 9 and 0 < arm["val_boundary_rate"] < 1
    assert "Identical initial weights: yes" in md


def test_backbone_digest_sees_the_seed_not_the_strategy():
    """The identity check can fail: another seed changes the digest; the strategy's own
    parameters (the learned policy's, which uniform lacks) do not enter it."""
    digest = lambda boundary, seed: gpu_check.backbone_digest(tiny_model(boundary, seed=seed).state_dict())  # noqa: E731
    assert digest("learned", 0) == digest("uniform", 0)
    assert digest("learned", 0) != digest("learned", 1)
    state = tiny_model("uniform", seed=0).state_dict()
    state["embed.weight"] = state["embed.weight"].clone()
    state["embed.weight"][0, 0] += 1e-6
    assert gpu_check.backbone_digest(state) != digest("uniform", 0)


@pytest.mark.parametrize(
    "budget, step, cap, want",
    [(150, 0.2, 0, 750), (150, 0.2, 100, 100), (1, 5.0, 0, 1), (1, 5.0, 3, 1), (0.99, 0.1, 0, 9)],
)
def test_budget_steps(budget, step, cap, want):
    assert gpu_check.budget_steps(budget, step, cap) == want


def test_training_seconds_adds_each_window(tmp_path):
    rows = [
        {"kind": "train", "step": 1, "bytes_seen": 100, "bytes_per_s": 50.0},
        {"kind": "val", "step": 1, "bytes_seen": 100, "val_bpb": 8.0},
        {"kind": "train", "step": 2, "bytes_seen": 400, "bytes_per_s": 100.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert gpu_check.training_seconds(tmp_path) == pytest.approx(2.0 + 3.0)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--device", "tpu"], "--device 'tpu'"),
        (["--bogus"], "unknown argument '--bogus'"),
        (["--out"], "--out needs a folder"),
        (["--seed", "x1"], "--seed 'x1'"),
        (["--pair-seconds", "0"], "--pair-seconds '0'"),
        (["--pair-seconds", "900"], "--pair-seconds '900'"),
    ],
)
def test_gpu_check_bad_arguments(tmp_path, args, message):
    (tmp_path / "keep.txt").write_text("x")
    before = checksums(tmp_path)
    p = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=60)
    assert_one_line_error(p.returncode, p.stderr, message, before, checksums(tmp_path))


def test_pair_bad_source_is_one_line(tmp_path):
    before = checksums(tmp_path)
    cmd = [
        sys.executable,
        str(BENCH),
        "pair",
        "--toy",
        "--device",
        "cpu",
        "--source",
        "no-such-corpus",
        "--out",
        str(tmp_path),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=120)
    assert_one_line_error(p.returncode, p.stderr, "no-such-corpus", before, checksums(tmp_path))
