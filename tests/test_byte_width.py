"""A byte level narrower than the token level (model.d_bytes): the mid stack projects tokens in and
out, every strategy reads byte states at the byte width, and d_bytes = 0 or d_model is the model
of one width, bit for bit."""

from __future__ import annotations

import pytest
import torch

from learntok import AUNet, ModelConfig
from learntok.boundaries import strategy_names
from learntok.data import encode
from learntok.model.generate import SamplingOptions, _events, prompt_ids
from learntok.model.flops import model_flops

from conftest import TINY, tiny_model

NARROW = dict(d_model=32, d_bytes=16, n_heads=2)


def state(**overrides) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return AUNet(ModelConfig(**{**TINY, **overrides})).state_dict()


@pytest.mark.parametrize("d_bytes", [0, 32])
def test_one_width_is_the_model_without_d_bytes(d_bytes):
    ref, mine = state(), state(d_bytes=d_bytes)
    assert ref.keys() == mine.keys() and not any(k.startswith(("mid.inp", "mid.out")) for k in mine)
    assert all(torch.equal(ref[k], mine[k]) for k in ref)


@pytest.mark.parametrize("boundary", strategy_names())
def test_narrow_bytes_widths_by_level(boundary):
    model = tiny_model(boundary, **NARROW)
    widths = {n: p.shape for n, p in model.named_parameters()}
    assert widths["embed.weight"][1] == 16 and widths["head.linear.weight"][1] == 16
    assert widths["encoder.blocks.0.attn.qkv.weight"][1] == 16
    assert widths["decoder.blocks.0.attn.qkv.weight"][1] == 16
    assert widths["mid.blocks.0.attn.qkv.weight"][1] == 32
    assert widths["mid.inp.weight"] == (32, 16) and widths["mid.out.weight"] == (16, 32)
    text = b"a narrow byte level, a wide token level. "
    if boundary.startswith("bpe"):  # a tokenizer to cut with
        model.strategy.fit([text * 20])
    x = encode(text).unsqueeze(0)
    out = model(x)
    assert out.logits.shape == (1, x.size(1), model.cfg.vocab_size) and torch.isfinite(out.logits).all()


@pytest.mark.parametrize("boundary", strategy_names())
def test_narrow_backbone_identical_for_every_strategy(boundary):
    ref, mine = state(boundary="uniform", **NARROW), state(boundary=boundary, **NARROW)
    ref = {k: v for k, v in ref.items() if not k.startswith("strategy.")}
    assert ref.keys() == {k for k in mine if not k.startswith("strategy.")}
    assert all(torch.equal(ref[k], mine[k]) for k in ref)


@pytest.mark.parametrize("boundary", ["learned", "uniform", "hnet", "nawrot"])
def test_cached_generation_matches_full_forward_with_narrow_bytes(boundary):
    torch.set_num_threads(1)
    model = tiny_model(boundary, n_mid=2, attn_window=8, window=4, **NARROW).eval()
    prompts = [prompt_ids(p) for p in (b"To be, or not to be,", b"that is")]
    opts = SamplingOptions(max_bytes=20, seed=1, boundaries="sample", stop_at_eos=False)
    events = list(_events(model, prompts, opts))
    ids, dec, keep = (torch.cat([getattr(e, f) for e in events], dim=1) for f in ("ids", "decisions", "keep"))
    L0 = events[0].ids.size(1)
    for b in range(len(prompts)):
        n = int(keep[b].sum())
        with torch.no_grad():
            ref = model(ids[b, :n][None], boundaries=dec[b, :n][None].float()).logits[0]
        for j, e in enumerate(events):
            if L0 - 1 + j < n - 1:
                torch.testing.assert_close(e.logits[b], ref[L0 - 1 + j], atol=1e-4, rtol=1e-4)


def test_save_and_load_keep_the_byte_width(tmp_path):
    model = tiny_model("learned", **NARROW)
    model.save_pretrained(tmp_path / "m")
    back = AUNet.from_pretrained(tmp_path / "m")
    assert back.cfg.d_bytes == 16 and back.cfg.byte_width == 16
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), back.state_dict().values()))


@pytest.mark.parametrize(
    "fields, words",
    [
        (dict(d_model=32, n_heads=2, d_bytes=15), "d_bytes 15 is not a multiple of n_heads 2"),
        (dict(d_model=32, n_heads=2, d_bytes=18), "head size d_bytes"),
        (dict(d_model=30, n_heads=2, d_bytes=16), "head size d_model"),
        (dict(d_model=32, n_heads=2, d_bytes=-1), "d_bytes"),
    ],
)
def test_byte_width_checked_with_the_heads(fields, words):
    with pytest.raises(ValueError, match=words):
        ModelConfig(**fields)


def test_flops_count_each_level_at_its_width():
    """Halving the byte width quarters the byte level's matrices and halves its attention; the
    token level keeps its own but for the two projections."""
    wide, narrow = ModelConfig(d_model=64, n_heads=2), ModelConfig(d_model=64, d_bytes=32, n_heads=2)
    fw, fn = model_flops(wide, 1024), model_flops(narrow, 1024)
    assert fn["attention"] < fw["attention"]
    assert fn["byte level"] < 0.55 * fw["byte level"]
    extra = 6.0 * narrow.target_rate * 2 * 64 * 32  # mid.inp and mid.out on every token
    assert fn["token level"] == pytest.approx(fw["token level"] + extra)
