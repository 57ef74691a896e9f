"""Transformer pieces: RMSNorm, rotary embeddings on integer positions, attention, gated MLP.

A stack runs on (B, L, D) rows, or, at the token level, on the packed tokens of every row
(N, D) with a `Packing` (learntok.nn.pooling) that says which slots belong to which row:
the linear layers then see only real tokens, and attention stays within each row.

Shapes: B batch, L sequence (bytes or tokens), N packed tokens, D width, H heads, E head size.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.utils.checkpoint
import torch.nn.functional as F
from torch import nn


def eager_cpu_fp32(x: torch.Tensor) -> bool:
    """Where the hand-written backward passes below run: fp32 on the CPU, outside torch.compile
    (which fuses the plain forms itself; CUDA has fused kernels for them)."""
    return x.device.type == "cpu" and x.dtype == torch.float32 and not torch.compiler.is_compiling()


class _RMSNormFunction(torch.autograd.Function):
    """y = x / rms(x) * w with its backward in four passes (autograd of F.rms_norm takes about
    1.3x longer on the CPU). Forward bitwise equal to F.rms_norm; gradients to float rounding."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)  # (..., 1)
        xh = x * rstd
        ctx.save_for_backward(xh, rstd, weight)
        return xh * weight

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        xh, rstd, weight = ctx.saved_tensors
        gw = g * weight
        gx = (gw - xh * (gw * xh).mean(-1, keepdim=True)) * rstd
        return gx, (g * xh).flatten(0, -2).sum(0), None


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if eager_cpu_fp32(x) and self.weight.dtype == torch.float32:
            return _RMSNormFunction.apply(x, self.weight, self.eps)
        return rms_norm_reference(x, self.weight, self.eps)


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The plain form of `RMSNorm`: reduce in fp32 (docs/design.md §2), return in the input dtype."""
    return F.rms_norm(x.float(), (x.size(-1),), weight.float(), eps).to(x.dtype)


def rope_angles(pos: torch.Tensor, head_size: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (B, 1, L, E/2) in fp32 from integer positions pos (B, L) or (L,).
    Positions stay integers until here: bf16 would round byte offsets above 256."""
    inv = 1.0 / (base ** (torch.arange(0, head_size, 2, device=pos.device, dtype=torch.float32) / head_size))
    ang = pos.to(torch.float32).unsqueeze(-1) * inv  # (B, L, E/2) or (L, E/2)
    if ang.dim() == 2:
        ang = ang.unsqueeze(0)
    return ang.cos().unsqueeze(1), ang.sin().unsqueeze(1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, L, E); rotate pairs (first half, second half). On the CPU in fp32 the rotation
    writes its halves in place of a concatenation, and its backward is the inverse rotation
    (1.6x less time forward + backward on a strided q or k); bitwise equal to
    `apply_rope_reference`, values and gradients (tested)."""
    if eager_cpu_fp32(x):
        return _Rotation.apply(x, cos, sin)
    return apply_rope_reference(x, cos, sin)


def apply_rope_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The plain form of `apply_rope`."""
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool) -> torch.Tensor:
    """[x1 cos - x2 sin, x1 sin + x2 cos] into a new contiguous tensor; inverse: sin -> -sin.
    The same products and sums, in the same order, as `apply_rope_reference` and its autograd."""
    x1, x2 = x.chunk(2, dim=-1)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    o1, o2 = out.chunk(2, dim=-1)
    torch.mul(x1, cos, out=o1)
    o1.add_(x2 * sin) if inverse else o1.sub_(x2 * sin)
    torch.mul(x2, cos, out=o2)
    o2.sub_(x1 * sin) if inverse else o2.add_(x1 * sin)
    return out


class _Rotation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        return _rotate(x, cos, sin, inverse=False)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        cos, sin = ctx.saved_tensors
        return _rotate(g, cos, sin, inverse=True), None, None


@lru_cache(maxsize=16)
def window_mask(L: int, window: int, device: torch.device) -> torch.Tensor:
    """(L, L) bool, True where query i may attend key j: 0 <= i - j < window."""
    i = torch.arange(L, device=device)
    d = i[:, None] - i[None, :]
    return (d >= 0) & (d < window)


@lru_cache(maxsize=16)
def block_window_mask(n: int, window: int, device: torch.device) -> torch.Tensor:
    """(n, W, 2W) bool for `local_attention`: in block i, query p (absolute iW + p) may attend
    key c of [block i-1, block i] (absolute (i-1)W + c) iff 0 <= W + p - c < W; block 0 has
    no previous block."""
    p = torch.arange(window, device=device)[:, None]
    c = torch.arange(2 * window, device=device)[None, :]
    d = window + p - c
    allowed = ((d >= 0) & (d < window)).expand(n, window, 2 * window).clone()
    allowed[0, :, :window] = False
    return allowed


def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, chunk: int = 4096) -> torch.Tensor:
    """Causal sliding-window attention in O(L W): cut the sequence into blocks of W; each block's
    queries attend over their own block and the previous one (every key within the window lies
    there). q, k, v (B, H, L, E) -> (B, H, L, E). Equal to SDPA with `window_mask` (tested).
    Sequences longer than `chunk` go in pieces of about `chunk` queries, each with the window of
    keys before it, so the scores held at once stay bounded whatever L (a long prompt's prefill)."""
    L = q.size(2)
    step = max(1, chunk // window) * window  # a whole number of blocks
    if L <= step:
        return _local_blocks(q, k, v, window)
    pieces = []
    for s in range(0, L, step):
        a = max(0, s - window)  # block-aligned: the previous block's keys
        part = (t[:, :, a : s + step] for t in (q, k, v))
        pieces.append(_local_blocks(*part, window)[:, :, s - a :])  # (B, H, <= step, E)
    return torch.cat(pieces, dim=2)


def _local_blocks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    B, H, L, E = q.shape
    n = -(-L // window)
    pad = n * window - L  # padded keys come after every query: masked
    q = (F.pad(q, (0, 0, 0, pad)) if pad else q).reshape(B * H, n, window, E)  # (B H, n, W, E)

    def two_blocks(t):  # (B, H, L, E) -> (B H, n, 2W, E): [block i-1 (zeros for block 0), block i]
        t = F.pad(t, (0, 0, window, pad))  # (B, H, W + n W, E), one copy
        return torch.cat([t[:, :, : n * window].view(B, H, n, window, E), t[:, :, window:].view(B, H, n, window, E)], 3)

    # 4-D with the blocks as "heads" and a (1, n, W, 2W) mask: the shapes the CPU flash kernel
    # accepts (a 5-D call falls back to the math path, 1.3-1.7x slower forward + backward)
    k2, v2 = two_blocks(k).flatten(0, 1), two_blocks(v).flatten(0, 1)  # (B H, n, 2W, E)
    y = F.scaled_dot_product_attention(q, k2, v2, attn_mask=block_window_mask(n, window, q.device)[None])
    return y.reshape(B, H, n * window, E)[:, :, :L]


def varlen_available(x: torch.Tensor) -> bool:
    """Flash varlen attention (torch.nn.attention.varlen, CUDA, 16-bit inputs only)."""
    if not x.is_cuda or x.dtype not in (torch.float16, torch.bfloat16):
        return False
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401  (torch >= 2.9)
    except ImportError:
        return False
    return True


def packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packing) -> torch.Tensor:
    """Causal attention within each row of packed tokens: q, k, v (N, H, E) -> (N, H, E).
    On CUDA in 16 bits: flash varlen attention over the packed sequence (no padding at all).
    Elsewhere: a row-blocked form, each row its own block: q, k, v are gathered into (B, H, S, E)
    with zero padding after each row's tokens (causal masking hides it) and the output is
    gathered back. Only the attention itself runs on the padding; the projections around it,
    and the MLPs (most of the token level's FLOPs), run on the N packed tokens.
    (A block-diagonal (N, N) mask over the packed sequence would cost B times more attention.)"""
    if varlen_available(q):
        from torch.nn.attention.varlen import varlen_attn

        cu = packing.cu_seqlens.to(torch.int32)  # (B+2,) the tail padding is a sequence of its own
        return varlen_attn(q, k, v, cu, cu, packing.max_len, packing.max_len, window_size=(-1, 0))
    N, H, E = q.shape
    qkv = packing.to_padded(torch.cat([q, k, v], dim=1).flatten(1))  # (B, S, 3 H E)
    q, k, v = qkv.view(*qkv.shape[:2], 3, H, E).permute(2, 0, 3, 1, 4)  # 3 x (B, H, S, E)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, S, E)
    return packing.to_packed(y.transpose(1, 2).flatten(2)).view(N, H, E)


def rows_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, kernel=None) -> torch.Tensor:
    """Causal sliding-window attention of B equal rows through flash varlen attention's window:
    the rows are B sequences of one packed batch (no padding), and the kernel skips every block
    outside the band. q, k, v (B, H, L, E) -> (B, H, L, E), equal to SDPA with `window_mask`.
    window_size is flash attention's (left, right): query i reads keys i - left .. i + right, so
    left = window - 1. `kernel` stands in for `varlen_attn` (the CPU tests give a plain one, so
    the packing and the window's convention are checked through this same function)."""
    if kernel is None:
        from torch.nn.attention.varlen import varlen_attn as kernel
    B, H, L, E = q.shape

    def pack(t):  # (B, H, L, E) -> (B L, H, E)
        return t.transpose(1, 2).reshape(B * L, H, E)

    cu = torch.arange(0, (B + 1) * L, L, device=q.device, dtype=torch.int32)  # (B+1,) row starts
    y = kernel(pack(q), pack(k), pack(v), cu, cu, L, L, window_size=(window - 1, 0))  # (B L, H, E)
    return y.view(B, L, H, E).transpose(1, 2)


class Attention(nn.Module):
    """Causal self-attention through scaled_dot_product_attention; optional sliding window."""

    def __init__(self, d: int, n_heads: int, window: int | None, rope_base: float):
        super().__init__()
        self.n_heads, self.head_size = n_heads, d // n_heads
        self.window, self.rope_base = window, rope_base
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)

    def split_heads(self, x: torch.Tensor, pos: torch.Tensor, rope=None):
        """x (B, L, D) -> rotated q, k and v, 3 x (B, H, L, E). `rope`: (cos, sin) of pos, if
        already computed (a stack computes them once for all its blocks)."""
        B, L, _ = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.n_heads, self.head_size).permute(2, 0, 3, 1, 4)  # 3 x (B, H, L, E)
        cos, sin = rope if rope is not None else rope_angles(pos, self.head_size, self.rope_base)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention of L queries over the same L positions, within the window if any.
        q, k, v (B, H, L, E) -> (B, H, L, E). Memory O(L W) with a window, never O(L^2)."""
        L = q.size(2)
        if self.window is not None and self.window < L and varlen_available(q):
            return rows_window_attention(q, k, v, self.window)  # flash with a window: O(L W), on CUDA
        if self.window is not None and 2 * self.window < L:
            return local_attention(q, k, v, self.window)  # O(L W), not O(L^2)
        if self.window is not None and self.window < L:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(L, self.window, q.device))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, rope=None, packing=None) -> torch.Tensor:
        """x (B, L, D), or (N, D) packed tokens with their `packing` (full causal attention within rows)."""
        if packing is not None:
            N, D = x.shape
            q, k, v = self.split_heads(x[None], pos, rope)  # 3 x (1, H, N, E)
            y = packed_attention(*(t[0].transpose(0, 1) for t in (q, k, v)), packing)  # (N, H, E)
            return self.proj(y.reshape(N, D))  # (N, D)
        B, L, D = x.shape
        y = self.attend(*self.split_heads(x, pos, rope))
        return self.proj(y.transpose(1, 2).reshape(B, L, D))  # (B, L, D)

    def forward_cached(self, x: torch.Tensor, pos: torch.Tensor, cache) -> torch.Tensor:
        """Attention of L new positions over a KV cache (learntok.nn.cache): `cache.update`
        stores the new rotated keys and returns what to attend over, with a mask (None: every
        key). A prefill (L > 1, into an empty cache) attends over its own L positions exactly
        as training does (`attend`), so its memory is linear in the prompt length."""
        B, L, D = x.shape
        q, k, v = self.split_heads(x, pos)
        k, v, mask = cache.update(k, v)
        y = self.attend(q, k, v) if L > 1 else F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(B, L, D))  # (B, L, D)


class GatedMLP(nn.Module):
    """SwiGLU: W2 (silu(W1 x) * W3 x)."""

    def __init__(self, d: int, ratio: float):
        super().__init__()
        hidden = max(8, int(round(ratio * d)))
        self.up = nn.Linear(d, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, val = self.up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * val)


class Block(nn.Module):
    """Pre-norm transformer block."""

    def __init__(self, d: int, n_heads: int, mlp_ratio: float, window: int | None, rope_base: float):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.attn = Attention(d, n_heads, window, rope_base)
        self.mlp = GatedMLP(d, mlp_ratio)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, rope=None, packing=None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), pos, rope, packing)
        return x + self.mlp(self.norm2(x))

    def forward_cached(self, x: torch.Tensor, pos: torch.Tensor, cache) -> torch.Tensor:
        x = x + self.attn.forward_cached(self.norm1(x), pos, cache)
        return x + self.mlp(self.norm2(x))


class Stack(nn.Module):
    """n blocks of one level (byte level with a window, or token level with full attention).
    With `d_io` other than d, the stack reads and returns vectors of width d_io: a projection
    d_io -> d before the blocks and d -> d_io after them (a token level wider than the bytes)."""

    def __init__(
        self,
        n: int,
        d: int,
        n_heads: int,
        mlp_ratio: float,
        window: int | None,
        rope_base: float,
        d_io: int | None = None,
    ):
        super().__init__()
        self.head_size, self.rope_base = d // n_heads, rope_base
        self.blocks = nn.ModuleList(Block(d, n_heads, mlp_ratio, window, rope_base) for _ in range(n))
        wide = d_io is not None and d_io != d
        self.inp = nn.Linear(d_io, d, bias=False) if wide else nn.Identity()
        self.out = nn.Linear(d, d_io, bias=False) if wide else nn.Identity()
        # gradient checkpointing: each block's activations recomputed in the backward instead of
        # kept (AUNet.set_gradient_checkpointing; `train.grad_checkpoint`); same loss and gradients
        self.checkpointing = False

    def forward(self, x: torch.Tensor, pos: torch.Tensor, packing=None) -> torch.Tensor:
        """x (B, L, D) with positions pos (L,) or (B, L); or packed tokens x (N, D) with pos (N,)
        and their `packing`. RoPE angles are computed once here for every block."""
        rope = rope_angles(pos, self.head_size, self.rope_base)
        x = self.inp(x)
        recompute = self.checkpointing and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            if recompute:
                x = torch.utils.checkpoint.checkpoint(block, x, pos, rope, packing, use_reentrant=False)
            else:
                x = block(x, pos, rope, packing)
        return self.out(x)

    def forward_cached(self, x: torch.Tensor, pos: torch.Tensor, caches: list) -> torch.Tensor:
        """Incremental forward: one KV cache per block (generation)."""
        x = self.inp(x)
        for block, cache in zip(self.blocks, caches, strict=True):
            x = block.forward_cached(x, pos, cache)
        return self.out(x)
