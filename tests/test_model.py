"""Model: API shapes, causality, fast paths against plain references."""

from __future__ import annotations

import pytest
import torch

from learntok.boundaries.learned import (
    _loop_scan,
    _map_scan,
    bernoulli_log_prob,
    policy_logits,
    sample_reference,
    sample_scan,
)
from learntok.boundaries.rate import RateControl
from learntok.data import BOS, encode
from learntok.nn.pooling import downsample, downsample_reference, upsample, upsample_reference

from conftest import shakespeare, tiny_model


def test_api_shapes():
    model = tiny_model()
    x = torch.stack([encode("hello world, hello"), encode("abcdefghijklmnopq!")])
    out = model(x)
    B, T = x.shape
    assert out.logits.shape == (B, T, model.cfg.vocab_size) == out.early_logits.shape
    for field in (out.boundaries, out.boundary_logits, out.boundary_probs, out.boundary_log_prob):
        assert field.shape == (B, T)
    assert torch.all(out.boundaries[:, 0] == 1) and torch.all(out.boundary_log_prob[:, 0] == 0)
    assert set(out.boundaries.unique().tolist()) <= {0.0, 1.0}
    assert model.cfg.vocab_size % 64 == 0


def test_prescribed_boundaries_used_and_scored():
    model = tiny_model()
    x = encode("the cat sat on the mat").unsqueeze(0)
    a = torch.zeros_like(x, dtype=torch.float)
    a[:, ::3] = 1
    out = model(x, boundaries=a)
    assert torch.equal(out.boundaries, a)
    expected = torch.distributions.Bernoulli(logits=out.boundary_logits).log_prob(a)
    torch.testing.assert_close(out.boundary_log_prob[:, 1:], expected[:, 1:])


@pytest.mark.parametrize("w", [1, 8])
@pytest.mark.parametrize("boundary", ["learned", "learned-online", "learned-conditioned", "uniform", "fixed"])
@pytest.mark.parametrize("train_mode", [True, False])
def test_causality(w, boundary, train_mode):
    """Outputs and decisions at positions <= t never change when a byte after t changes, for
    sampled boundaries (same random draws) and prescribed ones, on real text longer than the
    window; `learned-online`: the learned policy under online rate control, `learned-conditioned`
    rate-conditioned (a target drawn per group of rows in training; docs/rate.md)."""
    model = tiny_model(boundary.partition("-")[0], window=w, rate_conditioned=boundary.endswith("-conditioned"))
    model.train(train_mode)
    if boundary.endswith("-online"):
        model.strategy.set_rate_control(RateControl(0.3))
    text = shakespeare(80)
    x = encode(text).unsqueeze(0)
    T = x.size(1)
    for t in (20, 47, T - 3):
        y = x.clone()
        y[0, t + 1 :] = torch.randint(0, 256, (T - t - 1,), generator=torch.Generator().manual_seed(t))
        torch.manual_seed(123)
        o1 = model(x)
        torch.manual_seed(123)
        o2 = model(y)
        sl = slice(0, t + 1)
        assert torch.equal(o1.boundaries[:, sl], o2.boundaries[:, sl])
        torch.testing.assert_close(o1.logits[:, sl], o2.logits[:, sl], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(o1.early_logits[:, sl], o2.early_logits[:, sl], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(o1.boundary_logits[:, sl], o2.boundary_logits[:, sl], atol=1e-5, rtol=1e-5)
        # prescribed: the same decisions everywhere (and the same draws: a conditioned row's target)
        torch.manual_seed(7)
        p1 = model(x, boundaries=o1.boundaries)
        torch.manual_seed(7)
        p2 = model(y, boundaries=o1.boundaries)
        torch.testing.assert_close(p1.logits[:, sl], p2.logits[:, sl], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(p1.boundary_log_prob[:, sl], p2.boundary_log_prob[:, sl], atol=1e-5, rtol=1e-5)


def test_changing_a_later_byte_changes_later_outputs():
    """Guard against a causality test that passes because nothing depends on the input."""
    model = tiny_model("fixed")
    x = encode(shakespeare(40)).unsqueeze(0)
    y = x.clone()
    y[0, 30] = (y[0, 30] + 1) % 256
    assert not torch.allclose(model(x).logits[:, 30:], model(y).logits[:, 30:])


@pytest.mark.parametrize("w", [1, 2, 8])
def test_sample_scan_matches_loop(w):
    g = torch.Generator().manual_seed(w)
    v = torch.randn(3, 40, w, generator=g) * 20
    u = torch.rand(3, 40, generator=g).clamp(1e-6, 1 - 1e-6)
    fast = sample_scan(v, u, 1 / 16, -1.386, 6.0)
    ref = sample_reference(v, u, 1 / 16, -1.386, 6.0)
    assert torch.equal(fast, ref)
    # the parallel recomputation agrees with the decisions: a_t = 1 iff logit(u_t) < l_t
    logits = policy_logits(v, fast, 1 / 16, -1.386, 6.0)
    assert torch.equal((torch.logit(u[:, 1:]) < logits[:, 1:]).float(), fast[:, 1:])


@pytest.mark.parametrize("w", [2, 5, 8])
def test_map_scan_and_loop_scan_agree(w):
    g = torch.Generator().manual_seed(10 + w)
    v = torch.randn(4, 70, w, generator=g) * 40
    thr = torch.logit(torch.rand(4, 70, generator=g).clamp(1e-6, 1 - 1e-6))
    assert torch.equal(_map_scan(v, thr, 1 / 16, -1.386, 6.0), _loop_scan(v, thr, 1 / 16, -1.386, 6.0))


def test_sampled_rate_matches_probability():
    v = torch.zeros(64, 500, 4)
    a = sample_scan(v, torch.rand(64, 500), 1 / 16, torch.logit(torch.tensor(0.2)).item(), 6.0)
    assert abs(a[:, 1:].mean().item() - 0.2) < 0.01


def test_log_prob_matches_bernoulli():
    logits = torch.randn(4, 30) * 3
    a = torch.bernoulli(torch.sigmoid(logits))
    ref = torch.distributions.Bernoulli(logits=logits).log_prob(a)
    torch.testing.assert_close(bernoulli_log_prob(logits, a), ref)


def test_pooling_matches_naive_gather():
    g = torch.Generator().manual_seed(0)
    B, T, D = 3, 25, 5
    h = torch.randn(B, T, D, generator=g)
    a = (torch.rand(B, T, generator=g) < 0.3).float()
    a[:, 0] = 1
    S = int(a.sum(1).max()) + 2  # extra padding slots
    z, pos, valid = downsample(h, a, S)
    z_ref, pos_ref = downsample_reference(h, a, S)
    torch.testing.assert_close(z, z_ref)
    assert torch.equal(pos, pos_ref)
    assert torch.equal(valid.sum(1), a.sum(1).long())
    zz = torch.randn(B, S, D, generator=g)
    torch.testing.assert_close(upsample(zz, a), upsample_reference(zz, a))


def test_token_positions_are_integer_byte_offsets():
    x = torch.full((1, 600), 97)
    x[0, 0] = BOS
    a = torch.zeros(1, 600)
    a[0, [0, 257, 513, 599]] = 1
    _, pos, _ = downsample(torch.zeros(1, 600, 4), a, 4)
    assert pos.dtype == torch.long and pos.tolist() == [[0, 257, 513, 599]]


def test_gradients_reach_policy_and_backbone():
    from learntok import ObjectiveConfig
    from learntok.model.objective import loss

    model = tiny_model()
    x = torch.stack([encode(shakespeare(48))] * 4)
    total, _ = loss(model(x), x, ObjectiveConfig(lambda_pi=1.0))
    total.backward()
    assert model.strategy.proj.weight.grad.abs().sum() > 0
    assert model.encoder.blocks[0].attn.qkv.weight.grad.abs().sum() > 0


def test_rate_controller_holds_the_target_rate():
    """Integral control (objective.rate_gain) moves a policy that fires at ~0.45 to rho* = 0.2."""
    model = tiny_model("learned", window=8)
    with torch.no_grad():
        model.strategy.proj.bias[-1] = 25.0  # current-byte term: s * 25 ~ +1.5 logits, rate ~ 0.45
    x = torch.full((64, 100), 97)
    x[:, 0] = BOS
    torch.manual_seed(0)
    first = model(x).boundaries[:, 1:].mean().item()
    for _ in range(60):
        with torch.no_grad():
            out = model(x)
        model.strategy.adapt_rate(out.boundaries[:, 1:].mean(), gain=1.0)
    rates = [model(x).boundaries[:, 1:].mean().item() for _ in range(20)]
    assert first > 0.35 and abs(sum(rates) / 20 - 0.2) < 0.01
    model.strategy.adapt_rate(torch.tensor(0.9), gain=0.0)  # gain 0: off
    assert abs(sum(model(x).boundaries[:, 1:].mean().item() for _ in range(20)) / 20 - 0.2) < 0.01


@pytest.mark.parametrize("L, window", [(130, 16), (128, 16), (64, 8), (33, 16), (200, 64)])
def test_local_attention_matches_dense_window_mask(L, window):
    from learntok.nn.layers import local_attention, window_mask

    g = torch.Generator().manual_seed(L + window)
    q, k, v = (torch.randn(2, 3, L, 8, generator=g) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(L, window, q.device))
    torch.testing.assert_close(local_attention(q, k, v, window), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("L, window, chunk", [(50, 4, 8), (64, 8, 16), (37, 5, 12), (20, 8, 4)])
def test_local_attention_in_pieces_matches_one_piece(L, window, chunk):
    """Long sequences (a long prompt's prefill) go through local_attention in pieces of about
    `chunk` queries: the same result as the dense window mask."""
    from learntok.nn.layers import local_attention, window_mask

    q, k, v = torch.randn(3, 2, 3, L, 8).unbind(0)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(L, window, q.device))
    torch.testing.assert_close(local_attention(q, k, v, window, chunk=chunk), ref, atol=1e-5, rtol=1e-5)
