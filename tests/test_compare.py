"""`learntok compare` on a tiny budget: variants, results files, resume."""

from __future__ import annotations

import json

import pytest

from learntok.compare.runner import compare, parse_variant, variants_from_args
from learntok.compare.report import format_table
from learntok.util.errors import ConfigError

TINY = [
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_mid=1",
    "model.attn_window=16",
    "train.steps=2",
    "train.batch_size=4",
    "train.seq_len=64",
    "optim.warmup_steps=1",
    "log.eval_bytes=1024",
    "log.log_every=1",
    "log.eval_every=1",
    "log.segment_every=0",
    "data.source=kjv",
]


def test_parse_variant():
    assert parse_variant("learned+gamma=1.0+w=1") == (
        "learned",
        ["model.boundary=learned", "objective.gamma=1.0", "strategy.window=1"],
    )
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
    records = compare(
        ["uniform", "learned+gamma=1.0"], tmp_path, preset="tiny", overrides=TINY, eval_bytes=1024, progress=False
    )
    assert [r["variant"] for r in records] == ["uniform", "learned+gamma=1.0"]
    for name in ("results.md", "results.json", "curves.png"):
        assert (tmp_path / name).is_file()
    table = (tmp_path / "results.md").read_text()
    assert "| uniform |" in table and "| learned+gamma=1.0 (tiny recipe, objective.gamma 1) |" in table
    saved = json.loads((tmp_path / "results.json").read_text())["results"]
    assert saved[0]["step_time_rel"] == pytest.approx(1.0)
    assert 0 < saved[1]["test_bpb"] < 10 and saved[1]["val_doc_se"] >= 0
    # a rerun skips finished variants: their done markers are read back, nothing retrains
    marker = tmp_path / "uniform" / "done.json"
    before = marker.stat().st_mtime_ns
    again = compare(
        ["uniform", "learned+gamma=1.0"], tmp_path, preset="tiny", overrides=TINY, eval_bytes=1024, progress=False
    )
    assert marker.stat().st_mtime_ns == before
    assert again[0]["test_bpb"] == records[0]["test_bpb"]
    assert format_table(again).count("\n") == 4


def test_cli_compare(tmp_path):
    from learntok.cli import main

    rc = main(
        [
            "compare",
            "--strategies",
            "fixed",
            "--steps",
            "1",
            "--out",
            str(tmp_path),
            "--eval-bytes",
            "512",
            *[o for o in TINY if not o.startswith("train.steps")],
        ]
    )
    assert rc == 0 and "| fixed |" in (tmp_path / "results.md").read_text()
    assert main(["compare", "--strategies", "nope", "--out", str(tmp_path / "x")]) == 2


def test_compare_runs_variants_in_parallel_one_thread_each(tmp_path):
    """--jobs 2: each variant trains in its own process with system.threads=1 (recorded in its
    config), and the table equals a sequential comparison's."""
    from learntok.cli import main
    from learntok.run.config import load_config

    args = [
        "compare",
        "--strategies",
        "fixed,uniform",
        "--steps",
        "1",
        "--eval-bytes",
        "512",
        *[o for o in TINY if not o.startswith("train.steps")],
    ]
    assert main([*args, "--out", str(tmp_path / "par"), "--jobs", "2"]) == 0
    assert main([*args, "--out", str(tmp_path / "seq")]) == 0
    assert load_config(file=tmp_path / "par" / "fixed" / "config.toml").system.threads == 1
    par, seq = (json.loads((tmp_path / d / "results.json").read_text())["results"] for d in ("par", "seq"))
    assert [r["test_bpb"] for r in par] == pytest.approx([r["test_bpb"] for r in seq], rel=1e-6)


def test_threads_option_is_recorded_and_checked(tmp_path, capsys):
    from learntok.cli import main
    from learntok.run.config import load_config

    assert main(["train", "--out", str(tmp_path / "r"), "--threads", "1", *TINY]) == 0
    assert load_config(file=tmp_path / "r" / "config.toml").system.threads == 1
    assert main(["train", "--out", str(tmp_path / "s"), "--threads", "-1", *TINY]) == 2
    assert "--threads: -1 must be in [0, 1024]" in capsys.readouterr().err


def test_a_shared_strategy_option_goes_to_the_variants_that_have_it():
    from learntok.compare.runner import check_strategy_options, variant_config

    shared = [*TINY, "strategy.temperature=0.5"]
    assert variant_config("nawrot", "tiny", shared).model.strategy["temperature"] == 0.5
    assert "temperature" not in variant_config("learned", "tiny", shared).model.strategy
    check_strategy_options(["learned", "nawrot"], shared)
    with pytest.raises(ConfigError, match="no variant's strategy has the option 'temperature'"):
        check_strategy_options(["learned", "uniform"], shared)


def test_parse_seeds():
    from learntok.compare.runner import parse_seeds

    assert parse_seeds("3") == [0, 1, 2] and parse_seeds("0,4,5") == [0, 4, 5] and parse_seeds("7,") == [7]
    for bad in ("", "x", "0", "1,1", "-1,2", "2.5", "1,,2", ",1", ",", "1, ,2"):
        with pytest.raises(ConfigError):
            parse_seeds(bad)


def test_seed_summary_pairs_by_seed():
    from learntok.compare.report import seed_summary

    def rec(v, s, bpb):
        return {
            "variant": v,
            "seed": s,
            "test_bpb": bpb,
            "val_bpb": bpb,
            "test_boundary_rate": 0.2,
            "test_whitespace_rate": 0.1,
        }

    # learned is 0.03 below uniform at every seed although both move by 0.2 between seeds: the paired
    # difference has no spread, the absolute figures do
    records = [
        rec("learned", 0, 2.00),
        rec("learned", 1, 2.20),
        rec("learned", 2, 2.40),
        rec("uniform", 0, 2.03),
        rec("uniform", 1, 2.23),
        rec("uniform", 2, 2.43),
        rec("fixed", 0, 2.00),
        rec("fixed", 1, 2.33),
        rec("fixed", 2, 2.43),
    ]
    rows = {r["variant"]: r for r in seed_summary(records, ["learned", "uniform", "fixed"])}
    assert rows["learned"]["reference"] == "uniform" and "diff" not in rows["uniform"]
    assert rows["learned"]["diff"] == pytest.approx(-0.03) and rows["learned"]["diff_se"] == pytest.approx(0, abs=1e-9)
    assert not rows["learned"]["tie"] and rows["fixed"]["tie"]  # fixed: -0.03, +0.10, 0.00
    assert rows["learned"]["test_bpb_se"] == pytest.approx(0.2 / 3**0.5)


def test_compare_seeds_layout_and_resume(tmp_path):
    from learntok.cli import main

    args = [
        "compare",
        "--strategies",
        "uniform,frozen",
        "--seeds",
        "2",
        "--steps",
        "1",
        "--eval-bytes",
        "512",
        "--out",
        str(tmp_path),
        *[o for o in TINY if not o.startswith("train.steps")],
    ]
    assert main(args) == 0
    for v in ("uniform", "frozen"):
        for k in (0, 1):
            assert (tmp_path / v / f"seed{k}" / "done.json").is_file()
    saved = json.loads((tmp_path / "results.json").read_text())
    assert {(r["variant"], r["seed"]) for r in saved["results"]} == {
        (v, k) for v in ("uniform", "frozen") for k in (0, 1)
    }
    frozen = next(r for r in saved["over_seeds"] if r["variant"] == "frozen")
    assert frozen["reference"] == "uniform" and frozen["diff_n"] == 2
    assert "## Over seeds" in (tmp_path / "results.md").read_text()
    marker = tmp_path / "frozen" / "seed1" / "done.json"
    before = marker.stat().st_mtime_ns
    assert main(args) == 0 and marker.stat().st_mtime_ns == before  # finished runs are not retrained
    assert main([*args, "train.seed=3"]) == 2  # --seeds owns train.seed


def test_paper_figures_only_beside_comparable_runs():
    from learntok.compare.report import paper_figure
    from learntok.run.config import load_config

    small = load_config("tiny", None, [])
    assert paper_figure("learned", "tiny", small) is None
    assert paper_figure("learned", "147M", load_config("147M", None, [])) is None  # Shakespeare by default
    fineweb = load_config("147M", None, ["data.source=/data/fineweb-edu/train"])
    assert paper_figure("learned", "147M", fineweb).startswith("1.297")
    assert paper_figure("learned@0.2", "147M", fineweb).startswith("1.297")
