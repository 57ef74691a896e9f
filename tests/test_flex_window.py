"""The byte levels' sliding-window attention through FlexAttention (the fused path on CUDA),
against the plain path (SDPA with the dense window mask), on the CPU through the same function:
outputs, and on CUDA gradients too (FlexAttention has no backward on the CPU); on CUDA the compiled
kernel is checked the same way (scripts/gpu_check.sh runs the CUDA tests)."""

import pytest
import torch
import torch.nn.functional as F

from learntok.nn import layers
from learntok.nn.layers import Attention, flex_window_attention, window_mask

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.filterwarnings("ignore::UserWarning")  # FlexAttention's eager form warns that it is unfused
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("L", "window"), [(64, 8), (100, 7), (128, 128), (130, 16)])
def test_flex_window_attention_equals_the_plain_path(device, L, window):
    torch.manual_seed(0)
    grad = device == "cuda"
    q, k, v = (torch.randn(2, 3, L, 16, device=device, requires_grad=grad) for _ in range(3))
    y = flex_window_attention(q, k, v, window, compiled=device == "cuda")
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(L, window, q.device))
    torch.testing.assert_close(y, ref, atol=2e-5, rtol=2e-5)
    if not grad:
        return
    g = torch.randn_like(y)
    grads = torch.autograd.grad(y, (q, k, v), g)
    ref_grads = torch.autograd.grad(ref, (q, k, v), g)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_attention_takes_the_fused_path_where_it_is_available(monkeypatch):
    """`Attention.attend` sends a windowed layer to FlexAttention where `flex_available` says so
    (CUDA), with the same result as the CPU's blocked path."""
    torch.manual_seed(0)
    attn = Attention(32, 2, window=8, rope_base=10000.0)
    x, pos = torch.randn(2, 40, 32), torch.arange(40)[None].expand(2, 40)
    plain = attn(x, pos)
    calls = []

    def eager_flex(q, k, v, window, compiled=True):
        calls.append(window)
        return flex_window_attention(q, k, v, window, compiled=False)

    monkeypatch.setattr(layers, "flex_available", lambda t: True)
    monkeypatch.setattr(layers, "flex_window_attention", eager_flex)
    with torch.no_grad():  # FlexAttention's eager form has no backward on the CPU
        torch.testing.assert_close(attn(x, pos), plain, atol=1e-5, rtol=1e-5)
    assert calls == [8]
