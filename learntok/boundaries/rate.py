"""The rate dial of a boundary strategy (docs/rate.md): every way a strategy's boundary rate is
read, set, conditioned or controlled, in one place.

- `RateDial`, which `BoundaryStrategy` inherits: the interface the run level turns (the knob,
  online control, a rate-conditioned policy's condition, training's integral control), with the
  flags a strategy declares about it;
- the knobs, `RuleKnob` (a rule that places its rate exactly) and `OffsetKnob` (a scalar offset,
  calibrated by `bisect_rate`);
- online rate control at inference: the controller `RateControl`, the one `online_control` picks
  for a strategy, its scan `controlled_scan` and the plain reference `controlled_reference`;
- `RateCondition`: rate-conditioned training's targets and their controller.

Shapes: B batch, T bytes (BOS at t = 0), K = CONDITION_BINS.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from torch import nn

from learntok.util.errors import ConfigError
from learntok.util.runtime import MODEL_STATE

GENTLE_GAIN = 0.03  # online control's gain (knob units per unit rate error per byte) from an offset fitted on the text
CONDITION_BINS = 8  # grid points of the rate-conditioned controller, log-spaced over rate_range


@dataclass(frozen=True)
class RateControl:
    """Causal rate control at inference (docs/rate.md, "Online rate control"): an integral
    controller on each row's running rate, training's law (`LearnedPolicy.adapt_rate`) applied
    after every decision that counts (`decision_mask`) instead of after every optimizer step,

        delta <- delta - g (a[t] - rho),   delta = 0 at each row's BOS,

    delta moving the strategy's rate knob (added to its offset) for the next byte. The gain g is
    `warmup_gain` for a row's first `warmup_bytes` counted bytes (to find quickly the offset this
    text needs, when it is not the calibrated one) and `gain` after. When the gain drops, the
    offset's swing after a boundary shrinks from G (1 - rho) to g (1 - rho); where the policy
    cuts sharply, the offset's mean level then rises by up to half the difference, paid for in
    missed boundaries, so delta takes `settle` times that difference at the switch: a half where
    decisions are deterministic at a logit's gain (greedy cuts), a quarter where they are drawn
    or where a threshold's score, wider than its gain, smooths the cut (`for_rule`; measured in
    docs/rate.md).
    Because g is piecewise constant, delta is a function of three integer counts (the state:
    counted bytes `n`, boundaries within the warm-up `warm`, boundaries after it `late`), and
    `offset` computes it from them: the scan, generation's step and a prompt's prefill agree
    exactly. A row's boundary count misses rho n by O(delta / g) whatever its length, so the
    reached rate misses rho by O(1 / (g n)) on any text."""

    target: float  # rho: the requested boundaries per counted byte
    gain: float = 1.0  # g after the warm-up: logit units per unit rate error per byte (docs/rate.md)
    warmup_gain: float = 4.0  # g during a row's first warmup_bytes counted bytes
    warmup_bytes: int = 32  # counted bytes of each row under warmup_gain
    settle: float = 0.5  # fraction of (warmup_gain - gain) (1 - rho) added to delta at the end of the warm-up

    @classmethod
    def for_rule(cls, target: float, sampled: bool, unit: float = 1.0) -> "RateControl":
        """The defaults for deterministic decisions, or drawn ones (`sampled`), with both gains in
        the knob's units: `unit` (the strategy's `rate_gain_unit`) knob units count as one logit.
        The settling step is a half only where the controller makes the cut sharp: deterministic
        decisions at a full logit's gain. Draws, or a threshold's score of wider spread than its
        gain (unit < 1), smooth the cut, and take a quarter (measured in docs/rate.md)."""
        sharp = not sampled and unit >= 1.0
        return cls(target, gain=unit * cls.gain, warmup_gain=unit * cls.warmup_gain, settle=0.5 if sharp else 0.25)

    def init_state(self, batch: int, device: torch.device) -> dict[str, torch.Tensor]:
        zeros = torch.zeros(batch, device=device)
        return {"n": zeros, "warm": zeros, "late": zeros}

    def offset(self, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """delta (any shape of the counts) from the counts: the sum of -g (a - rho) over them."""
        n, warm, late = state["n"], state["warm"], state["late"]
        n_warm = n.clamp(max=float(self.warmup_bytes))
        step = self.settle * (self.warmup_gain - self.gain) * (1.0 - self.target) * (n >= self.warmup_bytes).float()
        return step - (
            self.warmup_gain * (warm - self.target * n_warm) + self.gain * (late - self.target * (n - n_warm))
        )

    def update(self, state: dict[str, torch.Tensor], a: torch.Tensor, counted: torch.Tensor) -> dict[str, torch.Tensor]:
        """The counts after deciding a (B,) float 0/1 at bytes that count where counted (B,) is 1."""
        in_warmup = (state["n"] < self.warmup_bytes).float()
        return {
            "n": state["n"] + counted,
            "warm": state["warm"] + a * counted * in_warmup,
            "late": state["late"] + a * counted * (1.0 - in_warmup),
        }

    def _hits(self, a: torch.Tensor, counted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, T) each: counted bytes before t, boundaries at t within the warm-up and after it."""
        n = counted.cumsum(1) - counted  # exact integers
        hit = a * counted
        warm = hit * (n < self.warmup_bytes).float()
        return n, warm, hit - warm

    def counts_before(self, a: torch.Tensor, counted: torch.Tensor) -> dict[str, torch.Tensor]:
        """The state before each byte, (B, T) each, from decisions a and counted (B, T) float."""
        n, warm, late = self._hits(a, counted)
        return {"n": n, "warm": warm.cumsum(1) - warm, "late": late.cumsum(1) - late}

    def state_after(self, a: torch.Tensor, counted: torch.Tensor) -> dict[str, torch.Tensor]:
        """The state after decisions a (B, T) at bytes counted (B, T) float (a prompt's prefill)."""
        _, warm, late = self._hits(a, counted)
        return {"n": counted.sum(1), "warm": warm.sum(1), "late": late.sum(1)}


def online_control(strategy: "RateDial", target: float, greedy: bool, fitted: bool = False) -> RateControl:
    """The online controller for `strategy` at `target` under its decision rule: drawn unless
    greedy, with gains in the strategy's knob units (`rate_gain_unit`). `fitted`: the start offset
    was calibrated on the text's own first bytes, so the controller only follows drift, at
    GENTLE_GAIN with no warm-up (a strong controller there reorders the model's own cuts and costs
    bits: docs/rate.md, "What control costs"); otherwise it must find the offset within a row."""
    unit = strategy.rate_gain_unit
    if fitted:
        return RateControl(target, gain=GENTLE_GAIN * unit, warmup_gain=GENTLE_GAIN * unit, warmup_bytes=0, settle=0.0)
    return RateControl.for_rule(target, strategy.samples and not greedy, unit)


def controlled_scan(
    decide: Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor],
    counted: torch.Tensor,
    control: RateControl,
    past: int = 0,
) -> torch.Tensor:
    """Decisions under `control`, sequential in t on the device (no host sync), vectorised over
    B. decide(t, prev, delta) -> (B,) bool is the strategy's rule at byte t given prev (B, past),
    the decisions a[t-past .. t-1] (0 before position 0), and the controller's delta (B,); the
    strategy's `step` calls the same rule. counted (B, T) bool -> a (B, T) float, a[:, 0] = 1."""
    B, T = counted.shape
    c = counted.float()
    buf = c.new_zeros(B, T + past)  # buf[:, t + past] = a[t]; zeros before 0
    buf[:, past] = 1.0  # BOS
    state = control.init_state(B, c.device)
    for t in range(1, T):
        a = decide(t, buf[:, t : t + past], control.offset(state)).float()
        buf[:, t + past] = a
        state = control.update(state, a, c[:, t])
    return buf[:, past:]


def controlled_reference(
    decide: Callable[[int, int, list[float], float], bool], counted: torch.Tensor, control: RateControl, past: int = 0
) -> torch.Tensor:
    """A plain Python loop over rows and bytes, the reference for `controlled_scan`: the law
    delta <- delta - g (a - rho) applied literally, in Python floats, with the settling step at
    the end of the warm-up. decide(b, t, prev, delta) is the strategy's rule for row b at byte t,
    prev its last `past` decisions (oldest first)."""
    B, T = counted.shape
    a = torch.zeros(B, T)
    settle = control.settle * (control.warmup_gain - control.gain) * (1.0 - control.target)
    for b in range(B):
        a[b, 0], delta, n = 1.0, settle if control.warmup_bytes == 0 else 0.0, 0
        for t in range(1, T):
            prev = [float(a[b, t - k]) if t - k >= 0 else 0.0 for k in range(past, 0, -1)]
            a[b, t] = float(decide(b, t, prev, delta))
            if counted[b, t]:
                gain = control.warmup_gain if n < control.warmup_bytes else control.gain
                delta -= gain * (float(a[b, t]) - control.target)
                n += 1
                delta += settle if n == control.warmup_bytes else 0.0
    return a


def bisect_rate(
    rate_of: Callable[[float], float], target: float, low: float, high: float, iters: int = 30
) -> tuple[float, float]:
    """Bisection for a knob whose rate is nondecreasing in it: (knob, its rate), the knob being
    whichever end of the final bracket [low, high] gives the rate closest to `target`. When the
    target lies outside [rate(low), rate(high)], that end is returned (the caller says why)."""
    r_low, r_high = rate_of(low), rate_of(high)
    if target <= r_low or target >= r_high:
        return (low, r_low) if target <= r_low else (high, r_high)
    for _ in range(iters):
        mid = 0.5 * (low + high)
        r_mid = rate_of(mid)
        if r_mid < target:
            low, r_low = mid, r_mid
        else:
            high, r_high = mid, r_mid
    return (low, r_low) if target - r_low <= r_high - target else (high, r_high)


class RateCondition(nn.Module):
    """Rate-conditioned training's targets and their controller (docs/rate.md, "One model for
    every rate"). In training, each group of `rows` consecutive rows draws a target rho
    log-uniform from [lo, hi]; in evaluation every row takes `rate` (what --rate sets; the
    model's target_rate by default). The policy is told rho as its offset, logit(rho) + bias(rho):
    bias is the integral rate controller per target, CONDITION_BINS terms log-spaced over the
    range and interpolated linearly in log rho, each moved by the rate error of the rows near it.
    The offset is made nondecreasing in rho (a running max over the grid), so a higher request
    never cuts fewer boundaries for the same draws (w = 1). Outside the range it is logit(rho)
    plus the nearest end's bias. Shapes: B rows, K = CONDITION_BINS."""

    def __init__(self, lo: float, hi: float, rows: int, default: float):
        super().__init__()
        self.lo, self.hi, self.rows = lo, hi, rows
        self.register_buffer("bias", torch.zeros(CONDITION_BINS))  # per-target integral terms (logit units; saved)
        self.register_buffer("rate", torch.tensor(float(default)), persistent=False)  # the condition in evaluation
        self.register_buffer("pending", torch.zeros(2, CONDITION_BINS), persistent=False)  # error and bytes per bin

    def grid(self) -> torch.Tensor:
        """(K,) the grid's rates."""
        return torch.logspace(math.log10(self.lo), math.log10(self.hi), CONDITION_BINS, device=self.bias.device)

    def targets(self, batch: int, device: torch.device, training: bool) -> torch.Tensor:
        """(B,) each row's target: drawn in groups of `rows` (training), else the condition."""
        if not training:
            return self.rate.expand(batch).to(device)
        u = torch.rand(-(-batch // self.rows), device=device)  # one draw per group
        rho = torch.exp(math.log(self.lo) + u * (math.log(self.hi) - math.log(self.lo)))
        return rho.repeat_interleave(self.rows)[:batch]

    def _place(self, rho: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B,) grid index below each rho (long) and the fraction toward the next, in log rate."""
        pos = (torch.log(rho) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo)) * (CONDITION_BINS - 1)
        pos = pos.clamp(0, CONDITION_BINS - 1)
        low = pos.floor().clamp(max=CONDITION_BINS - 2)
        return low.long(), pos - low

    def offset(self, rho: torch.Tensor) -> torch.Tensor:
        """(B,) the policy's offset for targets rho (B,)."""
        levels = torch.cummax(torch.logit(self.grid()) + self.bias, 0).values  # (K,) nondecreasing
        low, f = self._place(rho)
        inside = (1 - f) * levels[low] + f * levels[low + 1]
        ends = levels[[0, -1]] - torch.logit(self.grid()[[0, -1]])  # the ends' bias after the running max
        outside = torch.logit(rho) + torch.where(rho < self.lo, ends[0], ends[1])
        return torch.where((rho < self.lo) | (rho > self.hi), outside, inside)

    @torch.no_grad()
    def record(self, rho: torch.Tensor, a: torch.Tensor, counted: torch.Tensor) -> None:
        """Add each row's rate error (its decisions a (B, T) over the bytes counted (B, T)) to
        the grid points around its target, weighted by the row's bytes."""
        n = counted.sum(1)  # (B,)
        err = (a * counted).sum(1) - rho * n  # (B,) boundaries over or under the target
        low, f = self._place(rho)
        for idx, w in ((low, 1 - f), (low + 1, f)):
            self.pending[0].index_add_(0, idx, w * err)
            self.pending[1].index_add_(0, idx, w * n)

    @torch.no_grad()
    def adapt(self, gain: float) -> None:
        """bias <- bias - gain (rate - rho) per grid point, from the rows recorded since the last call."""
        err, n = self.pending
        if gain > 0:
            self.bias.sub_(gain * torch.where(n > 0, err / n.clamp(min=1e-9), torch.zeros_like(err)))
        self.pending.zero_()


def no_rate_knob(name: str) -> ConfigError:
    """What a rate asked of strategy `name`, which has no knob, says."""
    return ConfigError(
        f"strategy {name!r} has no inference-time rate knob (its rate is fixed when it is "
        "trained, e.g. bpe's vocabulary): train it at this rate instead (compare --rates)"
    )


class RateDial:
    """A strategy's rate interface, which `BoundaryStrategy` inherits: the knob (`rate_knob`,
    `set_rate_knob`, `exact_knob`; RuleKnob, OffsetKnob), online control (`set_rate_control`
    and the decoding state's `control_*` part), a rate-conditioned policy's condition
    (`condition_range`, `set_condition`, `condition_offset`) and training's integral control
    (`adapt_rate`, `controller_sums`). Only these methods, never the attributes behind them,
    are used outside learntok.boundaries (tests/test_rate_access.py). The base has no knob (bpe's
    rate is its vocabulary), no control and no condition."""

    knob_name: str | None = None  # what the knob is, in messages and RateSetting.knob: "rule", "offset"
    rate_offset_range: tuple[float, float] = (0.0, 0.0)  # the bracket a calibration bisects an offset in
    online_rate: bool = False  # the strategy can run under online rate control (`set_rate_control`)
    # What online control's gain of 1 moves the knob by, in the knob's units: 1 for the learned
    # policy's logit, whose scores spread over +-6; a threshold whose score spreads over about a
    # unit (entropy's nats, H-Net's routing logit) takes 0.1, else the controller, not the score,
    # places the cut (docs/rate.md, "Gain").
    rate_gain_unit: float = 1.0
    samples: bool = False  # its decisions are drawn unless `greedy` (else deterministic)
    conditionable: bool = False  # it can be trained rate-conditioned (model.rate_conditioned, docs/rate.md)
    rate_control: RateControl | None = None  # online rate control at inference (None: off)
    condition: RateCondition | None  # a rate-conditioned policy's targets (set by the strategy's __init__)
    cfg: object  # the model config the strategy was built from (its `boundary` names it in messages)

    def set_rate_control(self, control: RateControl | None) -> None:
        """Run under online rate control `control` from the next forward or decoding state on
        (None: off; a calibration decides without it)."""
        self.rate_control = control

    # Online rate control's part of the decoding state (strategies with `online_rate` add it to theirs).
    def control_init(self, batch: int, device: torch.device) -> dict:
        """{"control": the controller's counts at a row's start}, or {} when control is off."""
        c = self.rate_control
        return {} if c is None else {"control": c.init_state(batch, device)}

    def control_prefill(self, decisions: torch.Tensor, counted: torch.Tensor) -> dict:
        """The controller's part after a prompt read with `decisions` (B, T), its decisions that
        count where counted (B, T) bool (the prompt's `decision_mask`)."""
        c = self.rate_control
        return {} if c is None else {"control": c.state_after(decisions.float(), counted.float())}

    def control_step(self, state: dict, a: torch.Tensor, counted: torch.Tensor) -> dict:
        """The controller's part after deciding a (B,) at new bytes that count where counted (B,)
        float is 1 (`common.counted_at`)."""
        c = self.rate_control
        return {} if c is None else {"control": c.update(state["control"], a, counted)}

    # The knob: strategies with one override these three (RuleKnob, OffsetKnob).
    def rate_knob(self) -> float | None:
        """The knob's current setting (a rule's rate, an offset); None: the strategy has no knob."""
        return None

    def set_rate_knob(self, value: float) -> None:
        """Put the knob at `value` (a setting `rate_knob` gave, or a calibration's)."""
        raise no_rate_knob(self.cfg.boundary)

    def exact_knob(self, target: float) -> float | None:
        """The setting that places rate `target` exactly with no text read (a rule: the rate
        itself); None: an offset, calibrated on held-out text (`OffsetKnob.calibrate_knob`)."""
        return None

    # A rate-conditioned policy's condition (docs/rate.md, "One model for every rate").
    def condition_range(self) -> tuple[float, float] | None:
        """The range (lo, hi) of targets a rate-conditioned policy was trained on; None: the
        strategy is not rate-conditioned."""
        return None if self.condition is None else (self.condition.lo, self.condition.hi)

    def set_condition(self, rate: float) -> None:
        """Tell a rate-conditioned policy the target every row takes in evaluation."""
        if self.condition is None:
            raise ConfigError(f"strategy {self.cfg.boundary!r} is not rate-conditioned")
        self.condition.rate.fill_(rate)

    def condition_offset(self, rates: torch.Tensor) -> torch.Tensor:
        """(K,) the logit offset a rate-conditioned policy decides with when conditioned on each
        of rates (K,), the knob's offset included; on the strategy's device."""
        return self.condition.offset(rates.to(self.rate_offset.device)) + self.rate_offset

    @contextlib.contextmanager
    def rate_knob_kept(self) -> Iterator[None]:
        """The knob, a rate-conditioned policy's condition and online control restored after the
        block, whatever it sets; the block holds runtime.MODEL_STATE, so no other thread runs the
        model at the rate it sets."""
        with MODEL_STATE:
            knob, control = self.rate_knob(), self.rate_control
            condition = self.condition.rate.clone() if self.condition is not None else None
            try:
                yield
            finally:
                if knob is not None:
                    self.set_rate_knob(knob)
                if condition is not None:
                    self.condition.rate.copy_(condition)
                self.rate_control = control

    # Training's rate control (after each optimizer step).
    def adapt_rate(self, rate: torch.Tensor, gain: float) -> None:
        """Integral control of the boundary rate after an optimizer step (learned policy only)."""

    def controller_sums(self) -> torch.Tensor | None:
        """The rate controller's sums since its last step, to add over ranks before `adapt_rate`
        (a rate-conditioned policy's per-target errors); None when it reads only the batch rate."""
        return None


class RuleKnob:
    """The knob of a rule that places its rate exactly (uniform, fixed): `rule_rate`, rho* unless
    set; a target needs no calibration. A mixin, before the strategy's base class."""

    knob_name = "rule"
    rule_rate: float  # the rate the rule places

    def rate_knob(self) -> float:
        return self.rule_rate

    def set_rate_knob(self, value: float) -> None:
        self.rule_rate = value

    def exact_knob(self, target: float) -> float:
        return target


class OffsetKnob:
    """The knob of a strategy whose rate rises with a scalar offset: `rate_offset` (a 0-d tensor;
    a logit offset, a threshold), calibrated for a target by bisection in `rate_offset_range`
    (`calibrate_knob`). A mixin, before the strategy's base class."""

    knob_name = "offset"
    rate_offset: torch.Tensor  # () the knob; raising it raises the rate
    rate_offset_range: tuple[float, float]

    def rate_knob(self) -> float:
        return float(self.rate_offset)

    def set_rate_knob(self, value: float) -> None:
        self.rate_offset.fill_(value)

    def calibrate_knob(self, rate_now: Callable[[], float], target: float, iters: int = 30) -> tuple[float, float]:
        """The offset whose rate, rate_now() measured with the knob set, is closest to `target`,
        by bisection in `rate_offset_range`; the knob is left at it. Returns (the offset as the
        knob holds it, the rate reached)."""

        def rate_of(offset: float) -> float:
            self.set_rate_knob(offset)
            return rate_now()

        offset, reached = bisect_rate(rate_of, target, *self.rate_offset_range, iters=iters)
        self.set_rate_knob(offset)
        return self.rate_knob(), reached
