"""What several boundary strategies share: the decisions that count, the output of a strategy
without a policy, the bias that starts a policy at the target rate, a bisection for rate knobs,
even integer strides (Bresenham), stateless decoding, SpaceByte's word rule and the scan of
online rate control (`base.RateControl`) with its plain reference.

Shapes: B batch, T bytes (BOS at t = 0).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from learntok.boundaries.base import BoundaryOutput, BoundaryStrategy, RateControl
from learntok.data.vocab import decision_mask  # noqa: F401 (re-exported)


def fixed_output(decisions: torch.Tensor) -> BoundaryOutput:
    """BoundaryOutput for strategies with no policy: probabilities are the decisions themselves."""
    d = decisions.float().clone()  # never write into the caller's tensor
    d[:, 0] = 1.0
    zeros = torch.zeros_like(d)
    return BoundaryOutput(d, zeros, d, zeros, torch.zeros((), device=d.device))


def target_logit(rate: float) -> float:
    """logit(rho*) = log(rho* / (1 - rho*)): the logit whose sigmoid is the target rate, where a
    policy's bias starts so that it begins at the target rate."""
    return math.log(rate / (1.0 - rate))


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


def bresenham(n: torch.Tensor, rate: float) -> torch.Tensor:
    """True at the counts n = 1, 2, ... where floor(rate n) steps up: exactly floor(rate m) of the
    first m counts, spread as evenly as integers allow (strides floor(1/rate) and ceil(1/rate);
    every k-th count when rate = 1/k). The 1e-9 absorbs float error in rate * n."""
    n = n.double()
    return (n >= 1) & (torch.floor(rate * n + 1e-9) > torch.floor(rate * (n - 1) + 1e-9))


class StatelessStrategy(BoundaryStrategy):
    """A strategy whose decision at a new byte needs no decoding state: `decide_step`."""

    def decide_step(self, x: torch.Tensor, t: int) -> torch.Tensor:
        """a[t] (B,) float 0/1 of the new bytes x (B,) at position t."""
        raise NotImplementedError

    def prefill_state(self, h, x, decisions, early_logits=None) -> dict:
        return {}

    def step(self, h, x, t, state, early_logits=None, greedy=False, boundaries=None):
        if boundaries is None:
            boundaries = self.decide_step(x, t)
        return boundaries.float(), boundaries.float(), state


def is_wordlike(x: torch.Tensor) -> torch.Tensor:
    """SpaceByte's word bytes: ASCII letters, digits and UTF-8 continuation bytes (0x80-0xBF).
    Anything else (space, punctuation, UTF-8 lead bytes, BOS/EOS/PAD) is "space-like"."""
    letter = ((x >= 65) & (x <= 90)) | ((x >= 97) & (x <= 122))
    digit = (x >= 48) & (x <= 57)
    continuation = (x >= 0x80) & (x <= 0xBF)
    return letter | digit | continuation


def whitespace_boundaries(x: torch.Tensor) -> torch.Tensor:
    """SpaceByte's rule (Slagle 2024): a boundary at a space-like byte that follows a word byte.
    x (B, T) ids -> (B, T) float 0/1 with a[:, 0] = 1. Causal: a[t] reads x[t-1] and x[t] only."""
    word = is_wordlike(x)
    a = ~word[:, 1:] & word[:, :-1]  # (B, T-1): decision for t = 1..T-1
    return torch.cat([torch.ones_like(x[:, :1], dtype=torch.bool), a], dim=1).float()


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
