"""`learntok diagnose`: gradient statistics, shared samples across variants, the command's files."""

import json

import pytest
import torch

from learntok.config import load_config
from learntok.data import ByteData
from learntok.diagnose import VARIANTS, diagnose, gradient_stats, markdown_table, policy_gradients, run_diagnose
from learntok.errors import ConfigError

from conftest import tiny_model


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


def test_run_diagnose_writes_table_json_png(tmp_path):
    from learntok.train import train

    corpus = tmp_path / "corpus.txt"
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
    train(cfg, tmp_path / "run", progress=False)
    rep = run_diagnose(tmp_path / "run", batches=1, samples=3, batch_size=4, seq_len=32)
    out = tmp_path / "run" / "diagnose"
    assert {p.name for p in out.iterdir()} == {"diagnose.md", "diagnose.json", "diagnose.png"}
    assert json.loads((out / "diagnose.json").read_text())["estimators"].keys() == VARIANTS.keys()
    assert (out / "diagnose.png").read_bytes()[:4] == b"\x89PNG" and rep["samples"] == 3
