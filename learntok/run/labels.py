"""What a figure measured, said beside it (docs/compare.md): the bytes a bits-per-byte figure
covers, whether a run's boundary rate is at its target (bits per byte compare at equal
compression only then), and the control every comparison is measured against. Which settings
a learned arm ran with is learntok.run.config_info.settings_label."""

# |reached - target| beyond which a figure is not at its target rate, nor at an equal rate with a
# run at that target: 0.01 is 5% of the usual 0.2, about what a rate moves between seeds.
RATE_SLACK = 0.01

REFERENCE = "uniform"  # the control every comparison is measured against: the same rate, no information


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
