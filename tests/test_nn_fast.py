"""The byte levels' CPU fast paths against their plain references: the rotation (RoPE), RMSNorm
and blocked local attention, values and gradients, and a whole training step with them."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
import torch.nn.functional as F

from learntok.nn import layers
from learntok.nn.layers import (
    RMSNorm,
    apply_rope,
    apply_rope_reference,
    local_attention,
    rms_norm_reference,
    rope_angles,
    window_mask,
)
from learntok.model.objective import ObjectiveConfig, loss

from conftest import tiny_model


def grads(fn, *inputs, seed: int = 0):
    """fn(*inputs) and the gradients of a fixed random projection of it with respect to every input."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    y = fn(*leaves)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed))
    return y, torch.autograd.grad(y, leaves, g)


@pytest.mark.parametrize("packed", [False, True])
def test_rotation_is_bitwise_the_reference(packed):
    """On a strided q (a view of the QKV projection, as split_heads gives it), at byte positions
    (L,) or at packed tokens' offsets (1, N): the same values and gradients, bit for bit."""
    B, L, H, E = 2, 40, 3, 8
    qkv = torch.randn(B, L, 3 * H * E)
    pos = torch.randint(0, 500, (1, L)) if packed else torch.arange(L)
    cos, sin = rope_angles(pos, E, 10000.0)

    def rotated(fn):
        return lambda t: fn(t.view(B, L, 3, H, E).permute(2, 0, 3, 1, 4)[1], cos, sin)

    y_ref, g_ref = grads(rotated(apply_rope_reference), qkv)
    y, g = grads(rotated(apply_rope), qkv)
    assert torch.equal(y, y_ref)
    assert torch.equal(g[0], g_ref[0])


def test_rotation_keeps_the_plain_form_off_fp32():
    x = torch.randn(1, 2, 6, 8).bfloat16()
    cos, sin = rope_angles(torch.arange(6), 8, 10000.0)
    assert torch.equal(apply_rope(x, cos, sin), apply_rope_reference(x, cos, sin))


def test_rms_norm_matches_the_reference():
    """Forward bit for bit; the input's and the weight's gradients to float rounding."""
    norm = RMSNorm(24)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = 3 * torch.randn(4, 7, 24)
    y_ref, g_ref = grads(lambda t, w: rms_norm_reference(t, w, norm.eps), x, norm.weight)
    y, g = grads(lambda t, w: layers._RMSNormFunction.apply(t, w, norm.eps), x, norm.weight)
    assert torch.equal(norm(x), rms_norm_reference(x, norm.weight, norm.eps))
    assert torch.equal(y, y_ref)
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("L, window", [(130, 16), (128, 16), (33, 16), (200, 64)])
def test_local_attention_gradients_match_dense_window_mask(L, window):
    def dense(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(L, window, q.device))

    q, k, v = torch.randn(3, 2, 3, L, 8, generator=torch.Generator().manual_seed(L)).unbind(0)
    y_ref, g_ref = grads(dense, q, k, v)
    y, g = grads(lambda *t: local_attention(*t, window), q, k, v)
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("boundary", ["learned", "uniform"])
def test_training_step_matches_the_plain_forms(boundary):
    """The loss and every parameter's gradient of one step with the fast paths equal those with
    the plain references swapped in (same boundaries: the draws are seeded alike)."""
    x = torch.randint(0, 256, (3, 150))
    x[:, 0] = 256

    def step(model):
        torch.manual_seed(1)
        total, _ = loss(model(x), x, ObjectiveConfig())
        total.backward()
        return total.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    fast = step(tiny_model(boundary, attn_window=32))
    plain_norm = lambda self, t: rms_norm_reference(t, self.weight, self.eps)  # noqa: E731
    with (
        mock.patch.object(layers, "apply_rope", apply_rope_reference),
        mock.patch.object(RMSNorm, "forward", plain_norm),
    ):
        plain = step(tiny_model(boundary, attn_window=32))
    torch.testing.assert_close(fast[0], plain[0], atol=1e-6, rtol=1e-6)
    assert fast[1].keys() == plain[1].keys()
    for name in fast[1]:
        torch.testing.assert_close(fast[1][name], plain[1][name], atol=1e-5, rtol=1e-4, msg=name)
