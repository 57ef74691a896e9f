"""Objective: discounting, baselines, normalisation, and the exactness anchor of docs/design.md §4."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from learntok import AUNet, ModelConfig, ObjectiveConfig
from learntok.data import encode
from learntok.model.objective import batch_baseline, discount, discount_reference, loss, token_ce


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 300), gamma=st.sampled_from([0.5, 0.9, 0.99, 1.0]), seed=st.integers(0, 10_000))
def test_discount_matches_loop(T, gamma, seed):
    r = torch.randn(3, T, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    torch.testing.assert_close(discount(r, gamma), discount_reference(r, gamma), rtol=1e-9, atol=1e-9)


def test_batch_baselines():
    r = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 9.0]])
    m = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    mean = batch_baseline(r, m, "mean")
    torch.testing.assert_close(mean[:, 0], torch.tensor([-2.0, 0.0, 2.0]))
    torch.testing.assert_close(mean[:, 1], torch.tensor([-1.0, 1.0, 0.0]))  # masked row ignored
    loo = batch_baseline(r, m, "loo")
    torch.testing.assert_close(loo[:, 0], torch.tensor([1 - 4.0, 3 - 3.0, 5 - 2.0]))
    torch.testing.assert_close(loo[:, 1], torch.tensor([2 - 4.0, 4 - 2.0, 0.0]))
    torch.testing.assert_close(batch_baseline(r, m, "none"), r * m)


def test_ce_and_bpb_normalisation():
    x = torch.stack([encode("abcd"), encode("ab")[:5].new_tensor(list(encode("ab")) + [258, 258])])
    logits = torch.zeros(2, 5, 320)
    ce, mask = token_ce(logits, x)
    assert mask.sum() == 4 + 2
    torch.testing.assert_close(ce.sum() / mask.sum(), torch.log(torch.tensor(320.0)))


def policy_model(w: int) -> AUNet:
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=16,
        n_heads=2,
        n_down=1,
        n_mid=1,
        n_up=1,
        attn_window=8,
        boundary="learned",
        target_rate=0.3,
        strategy={"window": w},
    )
    model = AUNet(cfg)
    with torch.no_grad():  # spread the probabilities
        model.strategy.proj.weight.normal_(0, 6.0)
        model.strategy.proj.bias.normal_(0, 6.0)
    return model


ANCHOR = dict(gamma=1.0, lambda_pi=1.0, lambda_rate=0.0, lambda_early=0.0, early_baseline=False)


def patterns(T: int):
    """Every decision pattern over the scored positions 1..T-2 (BOS = 1, last byte = 0)."""
    for bits in itertools.product([0.0, 1.0], repeat=T - 2):
        yield torch.tensor([1.0, *bits, 0.0])


def policy_grad(model, fn) -> torch.Tensor:
    params = list(model.strategy.parameters())
    model.zero_grad()
    fn().backward()
    return torch.cat([p.grad.flatten() for p in params]).clone()


def exact_gradient(model, x) -> torch.Tensor:
    """grad of E_a[CE_mean] = sum_a pi(a) CE_mean(a), by enumerating every pattern."""

    def objective():
        total = 0.0
        for a in patterns(x.size(1)):
            out = model(x, boundaries=a.unsqueeze(0))
            ce, mask = token_ce(out.logits, x)
            p = out.boundary_log_prob[:, 1:-1].sum().exp()
            total = total + p * (ce.sum() / mask.sum())
        return total

    return policy_grad(model, objective)


def expected_estimator(model, x, baseline: str, batch: int) -> torch.Tensor:
    """E_a[grad L] of the training loss, exactly: enumerate every batch of patterns, weight by
    its probability (batch = 1 or 2 copies of x)."""
    cfg = ObjectiveConfig(batch_baseline=baseline, **ANCHOR)
    pats = list(patterns(x.size(1)))
    xs = x.expand(batch, -1)

    def estimator():
        total = 0.0
        for combo in itertools.product(pats, repeat=batch):
            a = torch.stack(combo)
            out = model(xs, boundaries=a)
            weight = out.boundary_log_prob[:, 1:-1].sum().exp().detach()
            total = total + weight * loss(out, xs, cfg)[0]
        return total

    return policy_grad(model, estimator)


@pytest.mark.parametrize("w", [1, 3])
def test_estimator_exact_in_expectation(w):
    """docs/design.md §4 anchor: gamma = 1, no early baseline, lambda_pi = 1: the training loss's gradient
    on the policy's parameters equals the exact gradient of E_a[CE_mean] in expectation, for no
    batch baseline (B = 1) and the leave-one-out baseline (B = 2), on a 5-byte text."""
    model = policy_model(w)
    x = encode("to be").unsqueeze(0)  # T = 6: 4 scored decisions
    exact = exact_gradient(model, x)
    assert exact.abs().max() > 1e-4  # a real signal to match
    torch.testing.assert_close(expected_estimator(model, x, "none", 1), exact, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(expected_estimator(model, x, "loo", 2), exact, rtol=1e-4, atol=1e-6)


def test_mean_baseline_is_biased_and_discounting_changes_estimate():
    """The anchor can fail: the paper's `mean` baseline at B = 2 is off by O(1/B)."""
    model = policy_model(3)
    x = encode("to be").unsqueeze(0)
    exact = exact_gradient(model, x)
    biased = expected_estimator(model, x, "mean", 2)
    assert (biased - exact).abs().max() > 1e-3 * exact.abs().max()


def test_monte_carlo_matches_exact():
    """The sampled path (scan sampler + parallel log-probs) averages to the exact gradient."""
    model = policy_model(3)
    x = encode("to be").unsqueeze(0)
    exact = exact_gradient(model, x)
    cfg = ObjectiveConfig(batch_baseline="loo", **ANCHOR)
    torch.manual_seed(0)
    xs = x.expand(512, -1)
    grads = torch.stack([policy_grad(model, lambda: loss(model(xs), xs, cfg)[0]) for _ in range(8)])
    est = grads.mean(0)
    cos = torch.nn.functional.cosine_similarity(est, exact, dim=0)
    assert cos > 0.95, f"cosine {cos:.3f}"
    assert (est.norm() / exact.norm() - 1).abs() < 0.2


def test_loss_metrics_present():
    model = policy_model(8)
    x = torch.stack([encode("hello there, friend")] * 2)
    total, metrics = loss(model(x), x, ObjectiveConfig())
    assert torch.isfinite(total)
    for key in ("ce", "ce_early", "bpb", "bpb_early", "boundary_rate", "whitespace_rate"):
        assert key in metrics


def test_early_mix_is_the_authors_convex_combination():
    torch.manual_seed(0)
    model = AUNet(ModelConfig(d_model=32, n_heads=2, n_down=1, n_mid=1, n_up=1, boundary="fixed"))
    x = encode("the cat sat on the mat").unsqueeze(0)
    out = model(x)
    cfg = ObjectiveConfig(lambda_pi=0.0, lambda_rate=0.0, lambda_early=0.1)
    _, m = loss(out, x, cfg)
    mixed, _ = loss(out, x, ObjectiveConfig(lambda_pi=0.0, lambda_rate=0.0, lambda_early=0.1, early_mix=True))
    assert float(mixed.detach()) == pytest.approx(0.9 * float(m["ce"]) + 0.1 * float(m["ce_early"]), rel=1e-6)


def test_early_exit_weight_per_strategy():
    """early_for = "policy" (the paper presets): strategies without a policy train at an early-exit
    weight of 0, as the authors' baselines do; the learned policy keeps lambda_early."""
    from learntok.model.objective import ObjectiveConfig, objective_for

    cfg = ObjectiveConfig(lambda_early=0.1, early_for="policy")
    assert objective_for(cfg, has_policy=True).lambda_early == 0.1
    assert objective_for(cfg, has_policy=False).lambda_early == 0.0
    assert objective_for(ObjectiveConfig(lambda_early=0.1), has_policy=False).lambda_early == 0.1
    with pytest.raises(ValueError):
        ObjectiveConfig(early_for="baselines")
