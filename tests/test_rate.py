"""Compression as a dial (docs/rate.md): every strategy at a requested rate on held-out text, the
inference-time offset (monotone, calibrated), the whitespace rule's knob, and `--rate`."""

from __future__ import annotations

import re
import numpy as np
import pytest
import torch
from torch import nn

from learntok import AUNet
from learntok.boundaries.common import bresenham, whitespace_boundaries
from learntok.boundaries.rate import bisect_rate
from learntok.boundaries.whitespace import whitespace_at_rate, whitespace_step
from learntok.compare.runner import parse_variant, variants_from_args
from learntok.data import encode
from learntok.util.errors import ConfigError
from learntok.run.rate import calibrate, measured_rate, set_rate, strategy_inputs, text_batches
from tests.test_strategies import TRAIN_TEXT, shakespeare

from conftest import tiny_config

VAL_TEXT = shakespeare(24_000, skip=100_000)  # calibration text, never the test text
TEST_TEXT = shakespeare(24_000, skip=150_000)  # held-out text the reached rate is measured on


def tiny(boundary: str, w: int = 1, rate: float = 0.2) -> AUNet:
    torch.manual_seed(0)
    cfg = tiny_config(boundary, window=w, target_rate=rate)
    model = AUNet(cfg)
    if boundary == "entropy":  # spread the early head's entropies, as training does
        nn.init.normal_(model.early_head.linear.weight, std=0.3)
    model.strategy.fit([TRAIN_TEXT])
    return model.eval()


def test_bresenham_counts_and_strides():
    n = torch.arange(1, 1001)
    for rate in (0.1, 0.2, 1 / 3, 0.33, 0.37, 0.5):
        on = bresenham(n, rate)
        assert int(on.sum()) == int(rate * 1000 + 1e-9)  # floor(rate m) in the first m
        strides = torch.diff(n[on])
        assert set(strides.tolist()) <= {int(1 / rate), int(1 / rate) + 1}  # evenly spread
    assert torch.equal(bresenham(n, 0.2), n % 5 == 0)  # rate 1/k: every k-th


def test_bisect_rate_brackets_and_ends():
    rate_of = lambda z: min(max(z, 0.0), 1.0)  # noqa: E731
    z, r = bisect_rate(rate_of, 0.3, -1.0, 2.0)
    assert abs(r - 0.3) < 1e-6 and abs(z - 0.3) < 1e-6
    assert bisect_rate(rate_of, 0.3, 0.5, 2.0) == (0.5, 0.5)  # out of reach: the nearest end


@pytest.mark.parametrize("theta", [0.0, 0.05, 0.21, 0.6, 1.0, -0.2, -0.45, -0.7, -0.93])
def test_whitespace_knob_step_matches_forward(theta):
    x = encode(shakespeare(300) + " a bb ccc dddddddddddddd, e-f!".encode()).unsqueeze(0)
    a = whitespace_at_rate(x, theta)
    if theta == 0:
        assert torch.equal(a, whitespace_boundaries(x))
    prev, last, edges, steps = (
        torch.tensor([256]),
        torch.zeros(1, dtype=torch.long),
        torch.zeros(1, dtype=torch.long),
        [],
    )
    for t in range(x.size(1)):
        d, last, edges = whitespace_step(prev, x[:, t], t, last, edges, theta)
        prev = x[:, t]
        steps.append(d)
    assert torch.equal(torch.stack(steps, 1), a)


def test_whitespace_knob_adds_above_and_drops_below_the_rule():
    x = encode(TRAIN_TEXT[:20_000]).unsqueeze(0)
    rule = whitespace_boundaries(x).bool()
    counts = [int(whitespace_at_rate(x, th).sum()) for th in torch.linspace(-0.99, 1.0, 41).tolist()]
    assert counts == sorted(counts) and counts[0] < counts[-1] == x.size(1)  # nondecreasing, up to every byte
    above, below = whitespace_at_rate(x, 0.2).bool(), whitespace_at_rate(x, -0.3).bool()
    assert bool((above | rule).eq(above).all()) and bool((below & rule).eq(below).all())  # a superset; a subset


@pytest.mark.parametrize("boundary", ["uniform", "fixed", "whitespace", "learned", "entropy", "hnet", "nawrot"])
@pytest.mark.parametrize("target", [0.1, 0.3])
def test_every_strategy_reaches_the_target_on_held_out_text(boundary, target):
    """Calibrate on one text, then measure on another: within 0.005 of the target. A rule on the
    text alone (whitespace) moves with the text: its rate differs between the two texts by as
    much as their natural whitespace rates do (0.008 here), which the tolerance adds."""
    model = tiny(boundary, rate=target)
    setting = set_rate(model, target, VAL_TEXT)
    assert setting.note == "" and abs(setting.reached - target) <= 0.005
    reached, n = measured_rate(model, text_batches(TEST_TEXT, 256))
    shift = 0.0
    if boundary == "whitespace":
        natural = [float(whitespace_boundaries(encode(t).unsqueeze(0))[0, 1:].mean()) for t in (VAL_TEXT, TEST_TEXT)]
        shift = abs(natural[0] - natural[1])
    assert n > 20_000 and abs(reached - target) <= 0.005 + shift, (boundary, target, reached)


@pytest.mark.parametrize("greedy", [False, True])
@pytest.mark.parametrize("mode", ["calibrated", "online"])
def test_set_rate_calibrates_for_the_decision_rule_in_use(greedy, mode):
    """Calibrated for greedy cuts, greedy cuts reach the target on other text (sampled likewise);
    at that fixed offset the other rule does not, which is why the rule is part of the setting.
    Online control from an offset fitted on text only follows drift, so it keeps the fitted
    rule's start; with no text to fit on, its strong controller holds the rate for either rule
    from either start (its settling step is the calibrated rule's: 0.01)."""
    model = tiny("learned", w=8, rate=0.25)
    model.strategy.proj.weight.data.mul_(100)  # probabilities spread around 0.5
    setting = set_rate(model, 0.25, VAL_TEXT, greedy=greedy, mode=mode)
    assert setting.greedy == greedy and ("greedy" if greedy else "sampled") in setting.describe()
    test = text_batches(TEST_TEXT, 256)
    assert abs(measured_rate(model, test, greedy=greedy)[0] - 0.25) <= 0.005
    other = abs(measured_rate(model, test, greedy=not greedy)[0] - 0.25)
    assert other > 0.02, other
    if mode == "online":
        set_rate(model, 0.25, None, greedy=greedy, mode=mode)  # no text: from the offset the model has
        assert abs(measured_rate(model, test, greedy=not greedy)[0] - 0.25) <= 0.01


def test_learned_offset_moves_the_rate_monotonically_and_calibrates():
    model = tiny("learned", w=8)
    batches = text_batches(VAL_TEXT[:8000], 256)
    rates = []
    for offset in (-6.0, -3.0, -1.0, 0.0, 1.0, 3.0, 6.0):
        model.strategy.rate_offset.fill_(offset)
        rates.append(measured_rate(model, batches)[0])
    assert rates == sorted(rates) and rates[0] < 0.05 and rates[-1] > 0.9
    for target in (0.12, 0.25, 0.4):
        offset, reached, _ = calibrate(model, batches, target)
        assert abs(reached - target) <= 0.01
        # the knob is left at the calibrated offset
        assert model.strategy.rate_offset.item() == pytest.approx(offset, abs=1e-6)
        # the full model decides as the strategy alone did
        assert abs(measured_rate(model, batches)[0] - reached) < 1e-9


def test_strategy_inputs_are_what_the_forward_hands_the_strategy():
    model = tiny("learned")
    x = text_batches(VAL_TEXT[:2000], 128)[0]
    ((h, x2, early),) = strategy_inputs(model, [x])
    with torch.no_grad():
        out = model(x)
    assert torch.equal(x2, x) and torch.equal(early, out.early_logits) and h.shape == (*x.shape, 32)


def test_set_rate_errors():
    with pytest.raises(ConfigError, match="'bpe-causal' has no inference-time rate knob"):
        set_rate(tiny("bpe-causal"), 0.2, VAL_TEXT)
    with pytest.raises(ConfigError, match="must be in"):
        set_rate(tiny("uniform"), 1.0)
    with pytest.raises(ConfigError, match="held-out text"):
        set_rate(tiny("learned"), 0.2, mode="calibrated")
    with pytest.raises(ConfigError, match="rate mode 'fast'"):
        set_rate(tiny("learned"), 0.2, VAL_TEXT, mode="fast")
    with pytest.raises(ConfigError, match="'whitespace' has no online rate control"):
        set_rate(tiny("whitespace"), 0.2, VAL_TEXT, mode="online")
    start = set_rate(tiny("learned"), 0.2)  # online needs no text: the model's own offset
    assert start.knob == "online" and start.n_bytes == 0 and "no held-out text read" in start.describe()
    far = set_rate(tiny("fixed"), 0.25)  # a rule needs no text
    assert far.knob == "rule" and far.reached == 0.25


@pytest.mark.parametrize("target", [0.08, 0.3, 0.6])
def test_whitespace_fit_reaches_the_target_on_its_sample(target):
    model = tiny("whitespace", rate=target)
    x = encode(TRAIN_TEXT[:1023]).unsqueeze(0)
    fitted = model.strategy.fit([TRAIN_TEXT])
    assert abs(fitted["whitespace_fit_rate"] - target) <= 0.005
    assert torch.equal(model(x).boundaries, whitespace_at_rate(x, fitted["whitespace_theta"]))


def test_whitespace_checkpoints_from_before_the_knob_load_as_the_plain_rule():
    model = tiny("whitespace", rate=0.3)
    assert model.strategy.rate_offset.item() > 0
    state = {k: v for k, v in model.state_dict().items() if not k.endswith("rate_offset")}
    model.load_state_dict(state)
    assert model.strategy.rate_offset.item() == 0.0


def test_compare_variants_at_rates():
    assert parse_variant("learned+w=1@0.2")[1] == [
        "model.boundary=learned",
        "strategy.window=1",
        "model.target_rate=0.2",
    ]
    assert variants_from_args("learned,uniform", False, "0.1, 0.33") == [
        "learned@0.1",
        "learned@0.33",
        "uniform@0.1",
        "uniform@0.33",
    ]
    with pytest.raises(ConfigError, match="must be in"):
        variants_from_args("learned", False, "0.1,1.2")
    with pytest.raises(ConfigError, match="not a number"):
        parse_variant("learned@fast")


# ---------------------------------------------------------------- frontiers


def test_compare_at_rates_writes_the_frontier_and_the_sweep(tmp_path):
    import json

    from learntok.compare.runner import compare
    from learntok.evaluation.evaluate import window_nats
    from learntok.run.checkpoint import load_run
    from learntok.data import ByteData
    from learntok.evaluation.evaluate import EvalOptions, evaluate_bpb
    from tests.test_compare import TINY

    variants = variants_from_args("learned,uniform", False, "0.2,0.33")
    compare(variants, tmp_path, preset="tiny", overrides=TINY, eval_bytes=2048, progress=False, sweep="learned@0.2")
    front = json.loads((tmp_path / "frontier.json").read_text())
    assert [r["variant"] for r in front["frontier"]] == variants
    uni = {r["target_rate"]: r for r in front["frontier"] if r["family"] == "uniform"}
    assert all(abs(r["rate"] - r["target_rate"]) < 0.01 and r["vs_uniform"] == 0.0 for r in uni.values())
    flops = [r["flops_per_byte"] for r in front["frontier"] if r["family"] == "learned"]
    assert flops[0] < flops[1]  # more tokens per byte cost more
    sweep = {r["target_rate"]: r for r in front["sweep"]}
    assert set(sweep) == {0.2, 0.33} and abs(sweep[0.33]["rate"] - 0.33) < 0.05
    for name in ("frontier.md", "frontier.png", "flops.png"):
        assert (tmp_path / name).is_file()
    # the per-window figures add up to the one evaluation's bpb
    model, cfg = load_run(tmp_path / "learned@0.33")
    data, tc = ByteData.from_config(cfg.data), cfg.train
    opts = EvalOptions(tc.batch_size, tc.seq_len, 2048, seed=tc.seed)
    w = window_nats(model, data, "test", opts)
    r = evaluate_bpb(model, data, "test", opts)
    assert abs(w["nats"].sum() / (0.6931471805599453 * w["bytes"].sum()) - r["bpb"]) < 1e-9
    assert abs(w["rate"] - r["boundary_rate"]) < 1e-9


def test_the_frontier_over_seeds_pairs_each_run_with_its_own_config(tmp_path):
    """With --seeds, every run of every variant is on the frontier at its own target rate, and
    uniform is its own reference (difference 0) at each rate."""
    import json

    from learntok.compare.runner import compare
    from tests.test_compare import TINY

    variants = variants_from_args("learned,uniform", False, "0.2,0.33")
    compare(variants, tmp_path, preset="tiny", overrides=TINY, eval_bytes=1024, progress=False, seeds=[0, 1])
    rows = json.loads((tmp_path / "frontier.json").read_text())["frontier"]
    assert [r["variant"] for r in rows] == variants and all(r["seeds"] == 2 for r in rows)
    for r in rows:
        assert r["target_rate"] == float(r["variant"].partition("@")[2])
        if r["family"] == "uniform":
            assert r["vs_uniform"] == 0.0 and abs(r["rate"] - r["target_rate"]) < 0.01


@pytest.mark.parametrize(
    "diffs, tie, word",
    [
        ([-0.03, -0.031, -0.029], False, "lower"),  # the same gain at every seed
        ([0.02, 0.021, 0.019], False, "higher"),
        ([-0.03, 0.01, -0.02], True, "tie"),  # the interval (+- 4.30 s.e. at 3 seeds) spans 0
        ([-0.05], True, "tie"),  # one seed says nothing of training noise
    ],
)
def test_frontier_rows_over_seeds_read_as_compare_reads_them(diffs, tie, word):
    """The frontier over seeds marks a tie exactly where compare's table over seeds does (one
    function, learntok.evaluation.statistics.over_seeds), and its test bpb carries the s.e. over seeds."""
    from learntok.compare.report import seed_summary
    from learntok.compare.frontier import frontier_markdown, seed_rows

    base = {"family": "learned", "target_rate": 0.2, "flops_per_byte": 1.0}
    rows = [
        {**base, "variant": "learned@0.2", "seed": k, "rate": 0.2 + k / 100, "test_bpb": 2.0 + k / 10, "vs_uniform": d}
        for k, d in enumerate(diffs)
    ]
    (row,) = seed_rows(rows)
    assert row["seeds"] == len(diffs) and row["tie"] is tie
    assert row["vs_uniform"] == pytest.approx(np.mean(diffs))
    assert row["test_bpb"] == pytest.approx(np.mean([r["test_bpb"] for r in rows]))
    if len(diffs) > 1:
        assert row["test_bpb_se"] == pytest.approx(np.std([r["test_bpb"] for r in rows], ddof=1) / len(diffs) ** 0.5)
    records = [
        {"variant": v, "seed": k, "test_bpb": b, "val_bpb": b, "test_boundary_rate": 0.2, "test_whitespace_rate": 0.1}
        for k, d in enumerate(diffs)
        for v, b in (("learned@0.2", 2.0 + d), ("uniform@0.2", 2.0))
    ]
    (learned, _) = seed_summary(records, ["learned@0.2", "uniform@0.2"])
    assert learned["tie"] is row["tie"] and learned["diff"] == pytest.approx(row["vs_uniform"])
    assert f": {word} |" in frontier_markdown([row], [], None)


# ---------------------------------------------------------------- the commands


def test_rate_options_of_eval_segment_and_sample(tmp_path, capsys):
    import json

    from learntok.cli import main
    from tests.test_compare import TINY

    run = tmp_path / "run"
    assert main(["train", "--out", str(run), *TINY]) == 0
    capsys.readouterr()
    assert main(["eval", str(run), "--rate", "0.3", "--max-bytes", "4096", "--json", str(tmp_path / "e.json")]) == 0
    report = json.loads((tmp_path / "e.json").read_text())
    assert report["rate_setting"]["target"] == 0.3 and abs(report["rate_setting"]["reached"] - 0.3) <= 0.01
    assert report["rate_setting"]["knob"] == "online"  # the learned policy's default
    assert abs(report["boundary_rate"] - 0.3) <= 0.01
    assert "rate: target 0.300" in capsys.readouterr().out
    assert (
        main(
            [
                "eval",
                str(run),
                "--rate",
                "0.3",
                "--rate-mode",
                "calibrated",
                "--max-bytes",
                "4096",
                "--json",
                str(tmp_path / "e.json"),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "e.json").read_text())["rate_setting"]["knob"] == "offset"
    assert "learned offset" in capsys.readouterr().out
    text = "A text to cut into tokens, at a chosen rate of boundaries per byte."
    assert (
        main(
            [
                "segment",
                str(run),
                text,
                "--rate",
                "0.5",
                "--greedy",
                "--html",
                str(tmp_path / "p.html"),
                "--json",
                str(tmp_path / "s.json"),
            ]
        )
        == 0
    )
    assert "rate: target 0.500" in capsys.readouterr().err
    assert 'id="offset"' in (tmp_path / "p.html").read_text()
    assert main(["sample", str(run), "--prompt", "AB", "--max-bytes", "8", "--seed", "1", "--rate", "0.1"]) == 0
    assert "rate: target 0.100" in capsys.readouterr().err
    assert (
        main(["sample", str(run), "--prompt", "AB", "--max-bytes", "8", "--rate", "0.1", "--rate-mode", "online"]) == 0
    )
    assert "online control from offset" in capsys.readouterr().err
    assert main(["eval", str(run), "--rate", "1.5"]) == 2
    assert "argument --rate: 1.5 must be in (0, 1)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "batches, error, words",
    [
        (123, TypeError, "batches must be held-out text"),
        ([1, 2, 3], TypeError, "batches must be held-out text"),
        ({"text": "a"}, TypeError, "batches must be held-out text"),
        ("", ValueError, "not empty"),
        (b"", ValueError, "not empty"),
        ([torch.zeros(3, dtype=torch.long)], TypeError, "(B, T) id tensors"),
    ],
)
def test_set_rate_names_a_wrong_held_out_text(batches, error, words):
    """set_rate's held-out text of the wrong type or empty is refused by name, before any work."""
    with pytest.raises(error, match=re.escape(words)):
        set_rate(tiny("learned"), 0.2, batches)


def test_the_rate_mode_option_offers_the_modes_the_service_runs():
    """`--rate-mode`'s choices (cli/options.py, which imports no library module at the top) are
    learntok.run.rate.RATE_MODES: a new mode added to one is offered by the other."""
    import argparse

    from learntok.cli.options import add_rate
    from learntok.run.rate import RATE_MODES

    p = argparse.ArgumentParser()
    add_rate(p, "rate")
    choices = next(a.choices for a in p._actions if a.dest == "rate_mode")
    assert tuple(choices) == RATE_MODES
