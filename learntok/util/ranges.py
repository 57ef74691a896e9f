"""Valid ranges of numbers, declared once where a value is defined (docs/reliability.md).

A config field states its range in its declaration, `lr: float = ranged(3e-3, gt=0)`, and the
run config checks every field against it at start-up (learntok.util.typed_fields.check_values); numeric
command-line options are argparse types built on the same `Range` (learntok.cli.values). Whatever the
declared bounds, a float must be finite and within float32's range (every float of a config or
option reaches a float32 tensor or a float32 step: 1e308 passes float64 and overflows there) and an
int must fit in 64 bits (seeds, counts and sizes reach torch and numpy as int64), so NaN,
infinities and huge values are refused everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

INT64 = (-(2**63), 2**63 - 1)  # what torch, numpy and the checkpoint formats hold
FLOAT32_MAX = 3.4028234663852886e38  # the largest finite float32: a float beyond it overflows in a tensor
FLOAT32_TINY = 1.1754943508222875e-38  # the smallest normal float32: a float below it (not 0) underflows
RANGE = "range"  # the metadata key of a field's Range


@dataclass(frozen=True)
class Range:
    """Numbers between `low` and `high` (either may be None: unbounded), each end included
    unless `low_open` / `high_open`. Non-finite floats and ints outside int64 are never in it."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def problem(self, value: int | float) -> str | None:
        """Why `value` is not in the range (a phrase: "must be > 0"), or None if it is."""
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number"
        if isinstance(value, float) and 0 < abs(value) < FLOAT32_TINY:
            return f"is below float32's smallest normal number ({FLOAT32_TINY:.3g}): a step would hold it as 0 or a denormal"
        if isinstance(value, float) and abs(value) > FLOAT32_MAX:
            return f"is beyond float32's range (at most {FLOAT32_MAX:.3g} in size), which every step computes in"
        if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
            return "does not fit in 64 bits"
        lo_bad = self.low is not None and (value < self.low or (self.low_open and value == self.low))
        hi_bad = self.high is not None and (value > self.high or (self.high_open and value == self.high))
        return f"must be {self}" if lo_bad or hi_bad else None

    def __str__(self) -> str:
        low, high = _number(self.low), _number(self.high)
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {low}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {high}"
        return "a finite number"


def _number(x: float | None) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}" if x is not None else ""


def bounds(ge: float | None = None, gt: float | None = None, le: float | None = None, lt: float | None = None) -> Range:
    """The Range of the comparisons given: ge/gt (>=, >) a low end, le/lt (<=, <) a high end."""
    return Range(gt if gt is not None else ge, lt if lt is not None else le, gt is not None, lt is not None)


def ranged(
    default: Any,
    within: Range | None = None,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Any:
    """A dataclass field with `default` and its valid range: `within` (one of the shared ranges
    below) or the comparisons given, e.g. `n_heads: int = ranged(4, ge=1)`. For a tuple of
    numbers, every element must be in the range."""
    return field(default=default, metadata={RANGE: within or bounds(ge, gt, le, lt)})


def field_range(f) -> Range | None:
    """The Range a dataclass field declares (None: it declares none)."""
    return f.metadata.get(RANGE)


# Ranges that a config field and a command-line option share (declared once, used by both).
SEED = bounds(ge=0, le=INT64[1])  # seeds: >= 0 (numpy's generators refuse negative ones), int64
RATE = bounds(gt=0, lt=1)  # a boundary rate (boundaries per byte): rho*, --rate
FRACTION = bounds(ge=0, lt=1)  # a split's expected fraction of the documents
THREADS = bounds(ge=0, le=1024)  # CPU threads for torch (0: its default); torch holds a C int
REPEATS = bounds(ge=1, le=1024)  # work a command repeats for a figure (K samples, batches): beyond, hours for nothing
# A sampling temperature: 0 is argmax, and so is any below MIN_TEMPERATURE (its limit); above 1e4
# the distribution is uniform to float32's precision, and 1e308 would divide the logits by inf (NaN).
TEMPERATURE = bounds(ge=0, le=1e4)
# bytes a generation makes: 2^24 (16 MiB of text, hours of decoding on a CPU) bounds a typo's 1e12
GENERATED_BYTES = bounds(ge=0, le=2**24)
MIN_TEMPERATURE = 1e-4  # below it, logits / temperature could overflow float32: argmax instead
BPE_VOCAB = bounds(
    ge=256, le=2**20
)  # the 256 byte values and more; a fit reads a few MB (far fewer merges); the trainer aborts on 1e9
