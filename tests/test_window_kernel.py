"""The byte levels' sliding-window attention through flash varlen attention's window (the fused
path on CUDA in 16 bits), against the plain path (SDPA with the dense window mask). On the CPU a
plain stand-in for the kernel (each sequence of the packed batch attended alone, with flash
attention's window convention) checks the packing and the window through the same function; on
CUDA the real kernel is checked the same way (scripts/gpu_check.sh runs the CUDA tests)."""

import pytest
import torch
import torch.nn.functional as F

from learntok.nn import layers
from learntok.nn.layers import Attention, rows_window_attention, varlen_available, window_mask


def plain_varlen(q, k, v, cu_q, cu_k, max_q, max_k, window_size=(-1, -1)):
    """varlen_attn's semantics, plainly: each packed sequence alone; query i reads keys
    i - left .. i + right of its sequence (-1: unbounded)."""
    left, right = window_size
    out = torch.empty_like(q)
    for a, b in zip(cu_q[:-1].tolist(), cu_q[1:].tolist()):
        i = torch.arange(b - a)
        d = i[:, None] - i[None, :]  # query - key
        allowed = torch.ones_like(d, dtype=torch.bool)
        if left >= 0:
            allowed &= d <= left
        if right >= 0:
            allowed &= -d <= right
        qs, ks, vs = (t[a:b].transpose(0, 1) for t in (q, k, v))  # (H, n, E)
        out[a:b] = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=allowed).transpose(0, 1)
    return out


@pytest.mark.parametrize(("L", "window"), [(64, 8), (100, 7), (128, 128), (130, 16), (9, 1)])
def test_rows_window_attention_equals_the_plain_path(L, window):
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, L, 16) for _ in range(3))
    y = rows_window_attention(q, k, v, window, kernel=plain_varlen)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(L, window, q.device))
    torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the flash kernel needs CUDA")
@pytest.mark.parametrize(("L", "window"), [(1024, 64), (1000, 63)])
def test_the_flash_window_kernel_equals_the_plain_path_on_cuda(L, window):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, L, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    assert varlen_available(q)
    y = rows_window_attention(q, k, v, window)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(L, window, q.device))
    torch.testing.assert_close(y, ref, atol=2e-2, rtol=2e-2)
    g = torch.randn_like(y)
    for a, b in zip(torch.autograd.grad(y, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, b, atol=5e-2, rtol=5e-2)


def test_attention_takes_the_fused_path_where_it_is_available(monkeypatch):
    """`Attention.attend` sends a windowed layer to the flash window where `varlen_available`
    says so (CUDA, 16 bits), with the same result as the CPU's blocked path."""
    torch.manual_seed(0)
    attn = Attention(32, 2, window=8, rope_base=10000.0)
    x, pos = torch.randn(2, 40, 32), torch.arange(40)[None].expand(2, 40)
    plain = attn(x, pos)
    calls = []

    def stand_in(q, k, v, window):
        calls.append(window)
        return rows_window_attention(q, k, v, window, kernel=plain_varlen)

    monkeypatch.setattr(layers, "varlen_available", lambda t: True)
    monkeypatch.setattr(layers, "rows_window_attention", stand_in)
    torch.testing.assert_close(attn(x, pos), plain, atol=1e-5, rtol=1e-5)
    assert calls == [8]
