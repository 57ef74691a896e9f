"""generate() through `transformers` with learntok's own caches (LearntokCache): the same bytes as
the native cached decoder and as recomputing the whole prefix, for one prompt, a batch of prompts
of one length, and a left-padded batch of different lengths (read whole at every step)."""

import pytest
import torch

pytest.importorskip("transformers", reason="the hf extra")

from learntok.hf import LearntokByteTokenizer, LearntokForCausalLM
from learntok.hf.modeling import LearntokCache
from learntok.model.aunet import AUNet


@pytest.fixture(scope="module")
def models():
    return LearntokForCausalLM.from_pretrained("tiny-shakespeare"), AUNet.from_pretrained("tiny-shakespeare").eval()


@pytest.mark.parametrize("prompt, n", [("ROMEO: ", 40), ("To be, or not", 25), ("é", 10), ("KING: ", 270)])
def test_cached_generate_gives_the_native_decoders_bytes(models, prompt, n):
    """The last case runs past the 256-byte window: generate() without a cache reads the prefix
    whole (as the native decoder does), not in eval's windows."""
    hf, native = models
    tok = LearntokByteTokenizer()
    ids = tok(prompt, return_tensors="pt")
    k = ids["input_ids"].shape[1]
    cached = hf.generate(**ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
    recomputed = hf.generate(**ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, use_cache=False)
    assert torch.equal(cached, recomputed)
    made, _ = native.generate(prompt, max_bytes=n, temperature=0, stop_at_eos=False)
    assert bytes(cached[0, k:].tolist()) == made


def test_a_batch_of_one_length_decodes_with_the_cache_and_a_padded_one_without(models, monkeypatch):
    hf, _ = models
    tok = LearntokByteTokenizer()
    assert tok.padding_side == "left"  # what generate() needs, by default
    steps = []
    original = hf.decode
    monkeypatch.setattr(hf, "decode", lambda *a, **k: steps.append(1) or original(*a, **k))
    same = tok(["to be", "or no"], return_tensors="pt", padding=True)
    out = hf.generate(**same, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert len(steps) == 6  # prefill, then one byte at a time
    for row, prompt in zip(out, ["to be", "or no"]):
        alone = hf.generate(**tok(prompt, return_tensors="pt"), max_new_tokens=6, min_new_tokens=6, do_sample=False)
        assert torch.equal(row, alone[0])
    steps.clear()
    mixed = tok(["to be", "or not to"], return_tensors="pt", padding=True)
    out = hf.generate(**mixed, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert not steps  # different lengths: read whole at every step
    alone = hf.generate(**tok("to be", return_tensors="pt"), max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert tok.decode(out[0], skip_special_tokens=True) == tok.decode(alone[0])


def test_sampled_boundaries_and_bytes_are_reproducible_with_the_cache():
    hf = LearntokForCausalLM.from_pretrained("tiny-shakespeare", boundaries="sample", boundary_seed=3)
    tok = LearntokByteTokenizer()
    ids = tok("ROMEO: ", return_tensors="pt")
    outs = []
    for _ in range(2):
        torch.manual_seed(0)
        outs.append(hf.generate(**ids, max_new_tokens=20, do_sample=True, top_k=5))
    assert torch.equal(outs[0], outs[1])


def test_the_cache_reports_its_length():
    cache = LearntokCache()
    assert cache.get_seq_length() == 0 and not cache.is_initialized


@pytest.mark.parametrize(
    "prompts, options",
    [
        (["ROMEO: "], {"num_beams": 2}),
        (["To be, or not"], {"num_beams": 3, "num_return_sequences": 3}),
        (["to be", "or no"], {"num_beams": 2}),  # a batch of one length: the cache, rows reordered per prompt
        (["to be", "or not to"], {"num_beams": 2}),  # left-padded: read whole at every step
        (["ROMEO: "], {"num_beams": 2, "do_sample": True}),
        (["\u00e9t\u00e9 "], {"num_beams": 4, "length_penalty": 0.5}),
    ],
)
def test_beam_search_with_the_cache_gives_the_bytes_of_reading_the_prefix_whole(models, prompts, options):
    """Beam search keeps and repeats rows between steps (LearntokCache.reorder_cache): with the
    cache it gives the bytes of use_cache=False, which reads every beam's prefix whole."""
    hf, _ = models
    ids = LearntokByteTokenizer()(prompts, return_tensors="pt", padding=True)
    outs = []
    for use_cache in (True, False):
        torch.manual_seed(0)
        outs.append(hf.generate(**ids, max_new_tokens=30, min_new_tokens=30, use_cache=use_cache, **options))
    assert torch.equal(outs[0], outs[1])
