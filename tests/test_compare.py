"""`learntok compare` on a tiny budget: variants, results files, resume."""
from __future__ import annotations

import json

import pytest

from learntok.compare import compare, format_table, parse_variant, variants_from_args
from learntok.config import ConfigError

TINY = ["model.d_model=32", "model.n_heads=2", "model.n_mid=1", "model.attn_window=16", "train.steps=2",
        "train.batch_size=4", "train.seq_len=64", "optim.warmup_steps=1", "log.eval_bytes=1024",
        "log.log_every=1", "log.eval_every=1", "log.segment_every=0", "data.source=kjv"]


def test_parse_variant():
    assert parse_variant("learned+gamma=1.0+w=1") == ("learned", ["model.boundary=learned", "objective.gamma=1.0",
                                                                  "model.policy_window=1"])
    assert parse_variant("uniform+model.target_rate=0.25")[1][-1] == "model.target_rate=0.25"
    with pytest.raises(ConfigError):
        parse_variant("learned+gamma")


def test_variants_from_args():
    v = variants_from_args("learned, uniform,learned+w=1", ablations=True)
    assert v[:3] == ["learned", "uniform", "learned+w=1"] and v.count("learned+w=1") == 1
    assert "learned+early=false" in v and "learned+baseline=none" in v


def test_bad_variant_fails_before_training(tmp_path):
    with pytest.raises(ConfigError, match="known: "):
        compare(["uniform", "wordpiece"], tmp_path, preset="tiny", overrides=TINY, progress=False)
    assert not (tmp_path / "uniform").exists()


def test_compare_tiny_and_resume(tmp_path):
    records = compare(["uniform", "learned+gamma=1.0"], tmp_path, preset="tiny", overrides=TINY,
                      eval_bytes=1024, progress=False)
    assert [r["variant"] for r in records] == ["uniform", "learned+gamma=1.0"]
    for name in ("results.md", "results.json", "curves.png"):
        assert (tmp_path / name).is_file()
    table = (tmp_path / "results.md").read_text()
    assert "| uniform |" in table and "| learned+gamma=1.0 |" in table
    saved = json.loads((tmp_path / "results.json").read_text())["results"]
    assert saved[0]["step_time_rel"] == pytest.approx(1.0)
    assert 0 < saved[1]["test_bpb"] < 10 and saved[1]["val_doc_se"] >= 0
    # a rerun skips finished variants: their done markers are read back, nothing retrains
    marker = tmp_path / "uniform" / "done.json"
    before = marker.stat().st_mtime_ns
    again = compare(["uniform", "learned+gamma=1.0"], tmp_path, preset="tiny", overrides=TINY, progress=False)
    assert marker.stat().st_mtime_ns == before
    assert again[0]["test_bpb"] == records[0]["test_bpb"]
    assert format_table(again).count("\n") == 4


def test_cli_compare(tmp_path):
    from learntok.cli import main
    rc = main(["compare", "--strategies", "fixed", "--steps", "1", "--out", str(tmp_path), "--eval-bytes", "512",
               *[o for o in TINY if not o.startswith("train.steps")]])
    assert rc == 0 and "| fixed |" in (tmp_path / "results.md").read_text()
    assert main(["compare", "--strategies", "nope", "--out", str(tmp_path / "x")]) == 2


def test_compare_runs_variants_in_parallel_one_thread_each(tmp_path):
    """--jobs 2: each variant trains in its own process with system.threads=1 (recorded in its
    config), and the table equals a sequential comparison's."""
    from learntok.cli import main
    from learntok.config import load_config
    args = ["compare", "--strategies", "fixed,uniform", "--steps", "1", "--eval-bytes", "512",
            *[o for o in TINY if not o.startswith("train.steps")]]
    assert main([*args, "--out", str(tmp_path / "par"), "--jobs", "2"]) == 0
    assert main([*args, "--out", str(tmp_path / "seq")]) == 0
    assert load_config(file=tmp_path / "par" / "fixed" / "config.toml").system.threads == 1
    par, seq = (json.loads((tmp_path / d / "results.json").read_text())["results"] for d in ("par", "seq"))
    assert [r["test_bpb"] for r in par] == pytest.approx([r["test_bpb"] for r in seq], rel=1e-6)


def test_threads_option_is_recorded_and_checked(tmp_path, capsys):
    from learntok.cli import main
    from learntok.config import load_config
    assert main(["train", "--out", str(tmp_path / "r"), "--threads", "1", *TINY]) == 0
    assert load_config(file=tmp_path / "r" / "config.toml").system.threads == 1
    assert main(["train", "--out", str(tmp_path / "s"), "--threads", "-1", *TINY]) == 2
    assert "--threads: -1 must be >= 0" in capsys.readouterr().err


def test_a_shared_strategy_option_goes_to_the_variants_that_have_it():
    from learntok.compare import check_strategy_options, variant_config
    shared = [*TINY, "strategy.temperature=0.5"]
    assert variant_config("nawrot", "tiny", shared).model.strategy["temperature"] == 0.5
    assert variant_config("learned", "tiny", shared).model.strategy == {}
    check_strategy_options(["learned", "nawrot"], shared)
    with pytest.raises(ConfigError, match="no variant's strategy has the option 'temperature'"):
        check_strategy_options(["learned", "uniform"], shared)
