"""Online rate control (docs/rate.md): the controlled scan against its plain reference, the
controller's counts against the law, and the reached rate on text the model never saw."""

from __future__ import annotations

import math

import pytest
import torch

from learntok.boundaries.rate import RateControl, controlled_reference, controlled_scan
from learntok.boundaries.learned import byte_logit

CONTROLS = [
    RateControl(0.2),
    RateControl(0.35, gain=0.3, warmup_gain=2.0, warmup_bytes=5),
    RateControl(0.1, gain=0.05, warmup_bytes=0),
]


def learned_rule(v, thr, scale, offset, cap):
    """The learned policy's controlled rule, as the strategy's forward builds it."""
    return lambda t, prev, delta: thr[:, t] < byte_logit(v[:, t], prev, scale, offset + delta, cap)


def learned_reference_rule(v, thr, scale, offset, cap):
    """The same rule on Python floats: softcap(s (v[t][w-1] + sum_k v[t][w-1-k] a[t-k]) + offset + delta)."""
    w = v.size(-1)

    def decide(b, t, prev, delta):
        z = float(v[b, t, w - 1]) + sum(float(v[b, t, j]) * prev[j] for j in range(w - 1))
        return float(thr[b, t]) < cap * math.tanh((scale * z + offset + delta) / cap)

    return decide


@pytest.mark.parametrize("w", [1, 2, 8])
@pytest.mark.parametrize("greedy", [False, True])
@pytest.mark.parametrize("control", CONTROLS)
def test_controlled_scan_matches_the_plain_law(w, greedy, control):
    g = torch.Generator().manual_seed(w + 10 * greedy)
    B, T = 3, 90
    v = torch.randn(B, T, w, generator=g) * 20
    u = torch.rand(B, T, generator=g).clamp(1e-6, 1 - 1e-6)
    thr = torch.zeros(B, T) if greedy else torch.logit(u)
    counted = torch.ones(B, T, dtype=torch.bool)
    counted[:, 0] = False
    counted[1, 60:] = False  # a row that ends in padding
    counted[2, ::7] = False  # bytes that do not count (EOS)
    fast = controlled_scan(learned_rule(v, thr, 1 / 16, -1.386, 6.0), counted, control, past=w - 1)
    ref = controlled_reference(learned_reference_rule(v, thr, 1 / 16, -1.386, 6.0), counted, control, past=w - 1)
    assert torch.equal(fast, ref)
    # the counts give the law's delta before every byte, and the state after the last one
    before = control.counts_before(fast, counted.float())
    delta = torch.full(
        (B,),
        control.settle * (control.warmup_gain - control.gain) * (1 - control.target)
        if control.warmup_bytes == 0
        else 0.0,
    )
    for t in range(T):
        torch.testing.assert_close(control.offset({k: x[:, t] for k, x in before.items()}), delta, atol=1e-5, rtol=0)
        n = before["n"][:, t]
        gain = torch.where(n < control.warmup_bytes, control.warmup_gain, control.gain)
        delta = delta - gain * (fast[:, t] - control.target) * counted[:, t].float()
        ends = (n + counted[:, t].float() == control.warmup_bytes) & counted[:, t]
        delta = delta + ends.float() * control.settle * (control.warmup_gain - control.gain) * (1 - control.target)
    after = control.state_after(fast, counted.float())
    torch.testing.assert_close(control.offset(after), delta, atol=1e-5, rtol=0)


def test_controller_holds_the_rate_where_a_fixed_offset_misses():
    """Logits that need another offset than the one given (the calibration was done on other
    text): the fixed offset misses the target by far; the controller reaches it, row by row."""
    g = torch.Generator().manual_seed(0)
    B, T = 64, 256
    logits = 2.0 * torch.randn(B, T, 1, generator=g) + 1.5  # rate about 0.7 at offset logit(0.2)
    thr = torch.logit(torch.rand(B, T, generator=g).clamp(1e-6, 1 - 1e-6))
    counted = torch.ones(B, T, dtype=torch.bool)
    counted[:, 0] = False
    offset = math.log(0.2 / 0.8)
    fixed = (thr[:, 1:] < 6.0 * torch.tanh((logits[:, 1:, 0] + offset) / 6.0)).float().mean()
    assert fixed > 0.4
    for target in (0.1, 0.2, 0.35):
        a = controlled_scan(learned_rule(logits, thr, 1.0, offset, 6.0), counted, RateControl(target), past=0)
        assert abs(float(a[:, 1:].mean()) - target) < 0.01


def _agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    """F1 of decisions a against decisions b (B, T) over t >= 1."""
    a, b = a[:, 1:].bool(), b[:, 1:].bool()
    tp = float((a & b).sum())
    return 2 * tp / float(a.sum() + b.sum())


@pytest.mark.parametrize("unit, places_the_cut", [(0.1, True), (1.0, False)])
def test_a_threshold_under_online_control_keeps_its_own_cut_at_its_gain_unit(unit, places_the_cut):
    """A threshold rule whose score spreads over about a unit (entropy in nats, H-Net's routing
    logit), at the threshold that gives the target on this text: online control at the threshold
    rules' gain unit (0.1) holds the rate and keeps the score's own cut (the positions where the
    score is high); at the learned policy's unit (1 logit) the rate holds but the controller
    places the cut: after a boundary it lifts the threshold by 0.8, past most scores."""
    g = torch.Generator().manual_seed(0)
    B, T, target = 64, 256, 0.2
    score = torch.randn(B, T, generator=g)
    limit = float(torch.quantile(score[:, 1:].flatten(), 1 - target))
    counted = torch.ones(B, T, dtype=torch.bool)
    counted[:, 0] = False
    own = (score > limit).float()
    control = RateControl.for_rule(target, sampled=False, unit=unit)
    a = controlled_scan(lambda t, prev, delta: score[:, t] > limit - delta, counted, control)
    assert abs(float(a[:, 1:].mean()) - target) < 0.01
    assert (_agreement(a, own) > 0.85) is places_the_cut, _agreement(a, own)


@pytest.mark.parametrize("name, unit", [("learned", 1.0), ("frozen", 1.0), ("entropy", 0.1), ("hnet", 0.1)])
def test_every_strategy_declares_its_online_gain_in_its_knobs_units(name, unit):
    """The wiring: set_rate's online controller runs in the strategy's rate_gain_unit (0.1 for the
    threshold rules, 1 for the learned policy's logit). From an offset fitted on the text it only
    follows drift (GENTLE_GAIN, no warm-up); with no text to fit on it must find the offset within
    a row (gain 1, warm-up gain four times that), and apply_setting rebuilds the same one."""
    from learntok.boundaries.rate import GENTLE_GAIN
    from learntok.run.rate import apply_setting, set_rate
    from tests.test_rate import VAL_TEXT, tiny

    model = tiny(name)
    for text, gains in ((VAL_TEXT, (GENTLE_GAIN * unit, GENTLE_GAIN * unit, 0)), (None, (unit, 4 * unit, 32))):
        setting = set_rate(model, 0.2, text, mode="online")
        control = model.strategy.rate_control
        assert (control.gain, control.warmup_gain, control.warmup_bytes) == pytest.approx(gains), (name, text)
        model.strategy.set_rate_control(None)
        apply_setting(model, setting)
        assert model.strategy.rate_control == control
