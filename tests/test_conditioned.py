"""Rate-conditioned training (docs/rate.md, "One model for every rate"): targets drawn per group
of rows, the batch baseline within a target, the per-row rate loss and per-target controller,
the condition as --rate sets it (monotone), and the commands end to end."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from learntok.boundaries.rate import CONDITION_BINS
from learntok.data import encode
from learntok.model.objective import batch_baseline, rate_loss
from learntok.run.rate import decided_rate, set_rate, strategy_inputs, text_batches

from conftest import shakespeare, tiny_model

TEXT = shakespeare(6000, skip=30_000)


def conditioned(w: int = 1, rows: int = 4):
    return tiny_model("learned", window=w, rate_conditioned=True, rows_per_rate=rows)


def test_rows_draw_targets_in_groups_and_evaluation_takes_the_condition():
    model = conditioned(rows=3)
    x = torch.stack([encode(shakespeare(64, skip=64 * i)) for i in range(8)])
    torch.manual_seed(0)
    rho = model(x).target_rate  # training: drawn
    assert rho.shape == (8,) and bool(((rho >= 0.1) & (rho <= 0.35)).all())
    assert torch.equal(rho[:3], rho[0].expand(3)) and torch.equal(rho[6:], rho[6].expand(2)) and rho[0] != rho[3]
    model.eval()
    assert torch.equal(model(x).target_rate, torch.full((8,), 0.2))  # the model's target_rate until --rate
    set_rate(model, 0.3, mode="calibrated")
    assert torch.equal(model(x).target_rate, torch.full((8,), 0.3))


@pytest.mark.parametrize("kind", ["mean", "loo"])
def test_batch_baseline_compares_the_rows_of_one_target(kind):
    g = torch.Generator().manual_seed(0)
    r, mask = torch.randn(6, 9, generator=g), (torch.rand(6, 9, generator=g) > 0.2).float()
    target = torch.tensor([0.1, 0.1, 0.3, 0.3, 0.3, 0.2])
    ref = torch.zeros_like(r)
    for b in range(6):
        group = [j for j in range(6) if target[j] == target[b] and (kind == "mean" or j != b)]
        for t in range(9):
            n = sum(mask[j, t] for j in group)
            base = sum(r[j, t] * mask[j, t] for j in group) / max(float(n), 1.0)
            ref[b, t] = (r[b, t] - base) * mask[b, t]
    torch.testing.assert_close(batch_baseline(r, mask, kind, target), ref)
    same = torch.full((6,), 0.2)  # one target: the plain batch baseline
    torch.testing.assert_close(batch_baseline(r, mask, kind, same), batch_baseline(r, mask, kind))


def test_rate_loss_pulls_each_row_toward_its_own_target():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 12, generator=g, requires_grad=True)
    probs = torch.sigmoid(logits).detach()
    mask = torch.ones(4, 11)
    target = torch.tensor([0.05, 0.05, 0.95, 0.95])  # rows 0-1 above their target, 2-3 below
    rate_loss(logits, probs, mask, target).backward()
    row = logits.grad[:, 1:-1].sum(1)
    assert bool((row[:2] > 0).all()) and bool((row[2:] < 0).all())  # descent lowers 0-1, raises 2-3
    one = torch.tensor([0.3])  # one row: the batch loss
    torch.testing.assert_close(
        rate_loss(logits[:1], probs[:1], mask[:1], one), rate_loss(logits[:1], probs[:1], mask[:1], 0.3)
    )


def test_the_controller_moves_each_target_toward_its_rate():
    model = conditioned(rows=2)
    model.strategy.condition.bias.fill_(3.0)  # every target cut far too often
    x = torch.stack([encode(shakespeare(128, skip=128 * i)) for i in range(8)])
    errors = []
    for _ in range(80):
        out = model(x)
        real = out.boundaries[:, 1:][x[:, 1:] < 256]
        errors.append(float(real.mean()) - float(out.target_rate.mean()))
        model.strategy.adapt_rate(torch.tensor(0.0), 0.5)
    assert errors[0] > 0.2 and abs(sum(errors[-10:]) / 10) < 0.03
    assert model.strategy.condition.pending.abs().sum() == 0  # spent at every step


@settings(max_examples=10, deadline=None)
@given(
    bias=st.lists(st.floats(-4, 4), min_size=CONDITION_BINS, max_size=CONDITION_BINS),
    requests=st.lists(st.floats(0.02, 0.8), min_size=2, max_size=6),
)
def test_the_reached_rate_rises_with_the_requested_rate(bias, requests):
    """For any learned per-target biases, a higher request never cuts fewer boundaries (the same
    draws; w = 1), inside the trained range and out of it."""
    model = inputs_model()
    model.strategy.condition.bias.copy_(torch.tensor(bias))
    reached = []
    for r in sorted(requests):
        set_rate(model, r, mode="calibrated")
        reached.append(decided_rate(model.strategy, INPUTS)[0])
    assert reached == sorted(reached)


_MODEL = conditioned().eval()
INPUTS = strategy_inputs(_MODEL, text_batches(TEXT, 256))


def inputs_model():
    return _MODEL


def test_a_conditioned_run_trains_evaluates_and_segments_at_any_rate(tmp_path, capsys):
    from learntok.run.checkpoint import load_run
    from learntok.cli import main
    from tests.test_compare import TINY

    run = tmp_path / "run"
    assert main(["train", "--out", str(run), *TINY, "model.rate_conditioned=true", "objective.rate_gain=0.3"]) == 0
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("target_rate_error" in m for m in metrics)
    model, cfg = load_run(run)
    assert cfg.model.rate_conditioned and model.strategy.condition.bias.abs().sum() > 0  # the controller moved
    capsys.readouterr()
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
                "2048",
                "--json",
                str(tmp_path / "e.json"),
            ]
        )
        == 0
    )
    setting = json.loads((tmp_path / "e.json").read_text())["rate_setting"]
    assert setting["knob"] == "condition" and setting["target"] == 0.3
    assert (
        main(["segment", str(run), "Some text to cut at a rate.", "--rate", "0.25", "--html", str(tmp_path / "p.html")])
        == 0
    )
    page = (tmp_path / "p.html").read_text()
    assert '"conditions": [[' in page and "conditioned on" in page


def test_the_page_slider_sets_the_condition():
    """A conditioned model is told its rate through the offset alone, so the page's slider at d
    is the model conditioned on the rate the page shows for d."""
    from learntok.text.page import condition_grid, decide_from_terms
    from tests.test_page import page_view

    model = conditioned(w=8).eval()
    model.strategy.proj.weight.data.mul_(100)  # mixing weights that matter
    model.strategy.condition.bias.copy_(torch.linspace(1.5, -1.5, CONDITION_BINS))
    text = TEXT[:500].decode("utf-8", errors="replace")
    set_rate(model, 0.2, mode="calibrated")
    view = page_view(model, text, window=200)
    view.conditions = condition_grid(model.strategy, view.offset)
    ds = [d for d, _ in view.conditions]
    assert ds == sorted(ds) and ds[0] < 0 < ds[-1]
    for d, r in view.conditions[::9]:
        set_rate(model, r, mode="calibrated")
        assert page_view(model, text, window=200).decisions == decide_from_terms(view, d), r
