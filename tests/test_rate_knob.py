"""The rate knob through the strategy interface (learntok.boundaries.base: `rate_knob`,
`set_rate_knob`, `exact_knob`, `rate_knob_kept`), as a table over every registered strategy:
set, read back, restore; and `rate.rate_mode`, the one check of a rate and its mode."""

from __future__ import annotations

import pytest
import torch

from learntok.boundaries import strategy_names
from learntok.boundaries.rate import OffsetKnob, RateControl, RuleKnob
from learntok.util.errors import ConfigError
from learntok.run.rate import apply_setting, rate_mode, set_rate

from conftest import tiny_model

# strategy -> (its knob's kind, a setting to put it at; None: no knob)
KNOBS = {
    "learned": ("offset", 1.5),
    "frozen": ("offset", 1.5),
    "entropy": ("offset", -0.75),
    "hnet": ("offset", 2.25),
    "nawrot": ("offset", -3.5),
    "whitespace": ("offset", 0.25),
    "uniform": ("rule", 0.37),
    "fixed": ("rule", 0.125),
    "bpe": (None, None),
    "bpe-causal": (None, None),
}


def test_the_table_covers_every_strategy():
    assert sorted(KNOBS) == strategy_names()


@pytest.mark.parametrize("name", sorted(KNOBS))
def test_set_read_back_restore(name):
    kind, value = KNOBS[name]
    strategy = tiny_model(name).strategy
    assert strategy.knob_name == kind
    if kind is None:
        assert strategy.rate_knob() is None and strategy.exact_knob(0.2) is None
        with pytest.raises(ConfigError, match=f"{name!r} has no inference-time rate knob"):
            strategy.set_rate_knob(0.2)
        return
    assert isinstance(strategy, {"offset": OffsetKnob, "rule": RuleKnob}[kind])
    start = strategy.rate_knob()
    assert start == (tiny_model(name).cfg.target_rate if kind == "rule" else 0.0)
    assert strategy.exact_knob(0.3) == (0.3 if kind == "rule" else None)
    with strategy.rate_knob_kept():
        strategy.set_rate_knob(value)
        strategy.set_rate_control(RateControl(0.3))
        assert strategy.rate_knob() == value  # exact: each value is one a float32 holds
        if kind == "offset":
            assert float(strategy.rate_offset) == value  # the buffer the strategy decides with
        else:
            assert strategy.rule_rate == value
    assert strategy.rate_knob() == start and strategy.rate_control is None


def test_kept_restores_after_an_error_and_a_conditioned_policy():
    strategy = tiny_model("learned", window=1, rate_conditioned=True, rows_per_rate=2).strategy
    rate = strategy.condition.rate.clone()
    with pytest.raises(RuntimeError), strategy.rate_knob_kept():
        strategy.set_rate_knob(-2.0)
        strategy.set_condition(0.45)
        raise RuntimeError("inside the block")
    assert strategy.rate_knob() == 0.0 and torch.equal(strategy.condition.rate, rate)


def test_apply_setting_puts_the_knob_back():
    model = tiny_model("fixed")
    setting = set_rate(model, 0.25)
    model.strategy.set_rate_knob(0.5)
    apply_setting(model, setting)
    assert model.strategy.rate_knob() == 0.25


@pytest.mark.parametrize(
    "name, target, mode, words",
    [
        ("learned", 1.0, None, "must be in"),
        ("learned", 0.0, "online", "must be in"),
        ("learned", 0.2, "fast", "rate mode 'fast'"),
        ("whitespace", 0.2, "online", "'whitespace' has no online rate control (its knob is offset)"),
        ("uniform", 0.2, "online", "(its knob is rule)"),
        ("bpe", 0.2, "online", "(its knob is fixed at training)"),
        ("bpe", 0.2, None, "'bpe' has no inference-time rate knob"),
    ],
)
def test_rate_mode_refuses(name, target, mode, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        rate_mode(tiny_model(name), target, mode)


@pytest.mark.parametrize(
    "name, expected",
    [("learned", "online"), ("entropy", "online"), ("whitespace", "calibrated"), ("fixed", "calibrated")],
)
def test_the_default_mode(name, expected):
    assert rate_mode(tiny_model(name), 0.2) == expected
    assert rate_mode(tiny_model(name), 0.2, "calibrated") == "calibrated"
