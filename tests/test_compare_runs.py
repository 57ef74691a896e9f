"""Finished runs on the same windows: `compare --runs` (each run's bpb, its paired difference from
the reference, what differs between the runs) and the boundary swap (`eval --boundaries-from`)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from learntok.evaluation import evaluate as evaluate
from learntok.run.checkpoint import load_run
from learntok.compare.runs import compare_runs, format_runs
from learntok.run.config import load_config
from learntok.data import ByteData
from learntok.evaluation.evaluate import EvalOptions, EvalRequest, format_report, run_eval, window_nats
from learntok.train.loop import train

from conftest import assert_one_line_error, checksums, run_cli
from test_compare import TINY

EVAL_BYTES = 2048
RUNS = {  # name -> overrides on TINY (2 steps of learned at d_model 32 unless said)
    "learned": ["model.boundary=learned"],
    "uniform": ["model.boundary=uniform", "model.target_rate=0.3"],
    "whitespace": ["model.boundary=whitespace"],
    "nawrot": ["model.boundary=nawrot"],
    "longer": ["model.boundary=learned", "train.steps=3"],
    "narrow": ["model.boundary=learned", "model.d_model=16"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny trained runs, a couple of steps each (seconds)."""
    root = tmp_path_factory.mktemp("runs")
    for name, overrides in RUNS.items():
        train(load_config("tiny", None, [*TINY, *overrides]), root / name, progress=False)
    return {name: str(root / name) for name in RUNS}


@pytest.fixture(autouse=True)
def small_reference_bpe(monkeypatch):
    """`eval`'s reference BPE for boundary quality, fitted on a small sample (it is not under test)."""
    monkeypatch.setattr(evaluate, "FIT_BYTES", 100_000)


def own_eval(path: str, **kwargs) -> dict:
    return run_eval(EvalRequest(path, max_bytes=EVAL_BYTES, bpe_vocab=300, **kwargs))


# ---------------------------------------------------------------- compare --runs


def test_runs_side_by_side_match_eval_and_a_hand_computed_pairing(runs):
    report = compare_runs([runs["learned"], runs["uniform"]], EVAL_BYTES)
    ref, other = report["runs"]
    for row in (ref, other):
        for split in ("val", "test"):
            assert row[f"{split}_bpb"] == pytest.approx(own_eval(row["run"], split=split)["bpb"], abs=1e-12)
    assert ref["test_diff"] == 0.0 and ref["test_diff_se"] == 0.0
    # by hand from the per-window figures of both models on the reference's windows
    cfg = load_run(runs["learned"])[1]
    opts = EvalOptions(cfg.train.batch_size, cfg.train.seq_len, EVAL_BYTES, seed=cfg.train.seed)
    data = ByteData.from_config(cfg.data)
    a, b = (window_nats(load_run(runs[n])[0], data, "test", opts) for n in ("uniform", "learned"))
    per_window = (a["nats"] - b["nats"]) / (math.log(2) * a["bytes"])
    assert other["test_diff"] == pytest.approx((a["nats"].sum() - b["nats"].sum()) / (math.log(2) * a["bytes"].sum()))
    assert other["test_diff"] == pytest.approx(other["test_bpb"] - ref["test_bpb"], abs=1e-12)
    assert other["test_diff_se"] == pytest.approx(np.std(per_window, ddof=1) / math.sqrt(len(per_window)))
    assert report["windows"]["test_windows"] == len(per_window) and report["windows"]["seq_len"] == 64
    assert report["differences"] == []  # the strategy and its target rate (0.3: noted, below) differ
    assert [n.partition(":")[0] for n in report["notes"]] == ["note"] and "differ in rate" in report["notes"][0]


@pytest.mark.parametrize(
    "other, kind, words",
    [
        ("longer", "budget", "train.steps 2 / 3"),
        ("narrow", "size", "model.d_model 32 / 16"),
    ],
)
def test_runs_that_differ_in_budget_or_size_say_so(runs, other, kind, words):
    report = compare_runs([runs["learned"], runs[other]], EVAL_BYTES)
    assert {d["kind"] for d in report["differences"]} == {kind}
    notes = [n for n in report["notes"] if "differ in rate" not in n]  # a 2-step policy may be off 0.2
    assert len(notes) == 1 and notes[0].startswith(f"note: the runs differ in {kind}: ")
    assert words in notes[0]


def test_cli_compare_runs_table_and_json(runs, tmp_path, capsys):
    from learntok.cli import main

    out = tmp_path / "r.json"
    assert (
        main(
            ["compare", "--runs", runs["learned"], runs["longer"], "--eval-bytes", str(EVAL_BYTES), "--json", str(out)]
        )
        == 0
    )
    table = capsys.readouterr().out
    assert f"| {runs['learned']} | learned |" in table and "| reference |" in table
    assert "note: the runs differ in budget" in table
    saved = json.loads(out.read_text())
    assert [r["run"] for r in saved["runs"]] == [runs["learned"], runs["longer"]]
    assert saved["differences"][0]["key"] == "train.steps"


# ---------------------------------------------------------------- eval --boundaries-from


@pytest.mark.parametrize("name, samples", [("learned", 1), ("learned", 2), ("nawrot", 2), ("uniform", 2)])
def test_swap_with_itself_is_its_own_evaluation(runs, name, samples):
    """Same seed, same decisions: at every sample k, also for nawrot, which draws its relaxed
    sample even when the decisions are given."""
    own = own_eval(runs[name], samples=samples)
    swap = own_eval(runs[name], samples=samples, boundaries_from=runs[name])
    for key in ("bpb", "bpb_per_sample", "bpb_bound", "boundary_rate", "whitespace_rate"):
        assert swap[key] == own[key], key
    assert swap["own"]["bpb"] == own["bpb"] and swap["swap_minus_own"] == 0.0
    assert swap["boundaries_from"]["strategy"] == name


@pytest.mark.parametrize("name, rate", [("learned", 0.2), ("uniform", 0.3)])
def test_swap_uniform_is_at_the_runs_target_rate(runs, name, rate):
    r = own_eval(runs[name], boundaries_from="uniform")
    assert abs(r["boundary_rate"] - rate) < 0.01
    assert r["boundaries_from"] == {"source": "uniform", "strategy": "uniform", "target_rate": rate}
    if name == "uniform":  # the rule is its own strategy: the same draws
        assert r["swap_minus_own"] == 0.0 and r["bpb"] == r["own"]["bpb"]
    else:
        assert r["n_windows"] > 10 and r["swap_minus_own_se"] > 0


@pytest.mark.parametrize("model, source", [("learned", "whitespace"), ("uniform", "learned"), ("whitespace", "nawrot")])
def test_swapped_decisions_come_from_the_other_model(runs, model, source):
    """The decisions used are the source's own evaluation's (same windows, same seed), whatever
    model reads them; the own figures are the model's."""
    theirs, mine = own_eval(runs[source]), own_eval(runs[model])
    swap = own_eval(runs[model], boundaries_from=runs[source])
    for key in ("boundary_rate", "whitespace_rate", "word_space", "first_letter"):
        assert swap[key] == theirs[key], key
    assert swap["own"] == {
        "bpb": mine["bpb"],
        "rate": mine["boundary_rate"],
        "whitespace_rate": mine["whitespace_rate"],
    }
    assert swap["swap_minus_own"] == pytest.approx(swap["bpb"] - mine["bpb"], abs=1e-12)


# ---------------------------------------------------------------- rates: compare --runs --rate, eval's marks


def test_runs_at_unequal_rates_say_so(runs):
    """learned at 0.2 against uniform at 0.3: the rate difference is a note and the row is marked."""
    report = compare_runs([runs["learned"], runs["uniform"]], EVAL_BYTES)
    (note,) = [n for n in report["notes"] if "differ in rate" in n]
    assert f"{runs['uniform']}: not at an equal rate" in note and "targets 0.2 / 0.3" in note
    table = format_runs(report)
    (row,) = [line for line in table.splitlines() if line.startswith(f"| {runs['uniform']} ")]
    assert "(not at an equal rate)" in row


@pytest.mark.parametrize(
    "other, mode", [("uniform", None), ("uniform", "calibrated"), ("longer", "online"), ("longer", "calibrated")]
)
def test_runs_scored_at_a_set_rate(runs, other, mode):
    report = compare_runs([runs["learned"], runs[other]], EVAL_BYTES, rate=0.2, rate_mode=mode)
    assert report["windows"]["rate"] == 0.2
    for row in report["runs"]:
        assert row["target_rate"] == 0.2 and row["rate_setting"]["target"] == 0.2
    if other == "uniform":  # the rule at the set rate, not its own 0.3
        assert abs(report["runs"][1]["test_boundary_rate"] - 0.2) < 0.01
    assert "Every run at rate 0.2" in format_runs(report)


def test_cli_compare_runs_at_a_rate(runs, capsys):
    from learntok.cli import main

    args = ["compare", "--runs", runs["learned"], runs["uniform"], "--eval-bytes", str(EVAL_BYTES), "--rate", "0.2"]
    assert main(args) == 0
    assert "Every run at rate 0.2" in capsys.readouterr().out


@pytest.mark.parametrize(
    "other, mode, words",
    [
        ("bpe", None, "no inference-time rate knob"),  # its rate is its vocabulary
        ("uniform", "online", "no online rate control"),
    ],
)
def test_a_run_that_cannot_be_set_at_the_rate_is_refused_before_any_evaluation(runs, tmp_path, other, mode, words):
    path = tmp_path / other
    if other == "bpe":
        train(load_config("tiny", None, [*TINY, "model.boundary=bpe", "strategy.vocab_size=300"]), path, progress=False)
    else:
        path = runs[other]
    before = checksums(tmp_path)
    mode_args = ["--rate-mode", mode] if mode else []
    r = run_cli("compare", "--runs", runs["learned"], path, "--rate", "0.2", *mode_args, cwd=tmp_path)
    assert_one_line_error(r.returncode, r.stderr, words, before, checksums(tmp_path))


@pytest.mark.parametrize("reached, marked", [(0.2, False), (0.205, False), (0.25, True)])
def test_eval_says_when_the_rate_is_off_its_target(runs, reached, marked):
    report = own_eval(runs["learned"])
    assert report["target_rate"] == 0.2
    line = next(s for s in format_report({**report, "boundary_rate": reached}).splitlines() if s.startswith("bound"))
    assert ("not at an equal rate" in line) == marked


def test_a_model_folder_scores_at_its_training_length(runs, tmp_path):
    """save_pretrained records the window the weights were trained at, and eval defaults to it: the
    run folder and its model folder give the same bpb, and the header says the length used."""
    model, _ = load_run(runs["learned"])
    model.save_pretrained(tmp_path / "model")
    run = own_eval(runs["learned"], greedy=True)
    folder = own_eval(str(tmp_path / "model"), source="kjv", greedy=True, batch_size=4)  # the run's batch
    assert folder["seq_len"] == run["seq_len"] == 64 and folder["bpb"] == run["bpb"]
    for r in (run, folder):
        assert "windows of 64 bytes (its training length)" in format_report(r).splitlines()[0]
    given = own_eval(str(tmp_path / "model"), source="kjv", seq_len=128)
    assert "windows of 128 bytes (it was trained at 64)" in format_report(given).splitlines()[0]
    config = tmp_path / "model" / "config.json"
    saved = json.loads(config.read_text())
    config.write_text(json.dumps({k: v for k, v in saved.items() if k != "trained_seq_len"}))  # an older folder
    old = own_eval(str(tmp_path / "model"), source="kjv")
    assert old["seq_len"] == 1024 and "the folder does not record" in format_report(old).splitlines()[0]


@pytest.mark.parametrize("value", [1, "64", 2.5, True, -3])
def test_a_bad_recorded_training_length_is_refused(runs, tmp_path, value):
    from learntok.util.errors import CheckpointError

    model, _ = load_run(runs["learned"])
    model.save_pretrained(tmp_path / "model")
    config = tmp_path / "model" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "trained_seq_len": value}))
    with pytest.raises(CheckpointError, match="trained_seq_len"):
        load_run(tmp_path / "model")
