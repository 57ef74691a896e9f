"""Token packing: the token level on packed rows equals the padded reference, for every strategy,
outputs and gradients (fp32, 1e-5)."""

from __future__ import annotations

import copy
from unittest import mock

import pytest
import torch

from learntok import AUNet, ObjectiveConfig
from learntok.boundaries.base import strategy_names
from learntok.model.aunet import token_level_padded
from learntok.nn.layers import packed_attention
from learntok.nn.pooling import downsample, pack_rows
from learntok.model.objective import loss

from conftest import tiny_config

ATOL = RTOL = 1e-5


def rand_decisions(B: int, T: int, rate: float, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a = (torch.rand(B, T, generator=g) < rate).float()
    a[:, 0] = 1.0
    return a


@pytest.mark.parametrize("multiple", [1, 8])
def test_packing_maps_match_downsample(multiple):
    B, T, D = 5, 40, 3
    a = rand_decisions(B, T, 0.3)
    a[2, 1:] = 0.0  # a row with BOS only
    h = torch.randn(B, T, D)
    p = pack_rows(a, multiple)
    S = p.padded_index.size(1)
    z_ref, pos_ref, valid = downsample(h, a, S)
    N = p.pos.numel()
    total = int(a.sum())
    assert N % multiple == 0 and S % multiple == 0 and total <= N < total + multiple
    torch.testing.assert_close(p.to_padded(p.pack(h)), z_ref, rtol=0, atol=0)
    assert torch.equal(p.padded_pos(), pos_ref)
    assert torch.equal(p.to_padded(p.pos[:, None])[..., 0][valid], pos_ref[valid])
    # round trip packed -> padded -> packed keeps the real tokens, zeros at the tail padding
    z = p.pack(h)
    back = p.to_packed(p.to_padded(z))
    torch.testing.assert_close(back[:total], z[:total], rtol=0, atol=0)
    assert torch.all(back[total:] == 0)
    assert p.cu_seqlens.tolist() == [0, *a.sum(1).long().cumsum(0).tolist(), N]


def test_packed_attention_equals_per_row_causal_attention():
    B, T, H, E = 3, 30, 2, 4
    a = rand_decisions(B, T, 0.4, seed=1)
    p = pack_rows(a, 4)
    N = p.pos.numel()
    q, k, v = (torch.randn(N, H, E, requires_grad=True) for _ in range(3))
    y = packed_attention(q, k, v, p)
    counts, start = a.sum(1).long().tolist(), 0
    for n in counts:  # plain reference: each row alone
        sl = slice(start, start + n)
        ref = torch.nn.functional.scaled_dot_product_attention(
            *(t[sl].transpose(0, 1) for t in (q, k, v)), is_causal=True
        ).transpose(0, 1)
        torch.testing.assert_close(y[sl], ref, rtol=RTOL, atol=ATOL)
        start += n


def model_for(name: str, d_bytes: int = 0) -> AUNet:
    torch.manual_seed(0)
    cfg = tiny_config(name, window=4, n_mid=2, attn_window=8, target_rate=0.25, d_bytes=d_bytes)
    model = AUNet(cfg)
    if name.startswith("bpe"):
        model.strategy.fit([b"the cat sat on the mat and the dog ate the hat " * 20])
    if name == "entropy":  # set its threshold (0 before: all bytes)
        with torch.no_grad():
            model(batch())
    return model


def batch() -> torch.Tensor:
    text = [
        b"To be, or not to be, that is the question: whether 'tis nob",
        b"ler in the mind to suffer the slings and arrows of outrageou",
        b"s fortune, or to take arms against a sea of troubles, and b",
    ]
    x = torch.tensor([[256] + list(t[:59]) for t in text])
    x[2, -5:] = 258  # PAD at the end of one row
    return x


def step(model: AUNet, x: torch.Tensor, seed: int):
    """Forward, loss and gradients of a step under a fixed seed (same sampled decisions)."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model(x)
    total, _ = loss(out, x, ObjectiveConfig())
    total.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out, total, grads


@pytest.mark.parametrize("d_bytes", [0, 16], ids=["one width", "narrow bytes"])
@pytest.mark.parametrize("name", strategy_names())
def test_packed_model_equals_padded_reference(name, d_bytes):
    model = model_for(name, d_bytes)
    x = batch()
    state = copy.deepcopy(model.state_dict())  # `entropy` moves its threshold in training
    out, total, grads = step(model, x, seed=3)
    model.load_state_dict(state)
    with mock.patch.object(AUNet, "token_level", token_level_padded):
        out_ref, total_ref, grads_ref = step(model, x, seed=3)
    assert torch.equal(out.boundaries, out_ref.boundaries)
    assert out.boundaries.sum(1).std() > 0 or name in ("uniform", "fixed")  # rows differ in count
    torch.testing.assert_close(out.logits, out_ref.logits, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(total, total_ref, rtol=RTOL, atol=ATOL)
    assert grads.keys() == grads_ref.keys() and any(n.startswith("mid.") for n in grads)
    for n in grads:
        torch.testing.assert_close(grads[n], grads_ref[n], rtol=RTOL, atol=ATOL, msg=n)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="varlen attention runs on CUDA only")
def test_varlen_attention_matches_row_blocked_on_cuda():
    B, T, H, E = 4, 200, 4, 64
    a = rand_decisions(B, T, 0.2, seed=2).cuda()
    p = pack_rows(a, 8)
    N = p.pos.numel()
    q, k, v = (torch.randn(N, H, E, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    y = packed_attention(q, k, v, p)  # varlen (bf16 on CUDA)
    ref = packed_attention(q.float(), k.float(), v.float(), p)  # row-blocked SDPA (fp32)
    total = int(a.sum())
    torch.testing.assert_close(y[:total].float(), ref[:total], rtol=2e-2, atol=2e-2)
