"""The statistics over seeds that the results tables read: Student's t p-values against tabled
quantiles, and Holm's correction against its definition."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learntok.evaluation.statistics import holm, mean_and_se, paired_t_pvalue, t_pvalue
from learntok.evaluation.statistics import T95


@pytest.mark.parametrize("dof", range(1, len(T95) + 1))
def test_the_tabled_95_percent_quantile_has_p_005(dof):
    assert t_pvalue(T95[dof - 1], dof) == pytest.approx(0.05, abs=2e-4)


@pytest.mark.parametrize(
    ("t", "dof", "p"),  # reference values from R's 2 * pt(-t, dof)
    [(0.0, 3, 1.0), (1.0, 1, 0.5), (2.0, 2, 0.1835034), (3.0, 4, 0.0399), (1.5, 7, 0.1773), (-2.5, 9, 0.03393)],
)
def test_p_values_match_reference_values(t, dof, p):
    assert t_pvalue(t, dof) == pytest.approx(p, abs=1e-3)


@given(st.floats(0, 50), st.floats(0, 50), st.integers(1, 40))
def test_p_falls_as_t_grows(a, b, dof):
    lo, hi = sorted((a, b))
    assert 0.0 <= t_pvalue(hi, dof) <= t_pvalue(lo, dof) + 1e-12 <= 1.0 + 1e-12


def test_paired_p_value_of_a_clear_and_of_no_difference():
    assert paired_t_pvalue([-0.10, -0.11, -0.09, -0.10, -0.12]) < 1e-4
    assert paired_t_pvalue([0.0, 0.0, 0.0]) == 1.0
    assert paired_t_pvalue([0.3]) == 1.0


def holm_by_definition(p: list[float], alpha: float) -> list[bool]:
    """Rejections of Holm's step-down procedure, written as its definition: reject the k-th
    smallest while every smaller one (itself included) is below alpha / (m - rank)."""
    m, order, reject = len(p), sorted(range(len(p)), key=lambda i: p[i]), [False] * len(p)
    for rank, i in enumerate(order):
        if p[i] > alpha / (m - rank):
            break
        reject[i] = True
    return reject


@given(st.lists(st.floats(0, 1), min_size=1, max_size=12), st.sampled_from([0.01, 0.05, 0.1]))
def test_holm_rejects_what_the_step_down_procedure_rejects(p, alpha):
    adjusted = holm(p)
    assert [a <= alpha for a in adjusted] == holm_by_definition(p, alpha)
    assert all(q <= a <= 1.0 for q, a in zip(p, adjusted))


def test_holm_of_one_test_is_the_test():
    assert holm([0.03]) == [0.03]
    assert np.allclose(holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    assert list(itertools.accumulate(sorted(holm([0.2, 0.01, 0.5])), max)) == sorted(holm([0.2, 0.01, 0.5]))


@settings(deadline=None)  # scipy's first import is slow
@given(
    st.lists(st.floats(-0.1, 0.1, allow_nan=False), min_size=3, max_size=40),
    st.floats(0.001, 0.05),
)
def test_one_sided_and_tost_p_values_match_scipy(diffs, margin):
    scipy_stats = pytest.importorskip("scipy.stats")
    from learntok.evaluation.statistics import one_sided_pvalue, tost_pvalue

    d = np.asarray(diffs)
    if d.std(ddof=1) < 1e-9:
        return  # no spread: scipy's test is undefined
    below = scipy_stats.ttest_1samp(d, 0.0, alternative="less").pvalue
    assert one_sided_pvalue(diffs) == pytest.approx(below, abs=1e-6)
    assert one_sided_pvalue(diffs, below=False) == pytest.approx(1 - below, abs=1e-6)
    upper = scipy_stats.ttest_1samp(d, margin, alternative="less").pvalue
    lower = scipy_stats.ttest_1samp(d, -margin, alternative="greater").pvalue
    assert tost_pvalue(diffs, margin) == pytest.approx(max(upper, lower), abs=1e-6)


@given(st.lists(st.floats(-0.1, 0.1, allow_nan=False), min_size=3, max_size=40), st.floats(0.001, 0.05))
def test_tost_rejects_exactly_when_the_90_percent_interval_lies_inside_the_margin(diffs, margin):
    from learntok.evaluation.statistics import t_quantile, tost_pvalue

    mean, se = mean_and_se(diffs)
    if se < 1e-9:
        return
    half = t_quantile(0.10, len(diffs) - 1) * se
    inside = -margin < mean - half and mean + half < margin
    p = tost_pvalue(diffs, margin)
    if abs(p - 0.05) > 1e-6:  # away from the edge, where rounding decides
        assert (p < 0.05) == inside


@pytest.mark.parametrize(("p", "dof", "t"), [(0.10, 29, 1.699127), (0.05, 29, 2.045230), (0.10, 14, 1.761310)])
def test_t_quantile_matches_tabled_values(p, dof, t):
    from learntok.evaluation.statistics import t_quantile

    assert t_quantile(p, dof) == pytest.approx(t, abs=1e-4)


def test_the_intersection_union_test_rejects_only_when_every_member_does():
    from learntok.evaluation.statistics import intersection_union_pvalue

    assert intersection_union_pvalue([0.01, 0.02, 0.049]) < 0.05
    assert intersection_union_pvalue([0.001, 0.001, 0.2]) == 0.2
