"""Statistics over seeds (and over any paired sample): the mean and its standard error, Student's
t (its 95% quantile and two-sided p-value, in closed form), the paired test, Holm's correction, and
how a difference reads in a table (lower / tie / higher). Every table of learntok that ranks two
strategies reads its verdict from here. For a registered study: one-sided paired tests, the
intersection-union test (one thing below each of several others, no correction needed; Berger
1982) and equivalence within a margin by two one-sided tests (TOST; Schuirmann 1987)."""

from __future__ import annotations

import math

import numpy as np


def mean_and_se(values: np.ndarray) -> tuple[float, float]:
    """Mean and its standard error (sample std / sqrt(n); 0 with fewer than two values)."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) == 0:
        return 0.0, 0.0
    se = float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0
    return float(values.mean()), se


def t_pvalue(t: float, dof: int) -> float:
    """Two-sided p-value of Student's t with `dof` (>= 1, an integer) degrees of freedom:
    1 - P(|T| < |t|), by the closed forms for integer degrees of freedom (Abramowitz & Stegun
    26.7.3-4), so no special-function library is needed."""
    if dof < 1:
        raise ValueError(f"dof {dof} must be at least 1")
    if math.isinf(t):
        return 0.0
    theta = math.atan(abs(t) / math.sqrt(dof))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if dof % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 cos^2 + (2*4)/(3*5) cos^4 + ...)), last cos^(dof-2)
        term, total = 1.0, 1.0 if dof > 1 else 0.0
        for k in range(1, (dof - 1) // 2):
            term *= 2 * k / (2 * k + 1) * c2
            total += term
        inside = (2 / math.pi) * (theta + s * math.cos(theta) * total)
    else:  # even: sin (1 + 1/2 cos^2 + (1*3)/(2*4) cos^4 + ...), last cos^(dof-2)
        term, total = 1.0, 1.0
        for k in range(1, dof // 2):
            term *= (2 * k - 1) / (2 * k) * c2
            total += term
        inside = s * total
    return min(1.0, max(0.0, 1.0 - inside))


def paired_t_pvalue(diffs) -> float:
    """Two-sided p-value of the paired t-test that the mean of `diffs` (one a seed) is 0
    (1.0 with fewer than two values or no spread and a zero mean)."""
    mean, se = mean_and_se(diffs)
    if len(diffs) < 2 or (se == 0 and mean == 0):
        return 1.0
    return 0.0 if se == 0 else t_pvalue(mean / se, len(diffs) - 1)


def one_sided_pvalue(diffs, below: bool = True, margin: float = 0.0) -> float:
    """p-value of the paired one-sided t-test of H1: mean(diffs) < margin (`below`), or > margin;
    1.0 with fewer than two values, 0 or 1 when there is no spread."""
    mean, se = mean_and_se(diffs)
    gap = (mean - margin) if below else (margin - mean)  # negative when the data lean toward H1
    if len(diffs) < 2:
        return 1.0
    if se == 0:
        return 0.0 if gap < 0 else 1.0
    two_sided = t_pvalue(gap / se, len(diffs) - 1)
    return two_sided / 2 if gap < 0 else 1 - two_sided / 2


def intersection_union_pvalue(pvalues: list[float]) -> float:
    """The intersection-union test (Berger 1982): H1 holds for every member only when each member's
    own test rejects at alpha, so its p-value is the largest of theirs, with no correction."""
    return max(pvalues)


def tost_pvalue(diffs, margin: float) -> float:
    """Equivalence within +-margin by two one-sided tests (Schuirmann 1987): the larger p of
    H1: mean > -margin and H1: mean < +margin. Below alpha exactly when the (1 - 2 alpha) t-interval
    lies inside (-margin, +margin)."""
    return max(one_sided_pvalue(diffs, below=False, margin=-margin), one_sided_pvalue(diffs, below=True, margin=margin))


def t_quantile(two_sided_p: float, dof: int) -> float:
    """The t with two-sided p-value `two_sided_p` at `dof` degrees of freedom (so t_quantile(0.10,
    dof) is the one-sided 95% quantile a 90% interval uses), by bisection on t_pvalue."""
    lo, hi = 0.0, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_pvalue(mid, dof) > two_sided_p else (lo, mid)
    return (lo + hi) / 2


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), in the order given: a family of m tests
    rejected at level alpha where the adjusted p <= alpha controls the family-wise error rate."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


# Two-sided 95% quantiles of Student's t with 1..10 degrees of freedom (beyond: the normal's, plus a
# correction that is within 0.5% of the exact value from 11 on).
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]


def t95(dof: int) -> float:
    return T95[dof - 1] if dof <= len(T95) else 1.96 + 2.4 / dof


def over_seeds(diffs) -> tuple[float, float, bool]:
    """Paired differences, one a seed -> their mean, its standard error over seeds, and whether the
    95% t-interval includes 0 (a tie; always with one seed, which says nothing of training noise)."""
    diff, se = mean_and_se(diffs)
    half = t95(len(diffs) - 1) * se if len(diffs) > 1 else math.inf
    return diff, se, abs(diff) <= half


def verdict(diff: float, tie: bool) -> str:
    """How a difference over seeds reads in a table: tie, lower or higher."""
    return "tie" if tie else ("lower" if diff < 0 else "higher")
