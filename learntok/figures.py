"""What a figure measured, said beside it (docs/compare.md): the bytes a bits-per-byte figure
covers, whether a run's boundary rate is at its target (bits per byte compare at equal
compression only then), and which settings a learned arm ran with: the paper's objective
(Dauncey & Wattenhofer, ICML 2026 §4) or the `tiny` recipe's departures from it."""

from __future__ import annotations

import functools

from learntok.boundaries import strategy_class
from learntok.config import OptimConfig, RunConfig, load_config
from learntok.objective import ObjectiveConfig

# |reached - target| beyond which a figure is not at its target rate, nor at an equal rate with a
# run at that target: 0.01 is 5% of the usual 0.2, about what a rate moves between seeds.
RATE_SLACK = 0.01


def at_rate(reached: float, target: float) -> bool:
    """Whether a boundary rate `reached` is within RATE_SLACK of `target` (a rounding margin aside)."""
    return abs(reached - target) <= RATE_SLACK + 1e-9


def rate_mark(reached: float, target: float, what: str = "its target") -> str:
    """'' when `reached` is at `target` (`at_rate`), else the note printed beside the figure."""
    if at_rate(reached, target):
        return ""
    side = "above" if reached > target else "below"
    return f"not at an equal rate: {reached:.3f} is {side} {what} {target:.3g} by more than {RATE_SLACK:g}"


def unequal_rate(reached: float, target: float, reference: float | None = None) -> str:
    """Why a figure is not at an equal rate ('' when it is): its rate off its own target, or off
    the rate of the run it is compared with (`reference`). One rule (`rate_mark`) for every table."""
    own = rate_mark(reached, target)
    return own or (rate_mark(reached, reference, "the reference's") if reference is not None else "")


def rate_cell(reached: float, target: float, reference: float | None = None, digits: int = 3) -> str:
    """A table's boundary-rate cell: the rate, marked when it is not at an equal rate."""
    mark = " (not at an equal rate)" if unequal_rate(reached, target, reference) else ""
    return f"{reached:.{digits}f}{mark}"


def covers(n_scored: int, n_split: int) -> str:
    """What a split's bpb covers: 'all N bytes' of it, or 'first N bytes' (a capped evaluation)."""
    return f"all {n_split:,} bytes" if n_scored >= n_split else f"first {n_scored:,} bytes"


# The settings a score-function policy trains under. The paper's are the defaults (the paper
# presets keep them); the `tiny` recipe changes some of them so the policy learns on a CPU budget.
POLICY_SETTINGS = {
    "objective.gamma": lambda c: c.objective.gamma,
    "objective.lambda_pi": lambda c: c.objective.lambda_pi,
    "objective.lambda_rate": lambda c: c.objective.lambda_rate,
    "objective.lambda_early": lambda c: c.objective.lambda_early,
    "objective.batch_baseline": lambda c: c.objective.batch_baseline,
    "objective.early_baseline": lambda c: c.objective.early_baseline,
    "objective.rate_gain": lambda c: c.objective.rate_gain,
    "objective.rate_settle_gain": lambda c: c.objective.rate_settle_gain,
    "optim.policy_lr_mult": lambda c: c.optim.policy_lr_mult,
}
PAPER_SETTINGS = RunConfig(objective=ObjectiveConfig(), optim=OptimConfig())


def departures(cfg: RunConfig, base: RunConfig = PAPER_SETTINGS) -> dict[str, object]:
    """The policy settings in which `cfg` departs from `base` (the paper's): {key: cfg's value}."""
    return {k: of(cfg) for k, of in POLICY_SETTINGS.items() if of(cfg) != of(base)}


@functools.cache
def tiny_recipe() -> RunConfig:
    return load_config("tiny")


def settings_label(cfg: RunConfig) -> str | None:
    """Which settings a learned arm ran: 'paper objective', 'tiny recipe', either one with what
    this run changed on top ('tiny recipe, objective.gamma 1.0'); None for a strategy without a
    policy (the settings are the policy's)."""
    if not strategy_class(cfg.model.boundary).has_policy:
        return None
    own = {"paper objective": departures(cfg), "tiny recipe": departures(cfg, tiny_recipe())}
    name = min(own, key=lambda n: len(own[n]))  # the nearer of the two; the paper's on a tie
    return ", ".join([name, *(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in own[name].items())])
