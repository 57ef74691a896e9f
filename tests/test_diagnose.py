"""`learntok diagnose`: gradient statistics, shared samples across variants, the command's files."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from learntok.run.config import load_config
from learntok.data import ByteData
from learntok.evaluation.diagnose import (
    VARIANTS,
    diagnose,
    gradient_stats,
    markdown_table,
    policy_gradients,
    run_diagnose,
)
from learntok.util.errors import ConfigError

from conftest import tiny_model

ROOT = Path(__file__).resolve().parents[1]


def batches(n=2):
    data = ByteData({"train": [b"the cat sat on the mat, the dog ate a bone. " * 40]})
    return [data.train_batch(i, 6, 48, seed=0) for i in range(n)]


def test_gradient_stats_formula():
    g = torch.tensor([[1.0, 0.0], [3.0, 2.0], [2.0, 4.0]], dtype=torch.float64)  # K=3, P=2
    s = gradient_stats(g)
    var = float(g.var(0).sum())  # 1 + 4
    assert s["variance"] == pytest.approx(5.0) and var == pytest.approx(5.0)
    assert s["signal"] == pytest.approx(2.0**2 + 2.0**2 - 5.0 / 3)
    assert s["snr"] == pytest.approx(s["signal"] / 5.0)
    with pytest.raises(ConfigError):
        gradient_stats(g[:1])


def test_variants_share_samples_and_baselines_cut_variance():
    model = tiny_model().eval()
    x = batches(1)[0]
    torch.manual_seed(1)
    g = policy_gradients(model, x, samples=6)
    assert set(g) == set(VARIANTS) and all(v.shape == g["raw (-CE)"].shape for v in g.values())
    # same samples: with one fixed sample the raw gradient equals a fresh computation under the same seed
    torch.manual_seed(1)
    again = policy_gradients(model, x, samples=6, variants={"raw (-CE)": VARIANTS["raw (-CE)"]})
    assert torch.allclose(again["raw (-CE)"], g["raw (-CE)"])
    raw, loo = gradient_stats(g["raw (-CE)"]), gradient_stats(g["+ batch loo"])
    assert loo["variance"] < raw["variance"]


def test_diagnose_table_and_no_policy():
    table = diagnose(tiny_model().eval(), batches(), samples=4, seed=0)
    assert table["raw (-CE)"]["variance_vs_raw"] == pytest.approx(1.0)
    assert table["+ batch loo"]["cos_to_loo"] == pytest.approx(1.0)
    assert table == diagnose(tiny_model().eval(), batches(), samples=4, seed=0)  # deterministic
    md = markdown_table(table)
    assert md.count("\n") == len(VARIANTS) + 1 and "all (loo)" in md
    with pytest.raises(ConfigError, match="no score-function policy"):
        diagnose(tiny_model("uniform").eval(), batches(1), samples=2)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run of two steps of a tiny learned model, trained once for this file."""
    from learntok.train.loop import train

    tmp = tmp_path_factory.mktemp("diagnose")
    corpus = tmp / "corpus.txt"
    corpus.write_text(" ".join(f"the quick brown fox {i} jumps over the lazy dog." for i in range(200)))
    cfg = load_config(
        overrides=[
            "model.d_model=32",
            "model.n_heads=2",
            "model.n_mid=1",
            f"data.source={corpus}",
            "system.device=cpu",
            "train.seq_len=48",
            "train.batch_size=4",
            "train.steps=2",
            "optim.warmup_steps=1",
            "log.eval_every=0",
            "log.segment_every=0",
        ]
    )
    train(cfg, tmp / "run", progress=False)
    return tmp / "run"


def test_run_diagnose_writes_table_json_png(run, tmp_path):
    rep = run_diagnose(run, batches=1, samples=3, batch_size=4, seq_len=32, out=tmp_path / "diagnose")
    out = tmp_path / "diagnose"
    assert {p.name for p in out.iterdir()} == {"diagnose.md", "diagnose.json", "diagnose.png"}
    assert json.loads((out / "diagnose.json").read_text())["estimators"].keys() == VARIANTS.keys()
    assert (out / "diagnose.png").read_bytes()[:4] == b"\x89PNG" and rep["samples"] == 3


def test_diagnose_shows_progress_as_the_other_commands(run, tmp_path):
    # the same Progress lines as train and eval (learntok.util.progress), timestamped when stderr is a log
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TQDM_DELAY": "0", "TQDM_MININTERVAL": "0"}
    argv = ["diagnose", run, "--batches", "2", "--samples", "2", "--batch-size", "2", "--seq-len", "32"]
    r = subprocess.run(
        [sys.executable, "-m", "learntok", *map(str, argv), "--out", str(tmp_path / "d"), "--threads", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d diagnose: 100% 2/2 batch \[", r.stderr, re.M), r.stderr
