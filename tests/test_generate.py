"""Generation: the cached incremental path against the full forward, caches, sampling, streaming."""

from __future__ import annotations

import base64
import io
import json
import warnings

import pytest
import torch

from learntok import AUNet
from learntok.boundaries import learned
from learntok.boundaries.base import BoundaryStrategy, strategy_class, strategy_names
from learntok.boundaries.rate import RateControl
from learntok.data import BOS, EOS, encode
from learntok.text.display import escape_controls
from learntok.model.generate import (
    SamplingOptions,
    _events,
    decode_step,
    generate,
    prefill,
    prompt_ids,
    sample_next,
)
from learntok.text.sample import ChunkWriter, shown_after

from conftest import tiny_model

WINDOW = 16
# every registered strategy with an incremental step (bpe's re-tokenises the text so far)
STEP_STRATEGIES = [("learned", 1)] + [
    (name, 8) for name in strategy_names() if strategy_class(name).step is not BoundaryStrategy.step
]
STEP_STRATEGIES += [("learned-conditioned", 8)]  # rate-conditioned (docs/rate.md), at rate 0.3
PROMPTS = [
    b"To be, or not to be, that is the question:",
    b"Whether 'tis nobler",
    "caf\u00e9 \u2014 na\u00efve r\u00e9sum\u00e9 ok",
]


@pytest.fixture(autouse=True)
def one_thread():
    """Decoding runs many tiny ops: on a shared 2-core machine a second thread only contends."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny(boundary="learned", w=8) -> AUNet:
    conditioned = boundary.endswith("-conditioned")
    model = tiny_model(
        boundary.removesuffix("-conditioned"), n_mid=2, attn_window=WINDOW, window=w, rate_conditioned=conditioned
    )
    if conditioned:  # per-target biases as if trained, and a condition
        model.strategy.condition.bias.copy_(torch.linspace(1.0, -1.0, model.strategy.condition.bias.numel()))
        model.strategy.set_condition(0.3)
    if boundary.startswith("bpe"):
        with warnings.catch_warnings():  # a BPE of 20 words cannot reach rho*: no matter
            warnings.simplefilter("ignore")
            model.strategy.fit([b" ".join(p.encode() if isinstance(p, str) else p for p in PROMPTS) * 20])
    if boundary == "entropy":  # a running threshold as if trained
        x = encode(b"".join(p.encode() if isinstance(p, str) else p for p in PROMPTS)).unsqueeze(0)
        model.train()(x)
    return model.eval()


def full_logits(model, ids: torch.Tensor, decisions: torch.Tensor) -> torch.Tensor:
    """The reference: one full forward over the whole sequence with the same decisions. (T, V)"""
    with torch.no_grad():
        return model(ids[None], boundaries=decisions[None].float()).logits[0]


@pytest.mark.parametrize("boundary,w", STEP_STRATEGIES)
def test_cached_generation_matches_full_forward(boundary, w):
    """Sample a batch of prompts of different lengths for longer than the attention window
    (decisions drawn by `step`); every next-byte distribution equals the full forward's on the
    finished sequence with the same decisions."""
    model = tiny(boundary, w)
    prompts = [prompt_ids(p) for p in PROMPTS]
    events = list(
        _events(
            model,
            prompts,
            SamplingOptions(max_bytes=3 * WINDOW, seed=1, boundaries="sample", stop_at_eos=False),
        )
    )
    ids, dec, keep = (torch.cat([getattr(e, f) for e in events], dim=1) for f in ("ids", "decisions", "keep"))
    L0 = events[0].ids.size(1)
    for b in range(len(prompts)):
        n = int(keep[b].sum())
        assert n == prompts[b].numel() + 3 * WINDOW
        ref = full_logits(model, ids[b, :n], dec[b, :n])
        for j, e in enumerate(events):
            t = L0 - 1 + j  # position whose next-byte logits e holds
            if t < n - 1:
                torch.testing.assert_close(e.logits[b], ref[t], atol=1e-4, rtol=1e-4)
        generated = dec[b, prompts[b].numel() : n]
        if boundary in ("learned", "uniform", "nawrot"):  # no boundary is forced at the newest byte
            assert 0 < generated.sum() < generated.numel()


ONLINE_STRATEGIES = [
    (name, w) for name, w in STEP_STRATEGIES if strategy_class(name.removesuffix("-conditioned")).online_rate
]


@pytest.mark.parametrize("boundary,w", ONLINE_STRATEGIES)
@pytest.mark.parametrize("mode", ["sample", "greedy"])
def test_online_control_decides_in_generation_as_the_full_forward(boundary, w, mode, monkeypatch):
    """Under online rate control, cached generation (prefill, then `step` byte by byte) makes
    the decisions that one full forward over the finished sequence makes with the same draws:
    the controller's state carries through the prefill and every step."""
    model = tiny(boundary, w)
    model.strategy.set_rate_control(RateControl(0.35))
    draws, real = [], learned.uniform_draws
    monkeypatch.setattr(learned, "uniform_draws", lambda shape, device: draws.append(real(shape, device)) or draws[-1])
    prompts = [prompt_ids(p) for p in PROMPTS]
    events = list(
        _events(
            model,
            prompts,
            SamplingOptions(max_bytes=3 * WINDOW, seed=1, boundaries=mode, stop_at_eos=False),
        )
    )
    ids, dec, keep = (torch.cat([getattr(e, f) for e in events], dim=1) for f in ("ids", "decisions", "keep"))
    sampled = mode == "sample" and bool(draws)  # greedy decisions read no draws
    table = torch.cat([draws[0]] + [d[:, None] for d in draws[1:]], dim=1) if sampled else None  # (B, L) every draw
    for b in range(len(prompts)):
        n = int(keep[b].sum())
        if table is not None:
            monkeypatch.setattr(learned, "uniform_draws", lambda shape, device: table[b : b + 1, : shape[1]])
        with torch.no_grad():
            full = model(ids[b : b + 1, :n], greedy=mode == "greedy").boundaries[0]
        assert torch.equal(full, dec[b, :n])
    generated = dec[:, prompts[0].numel() : int(keep[0].sum())]
    assert 0 < generated.sum() < generated.numel()


@pytest.mark.parametrize("boundary,w", STEP_STRATEGIES)
def test_teacher_forced_steps_match_full_forward(boundary, w):
    """Prescribed bytes and decisions: prefill, then decode_step byte by byte."""
    model = tiny(boundary, w)
    x = torch.stack([encode(PROMPTS[0] + b" " + PROMPTS[1])[:60], torch.randint(0, 256, (60,))])
    x[1, 0] = BOS
    g = torch.Generator().manual_seed(0)
    a = (torch.rand(x.shape, generator=g) < 0.25).float()
    a[:, 0] = 1
    ref = model(x, boundaries=a).logits.detach()
    P = 7
    state, logits, _ = prefill(model, x[:, :P], boundaries=a[:, :P])
    torch.testing.assert_close(logits, ref[:, P - 1], atol=1e-4, rtol=1e-4)
    for t in range(P, x.size(1)):
        logits, d = decode_step(model, state, x[:, t], boundaries=a[:, t])
        assert torch.equal(d, a[:, t])
        torch.testing.assert_close(logits, ref[:, t], atol=1e-4, rtol=1e-4)
    # the byte-level caches hold one window; the token level grew only at boundaries
    assert state.cache.encoder[0].k.size(2) == WINDOW == state.cache.decoder[0].k.size(2)
    assert torch.equal(state.cache.mid[0].n, a.sum(1).long())


@pytest.mark.parametrize("w", [1, 8])
def test_learned_step_matches_forward_policy(w):
    """The policy's incremental logits equal the parallel ones for the same decisions."""
    model = tiny("learned", w)
    x = encode(PROMPTS[0]).unsqueeze(0)
    with torch.no_grad():
        out = model(x)
        h = model.encoder(model.embed(x), torch.arange(x.size(1)))
    state = model.strategy.init_state(1, x.device)
    for t in range(x.size(1)):
        a, p, state = model.strategy.step(h[:, t], x[:, t], t, state, boundaries=out.boundaries[:, t])
        if t > 0:
            torch.testing.assert_close(p, out.boundary_probs[:, t], atol=1e-5, rtol=1e-5)


def test_seed_reproducible_and_caller_rng_untouched():
    model = tiny()
    torch.manual_seed(5)
    before = torch.rand(3)
    torch.manual_seed(5)
    t1, d1 = model.generate("Hello", max_bytes=20, seed=3)
    assert torch.equal(torch.rand(3), before)  # the caller's stream did not move
    t2, d2 = generate(model, "Hello", max_bytes=20, seed=3)
    assert t1 == t2 and torch.equal(d1, d2)
    assert len(t1) == 20 and d1.numel() == 20  # one decision per generated byte
    assert generate(model, "Hello", max_bytes=20, seed=4)[0] != t1


def test_stream_matches_generate_and_survives_interleaved_rng_use():
    model = tiny()
    text, dec = generate(model, "abc", max_bytes=24, seed=7)
    pieces = []
    for piece in model.stream("abc", max_bytes=24, seed=7, include_prompt=True):
        torch.rand(10)  # the caller uses the RNG between bytes
        pieces.append(piece)
    assert bytes(p.byte for p in pieces if p.generated) == text
    assert [p.boundary for p in pieces if p.generated] == (dec > 0).tolist()


def test_greedy_boundaries_and_batch_api():
    model = tiny()
    texts, decs = generate(model, ["a", "longer prompt"], max_bytes=10, temperature=0, boundaries="greedy")
    assert [len(t) for t in texts] == [10, 10] and [d.numel() for d in decs] == [10, 10]
    # greedy everything is deterministic, and a row's result does not depend on its batch mates
    alone, dec_alone = generate(model, "longer prompt", max_bytes=10, temperature=0, boundaries="greedy")
    assert alone == texts[1] and torch.equal(dec_alone, decs[1])
    with pytest.raises(ValueError, match="boundaries"):
        generate(model, "a", max_bytes=2, boundaries="argmax")


def test_sample_next_filters():
    logits = torch.randn(4, 320)
    logits[:, BOS] = 100.0  # never drawn, however likely
    top = logits[:, :256].argmax(-1)
    assert torch.equal(sample_next(logits, temperature=0), top)
    assert torch.equal(sample_next(logits, top_k=1), top)
    assert torch.equal(sample_next(logits, top_p=1e-6), top)
    draws = torch.stack([sample_next(logits, top_k=3) for _ in range(50)])  # (50, 4)
    allowed = logits[:, :256].topk(3).indices
    assert all(bool((draws[:, b, None] == allowed[b]).any(-1).all()) for b in range(4))


def test_stops_at_eos():
    model = tiny()
    with torch.no_grad():
        model.head.linear.weight[EOS] = 0
        model.head.linear.weight[EOS, 0] = 1e4  # EOS overwhelmingly likely everywhere
    text, dec = generate(model, "x", max_bytes=10, seed=0)
    assert text == b"" and dec.numel() == 0


def test_chunk_writer_streams_utf8_and_marks_chunks():
    out = io.StringIO()
    w = ChunkWriter(out, show_boundaries=True, color=False)
    data = "h\u00e9 ok".encode()  # é is 2 bytes
    for i, byte in enumerate(data):
        w.write(byte, boundary=i in (1, 3))  # a boundary at é's first byte: its chunk ends inside é
    w.write(0xFF, boundary=False)  # invalid UTF-8: shown as \xff, no crash
    w.write(0x1B, boundary=False)  # ESC: shown, not obeyed
    w.close()
    assert out.getvalue() == "h\u00e9\u25b8|\u25c2 |ok\\xff\u241b\n"
    out = io.StringIO()
    w = ChunkWriter(out, show_boundaries=True, color=True)
    for i, byte in enumerate(b"ab"):
        w.write(byte, boundary=True)
    w.close()
    assert out.getvalue().count("\x1b[48;5;") == 2 and "|" not in out.getvalue()
    out = io.StringIO()
    w = ChunkWriter(out)
    for byte in "d\u00e9j\x1b[31m".encode():
        w.write(byte, boundary=True)
    w.close()
    assert out.getvalue() == "d\u00e9j\u241b[31m\n"


@pytest.mark.parametrize("boundary,w", STEP_STRATEGIES)
@pytest.mark.parametrize("T", [3, 30])
def test_prefill_state_equals_replaying_step(boundary, w, T):
    """A strategy's vectorised prefill_state gives the state that stepping through the prompt gives."""
    model = tiny(boundary, w)
    x = encode(PROMPTS[0])[:T].unsqueeze(0)
    with torch.no_grad():
        h = model.encoder(model.embed(x), torch.arange(T))
        early = model.early_head(h)
        a = model.strategy(h, x, early_logits=early).decisions
        fast = model.strategy.prefill_state(h, x, a, early)
        slow = BoundaryStrategy.prefill_state(model.strategy, h, x, a, early)
    assert fast.keys() == slow.keys()
    for k in fast:
        if isinstance(fast[k], torch.Tensor):
            torch.testing.assert_close(fast[k], slow[k])
        else:
            assert fast[k] == slow[k]


@pytest.mark.parametrize("boundary,w", STEP_STRATEGIES)
def test_selected_rows_decode_as_those_rows_read_alone(boundary, w):
    """Beam search keeps some rows and repeats others between steps (DecodeState.select): the
    selected state decodes as a state that read those rows' bytes itself, past the attention
    window, the same decisions and the same logits."""
    model = tiny(boundary, w)
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.full((3, 1), BOS), torch.randint(32, 123, (3, 9), generator=g)], 1)  # (3, 10)
    before, after = torch.randint(32, 123, (3, 6), generator=g), torch.randint(32, 123, (3, 2 * WINDOW), generator=g)
    rows = torch.tensor([2, 0, 0])
    state, _, decided = prefill(model, x, greedy=True)
    ref, _, _ = prefill(model, x[rows], boundaries=decided[rows], greedy=True)  # the same cuts (uniform's are drawn)
    for j in range(before.size(1)):
        _, a = decode_step(model, state, before[:, j], greedy=True)
        decode_step(model, ref, before[rows, j], boundaries=a[rows], greedy=True)
    state.select(rows)
    for j in range(after.size(1)):
        torch.manual_seed(j)
        logits, a = decode_step(model, state, after[:, j], greedy=True)
        torch.manual_seed(j)
        want, b = decode_step(model, ref, after[:, j], greedy=True)
        assert torch.equal(a, b), j
        torch.testing.assert_close(logits, want, atol=1e-5, rtol=1e-5)


def test_sample_command_streams_the_generation(tmp_path, capsys):
    from learntok.cli import main

    model = tiny()
    model.save_pretrained(tmp_path / "m")
    args = [
        "sample",
        str(tmp_path / "m"),
        "--prompt",
        "Once upon",
        "--max-bytes",
        "40",
        "--seed",
        "3",
        "--temperature",
        "0.8",
        "--top-k",
        "50",
        "--top-p",
        "0.95",
    ]
    assert main(args + ["--json", str(tmp_path / "s.json")]) == 0
    text, _ = generate(model, "Once upon", max_bytes=40, seed=3, temperature=0.8, top_k=50, top_p=0.95)
    assert capsys.readouterr().out == escape_controls((b"Once upon" + text).decode("utf-8", "backslashreplace")) + "\n"
    saved = json.loads((tmp_path / "s.json").read_text())
    assert saved["bytes"] == 40 and saved["prompt"] == "Once upon"
    assert base64.b64decode(saved["text_base64"]) == text  # the generated bytes, exactly
    assert saved["text"] == shown_after(b"Once upon", text) and "\ufffd" not in saved["text"]
    assert main(args + ["--show-boundaries"]) == 0
    assert "|" in capsys.readouterr().out  # stdout is not a terminal: | between chunks


@pytest.mark.parametrize(
    "before, data, shown",
    [
        (b"", "d\u00e9j\u00e0".encode(), "d\u00e9j\u00e0"),  # whole characters
        (b"", b"ab\xc3", "ab\\xc3"),  # a character cut off at the end: \\xNN, never U+FFFD
        (b"d\xc3", b"\xa9j", "\u25c2j"),  # finishes a character the prompt began: marked
        (b"", b"\xff\x1b", "\\xff\x1b"),  # not UTF-8 (control characters are escaped on a terminal)
    ],
)
def test_sample_shows_the_generated_text_as_segment_shows_a_chunk(before, data, shown):
    assert shown_after(before, data) == shown and "\ufffd" not in shown_after(before, data)


def test_uniform_steps_at_its_rate():
    """In step mode `uniform` is Bernoulli(rho*) per byte (a stream has no known length)."""
    model = tiny("uniform")
    state = model.strategy.init_state(4000, torch.device("cpu"))
    a, _, _ = model.strategy.step(None, torch.zeros(4000, dtype=torch.long), 5, state)
    assert abs(a.mean().item() - 0.2) < 0.03
