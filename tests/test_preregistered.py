"""The pre-registered study's analysis (docs/results/preregistered.py): the registered readings on
synthetic differences whose answer is known, and the whole scoring pass on a folder of finished
runs laid out as `compare` leaves them (no training: every figure is in the files)."""

import importlib.util
import json
import sys

import numpy as np
import pytest

from learntok.evaluation.statistics import holm

RESULTS = __import__("pathlib").Path(__file__).resolve().parents[1] / "docs" / "results"


@pytest.fixture(scope="module")
def study():
    sys.path.insert(0, str(RESULTS))
    try:
        spec = importlib.util.spec_from_file_location("preregistered", RESULTS / "preregistered.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(RESULTS))


def noise(n: int, sd: float, seed: int) -> list[float]:
    z = np.random.default_rng(seed).standard_normal(n)
    return list((z - z.mean()) / z.std(ddof=1) * sd)  # exactly mean 0, s.d. sd


@pytest.mark.parametrize(
    ("mean", "sd", "reads"),
    [
        (-0.03, 0.01, "lower"),  # clearly below, and not within the margin
        (+0.03, 0.01, "higher"),
        (0.0, 0.005, "equivalent within +-0.01"),  # tight around 0: inside the margin
        (-0.004, 0.002, "lower, and equivalent within +-0.01"),  # both: small and sure
        (0.0, 0.05, "not resolved"),  # a tie that no test resolves: never "level"
        (-0.008, 0.03, "not resolved"),
    ],
)
def test_each_rule_reads_as_its_registered_tests_say(study, mean, sd, reads):
    diffs = {rule: [mean + e for e in noise(30, sd, i)] for i, rule in enumerate(study.RULES)}
    out = study.readings(diffs, 0.05)
    assert {r["reads"] for r in out["rules"].values()} == {reads}


def test_the_primary_test_needs_learned_below_every_rule(study):
    below = {rule: [-0.03 + e for e in noise(30, 0.01, i)] for i, rule in enumerate(study.RULES)}
    assert study.readings(below, 0.05)["primary"]["learned_below_every_rule"]
    one_tie = dict(below, hnet=noise(30, 0.01, 9))
    out = study.readings(one_tie, 0.05)
    assert not out["primary"]["learned_below_every_rule"]
    assert out["primary"]["p"] == max(r["p_lower"] for r in out["rules"].values())  # the IUT: no correction
    assert [r["p_holm"] for r in out["rules"].values()] == holm([r["p"] for r in out["rules"].values()])


def fake_runs(out, seeds, arms, spec, learned_shift):
    """Finished runs as compare leaves them, and the learned arm's evaluations already cached."""
    rng = np.random.default_rng(0)
    for s in seeds:
        base = 2.3 + 0.01 * rng.standard_normal()
        for arm in arms:
            run = out / spec.get(arm, arm) / f"seed{s}"
            run.mkdir(parents=True)
            bpb = base + (learned_shift if arm == "learned" else 0.0) + 0.002 * rng.standard_normal()
            (run / "done.json").write_text(json.dumps({"test_bpb": bpb, "test_boundary_rate": 0.2}))
            rows = [{"kind": "train", "step": k, "time": 1000.0 + 60 * k} for k in range(3)]
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        scores = out / "scores"
        scores.mkdir(exist_ok=True)
        place = "word_space" if s % 3 else "first_letter"
        recall = 0.3 if s == 115 else 0.8  # seed 115 settles on no word place: recall 1.5x chance
        report = {"boundary_rate": 0.2, place: {"f1": 0.8, "recall": recall}, "space_word": {"f1": 0.1, "recall": 0.1}}
        (scores / f"learned-seed{s}-sampled.json").write_text(json.dumps({"bpb": bpb, **report}))
        (scores / f"learned-seed{s}-greedy.json").write_text(json.dumps({"bpb": bpb - 0.01, "boundary_rate": 0.205}))


def test_a_scoring_pass_over_finished_runs_writes_every_registered_figure(study, tmp_path, monkeypatch):
    seeds = list(range(100, 116))  # past the interim look, short of the final one
    fake_runs(tmp_path / "runs", seeds, study.ARMS, study.SPEC, learned_shift=-0.03)
    out_json = tmp_path / "study.json"
    argv = ["preregistered.py", "--no-train", "--out", str(tmp_path / "runs"), "--json", str(out_json)]
    monkeypatch.setattr(sys, "argv", argv)
    study.main()
    result = json.loads(out_json.read_text())
    assert result["seeds"] == seeds and set(result["looks"]) == {"interim", "so_far"}
    interim = result["looks"]["interim"]
    assert interim["seeds"] == seeds[:15] and interim["alpha"] == study.INTERIM_ALPHA
    assert interim["sampled"]["primary"]["learned_below_every_rule"]  # 0.03 below at s.d. 0.003
    assert interim["sampled_minus_greedy"]["diff"] == pytest.approx(0.01)
    assert {k: v["seeds"] for k, v in interim["places"].items()} == {"word_space": 10, "first_letter": 5}
    assert [d["between"] for d in interim["places_differences"]] == ["first_letter - word_space"]
    assert result["looks"]["so_far"]["note"].startswith("not a registered look")
    assert study.stopped_early(result)
    assert result["run_minutes"] == pytest.approx(2 * len(seeds) * len(study.ARMS))
    table = (tmp_path / "study-table.md").read_text()
    assert table.count("| learned - rule |") == 4
    assert table.count("| where learned settled |") == 2 and table.count("- learned - uniform:") == 2
    assert "- learned settled on word_space: 10 seeds" in table and table.count(": test rate ") == len(study.ARMS)
    unsettled = "- learned settled on no word place (recall under 2x chance): 1 seed (115: nearest word_space, F1 0.80, recall 1.50x chance)"
    assert unsettled in table and "| no word place | 1 |" in table
