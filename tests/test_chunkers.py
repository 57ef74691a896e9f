"""Chunkers (learntok.nn.chunkers): every chunker's full-sequence form and its cached steps
against a plain byte-by-byte reference, and the strategy interface without pooling hooks."""

from __future__ import annotations

import pytest
import torch

from learntok.boundaries import strategy_names
from learntok.boundaries.base import BoundaryStrategy, strategy_class
from learntok.nn.chunkers import CHUNKERS, build_chunker

from conftest import tiny_model

B, T, D = 3, 40, 6


def inputs(seed: int) -> tuple[torch.Tensor, ...]:
    """h (B, T, D), decisions a (B, T) (a[:, 0] = 1), probs and relaxed decisions (B, T), and the
    token level's weight W (D, D), in float32 (the mean chunker sums in fp32)."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, T, D, generator=g)
    a = (torch.rand(B, T, generator=g) < 0.3).float()
    a[:, 0] = a[:, 20] = 1  # byte 20: a token in every row at once
    a[2, 25:] = 0  # a long trailing segment
    a[1, 30:] = 1  # every byte a token
    probs = torch.rand(B, T, generator=g)
    relaxed = torch.rand(B, T, generator=g)
    W = torch.randn(D, D, generator=g)
    return h, a, probs, relaxed, W


def token_level(z: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """A stand-in for the mid blocks that reads each token alone (zeros stay zeros)."""
    return torch.tanh(z @ W)


def reference(name: str, h, a, probs, W) -> torch.Tensor:
    """Plain loops: what byte t reads (B, T, D), before the skip. A token is its boundary byte's
    vector (select, ema) or its segment's mean (mean); ema mixes each token with the row's
    previous one at its boundary byte's clamped p (the confidence factor is 1 forward)."""
    y = torch.zeros_like(h)
    for b in range(B):
        start, current = 0, torch.zeros(D, dtype=h.dtype)
        for t in range(T):
            if a[b, t] > 0:
                token = h[b, start : t + 1].mean(0) if name == "mean" else h[b, t]
                z = token_level(token, W)
                if name == "ema":
                    p = probs[b, t].clamp(1e-4, 1 - 1e-4)
                    z = p * z + (1 - p) * current
                start, current = t + 1, z
            y[b, t] = current
    return y


def full(chunker, h, a, probs, relaxed, W) -> tuple[torch.Tensor, torch.Tensor]:
    """The full-sequence form, as the model runs it: y (B, T, D) and the tokens after dechunk."""
    S = int(a.sum(1).max())
    z, pos = chunker.down(h, a, relaxed, S)
    z = chunker.dechunk(token_level(z, W), probs, pos)
    return chunker.up(z, a, probs), z


@pytest.mark.parametrize("name", sorted(CHUNKERS))
@pytest.mark.parametrize("seed", [0, 1])
def test_full_form_matches_reference(name, seed):
    h, a, probs, relaxed, W = inputs(seed)
    y, _ = full(build_chunker(name), h, a, probs, relaxed, W)
    torch.testing.assert_close(y, reference(name, h, a, probs, W))


@pytest.mark.parametrize("name", sorted(CHUNKERS))
@pytest.mark.parametrize("prompt", [1, 2, 17])
def test_cached_steps_match_full_form(name, prompt):
    """A prompt of `prompt` bytes read whole (`prefill_state`), then one byte at a time
    (`down_step`, `dechunk_step` on the rows that made a token, `up_step`), as generation does:
    every byte reads what the full form and the plain reference give it."""
    chunker = build_chunker(name)
    h, a, probs, relaxed, W = inputs(prompt)
    ref = reference(name, h, a, probs, W)
    head = slice(0, prompt)
    y, z = full(chunker, h[:, head], a[:, head], probs[:, head], relaxed[:, head], W)
    torch.testing.assert_close(y, ref[:, head])
    state = chunker.prefill_state(h[:, head], a[:, head], z)
    for t in range(prompt, T):
        tok, state = chunker.down_step(h[:, t], a[:, t], state)
        rows = a[:, t].nonzero().flatten()
        if rows.numel() == B:
            state = chunker.dechunk_step(token_level(tok, W), None, probs[:, t], state)
        elif rows.numel():
            state = chunker.dechunk_step(token_level(tok[rows], W), rows, probs[:, t], state)
        torch.testing.assert_close(chunker.up_step(a[:, t], probs[:, t], state), ref[:, t], msg=f"byte {t}")


def test_ema_confidence_carries_the_gradient_to_probs():
    """H-Net's confidence: forward 1, but the loss reaches every byte's p through it."""
    h, a, probs, relaxed, W = inputs(0)
    probs.requires_grad_(True)
    y, _ = full(build_chunker("ema"), h, a, probs, relaxed, W)
    y.sum().backward()
    assert (probs.grad[a == 0] != 0).all()


REMOVED_HOOKS = ("pool", "pool_packed", "pool_step", "dechunk", "dechunk_step", "confidence")


@pytest.mark.parametrize("name", strategy_names())
def test_strategies_name_a_chunker_and_have_no_pooling_hooks(name):
    """Chunking is the chunker's (learntok.nn.chunkers), never a strategy's hook; a strategy
    names its chunker, and the model holds it, with no weights of its own (so checkpoints keep
    their keys)."""
    assert not [hook for hook in REMOVED_HOOKS if hasattr(BoundaryStrategy, hook)]
    assert not [hook for hook in REMOVED_HOOKS if hasattr(strategy_class(name), hook)]
    model = tiny_model(name)
    assert type(model.chunker) is CHUNKERS[strategy_class(name).chunker]
    assert not list(model.chunker.state_dict())


def test_the_published_methods_chunkers():
    assert (strategy_class("nawrot").chunker, strategy_class("hnet").chunker) == ("mean", "ema")
    assert {strategy_class(n).chunker for n in strategy_names() if n not in ("nawrot", "hnet")} == {"select"}
    with pytest.raises(ValueError, match="unknown chunker"):
        build_chunker("median")
