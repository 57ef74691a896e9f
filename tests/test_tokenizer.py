"""learntok.Tokenizer: loads from a run or a model folder, encodes in batched windows (a forward
per batch, not per text), decodes exactly in every script, runs at a requested rate and leaves
the model's knob alone, and gives the chunks `learntok segment --json` gives for the same settings."""

from __future__ import annotations

import base64
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from learntok import AUNet, Encoding, Tokenizer
from learntok.cli import main
from learntok.data import encode
from learntok.text.windows import decide, text_rows
from conftest import corpus_text, tiny_model
from tests.test_compare import TINY
from tests.test_display import SCRIPTS

TEXT = " ".join(SCRIPTS.values())


def cutting(rate: float = 0.6) -> AUNet:
    """A model whose greedy cuts fall often, inside characters too."""
    model = tiny_model(target_rate=rate)
    model.strategy.proj.weight.data.mul_(300)
    return model


CUTTING = cutting()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    (folder / "corpus.txt").write_text(
        corpus_text(600) + TEXT * 10, encoding="utf-8"
    )  # a small val split: quick calibrations
    overrides = [o for o in TINY if not o.startswith("data.source=")] + [f"data.source={folder / 'corpus.txt'}"]
    assert main(["train", "--out", str(folder / "run"), *overrides]) == 0
    return folder / "run"


def test_from_pretrained_loads_a_run_or_a_model_folder_in_eval_mode(tmp_path, run_dir):
    tiny_model().save_pretrained(tmp_path / "m")
    for path in (tmp_path / "m", run_dir):
        tok = Tokenizer.from_pretrained(path)
        assert not tok.model.training and not AUNet.from_pretrained(path).training
        assert tok.decode(tok.encode("To be, or not to be")) == "To be, or not to be"
    assert (
        Tokenizer.from_pretrained(run_dir).run_cfg is not None
        and Tokenizer.from_pretrained(tmp_path / "m").run_cfg is None
    )


@pytest.mark.parametrize("greedy", [True, False])
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_encode_decode_round_trips_every_script(name, greedy):
    tok = Tokenizer(cutting(), window=24)  # several windows, cuts inside characters
    text = SCRIPTS[name] * 3
    enc = tok.encode(text, greedy=greedy, seed=1)
    assert isinstance(enc, Encoding) and len(enc) == len(enc.tokens) == len(enc.offsets) == len(enc.bytes)
    assert tok.decode(enc) == text and tok.decode_bytes(enc) == text.encode()
    assert enc.bytes == [text.encode()[a:b] for a, b in enc.byte_offsets]
    for (a, b), data, mid in zip(enc.offsets, enc.bytes, enc.starts_mid):
        whole = text[a:b].encode()  # the characters the chunk touches
        assert data in whole and (mid or whole.startswith(data))
    assert "\ufffd" not in "".join(enc.tokens)
    assert len(tok.encode("")) == 0 and tok.decode(tok.encode("")) == "" and tok.encode([]) == []
    if name not in ("accents",):
        assert any(enc.starts_mid) and any(enc.ends_mid)


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=80))
def test_any_bytes_decode_exactly(data):
    tok = Tokenizer(CUTTING, window=16)
    enc = tok.encode(data)
    assert tok.decode_bytes(enc) == data and sum(len(b) for b in enc.bytes) == len(data)


def test_a_list_is_encoded_in_batches_and_greedy_cuts_do_not_depend_on_batch_mates(monkeypatch):
    model = cutting()
    tok = Tokenizer(model, window=64, batch_bytes=4096)
    texts = [f"sentence {i}: déjà vu, 漢字 {i * 7}." for i in range(200)]  # about 7 KB in all
    calls = []
    real = model.byte_level
    monkeypatch.setattr(model, "byte_level", lambda x, pos=None: calls.append(x.shape) or real(x, pos))
    encs = tok.encode(texts)
    n_bytes = sum(len(t.encode()) for t in texts)
    assert len(calls) <= n_bytes // 4096 + 2 and all(b * t <= 4096 for b, t in calls)  # not one forward per text
    monkeypatch.undo()
    for i in (0, 57, 199):
        alone = tok.encode(texts[i])
        assert alone.byte_offsets == encs[i].byte_offsets and alone.tokens == encs[i].tokens


def test_sampled_cuts_are_seeded_and_leave_the_callers_rng_alone():
    tok = Tokenizer(tiny_model(), window=40)
    torch.manual_seed(5)
    before = torch.rand(3)
    torch.manual_seed(5)
    a = tok.encode(TEXT, greedy=False, seed=3)
    assert torch.equal(torch.rand(3), before)
    assert a.byte_offsets == tok.encode(TEXT, greedy=False, seed=3).byte_offsets
    assert a.byte_offsets != tok.encode(TEXT, greedy=False, seed=4).byte_offsets


@pytest.mark.parametrize("boundary", ["learned", "fixed"])
def test_the_byte_level_decides_as_the_full_forward(boundary):
    model = tiny_model(boundary, target_rate=0.3, window=4)
    rows = list(text_rows([TEXT.encode(), b"short"], 50))
    fast = [w.decisions for d in decide(model, rows, seed=2, batch_bytes=200) for w in d.windows]
    full = [w.decisions for d in decide(model, rows, seed=2, batch_bytes=200, full_forward=True) for w in d.windows]
    assert fast == full and sum(map(sum, fast)) > 0


def test_rate_calibrates_for_the_rule_in_use_and_restores_the_knob(monkeypatch):
    model = tiny_model()
    model.strategy.proj.weight.data.mul_(50)
    tok = Tokenizer(model, window=200)
    text = TEXT * 20
    before = float(model.strategy.rate_offset)
    for greedy in (True, False):
        enc = tok.encode(text, rate=0.4, greedy=greedy, seed=0)
        cuts = sum(1 for c in enc.chunks) - len(range(0, len(text.encode()), 199))  # less the window starts
        assert abs(cuts / len(text.encode()) - 0.4) < 0.03, greedy
        assert float(model.strategy.rate_offset) == before  # the knob is back where it was
    calls = []
    monkeypatch.setattr("learntok.text.tokenizer.set_rate_for_run", lambda *a: calls.append(a))
    tok.encode(text, rate=0.4, greedy=True, seed=0)  # remembered: no second calibration
    assert calls == []


def test_the_model_takes_text_or_says_what_to_pass():
    model = tiny_model().eval()
    ids = encode("hello").unsqueeze(0)
    torch.testing.assert_close(model("hello", greedy=True).logits, model(ids, greedy=True).logits)
    torch.testing.assert_close(model(b"hello", greedy=True).logits, model(ids, greedy=True).logits)
    for bad in (3, [1, 2], torch.rand(1, 4)):
        with pytest.raises(TypeError, match="LongTensor"):
            model(bad)
    with pytest.raises(ValueError, match="unsqueeze"):
        model(encode("hello"))


def segment_json(tmp_path, *args) -> list[tuple]:
    assert main(["segment", *map(str, args), "--json", str(tmp_path / "s.json")]) == 0
    seg = json.loads((tmp_path / "s.json").read_text())
    return [
        (c["start"], c["end"], base64.b64decode(c["bytes"]), c["text"], c["starts_mid"], c["ends_mid"])
        for c in seg["chunks"]
    ]


def as_rows(enc: Encoding) -> list[tuple]:
    return [(c.start, c.end, c.data, c.text, c.starts_mid, c.ends_mid) for c in enc.chunks]


@pytest.mark.parametrize(
    "greedy, rate, source", [(True, None, "text"), (False, None, "file"), (True, 0.3, "file"), (False, 0.3, "text")]
)
def test_segment_json_gives_the_chunks_the_api_gives(tmp_path, capsys, run_dir, greedy, rate, source):
    text = TEXT * 4
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    args = [
        run_dir,
        *(["--file", tmp_path / "t.txt"] if source == "file" else [text]),
        "--window",
        "128",
        "--seed",
        "3",
        *([] if greedy else ["--sampled"]),
        *(["--rate", rate] if rate else []),
    ]
    cli = segment_json(tmp_path, *args)
    api = Tokenizer.from_pretrained(run_dir, window=128).encode(text, rate=rate, greedy=greedy, seed=3)
    assert cli == as_rows(api) and b"".join(c[2] for c in cli) == text.encode()
    capsys.readouterr()


def test_a_model_folder_calibrates_on_the_text_itself_in_both(tmp_path, capsys):
    tiny_model().save_pretrained(tmp_path / "m")
    text = TEXT * 4
    cli = segment_json(tmp_path, tmp_path / "m", text, "--window", "128", "--greedy", "--rate", "0.25")
    api = Tokenizer.from_pretrained(tmp_path / "m", window=128).encode(text, rate=0.25)
    assert cli == as_rows(api)
    assert "rate: target 0.250" in capsys.readouterr().err


def test_segment_escapes_control_characters_and_marks_cut_characters(tmp_path, capsys):
    cutting().save_pretrained(tmp_path / "m")
    assert main(["segment", str(tmp_path / "m"), "déjà \x1b[2J\x1b]0;pwned\x07 vu", "--greedy"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u241b[2J" in out.replace("|", "")
    assert "\ufffd" not in out and "\u25b8" in out
    for marks in ([], ["--show-boundaries"]):
        assert (
            main(
                [
                    "sample",
                    str(tmp_path / "m"),
                    "--prompt",
                    "\x1b[2J\x1b]0;pwned\x07",
                    "--max-bytes",
                    "30",
                    "--seed",
                    "0",
                    *marks,
                ]
            )
            == 0
        )
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x07" not in out and "\u241b[2J" in out.replace("|", "")


@pytest.mark.parametrize("doc", ["README.md", "docs/tokenizer.md"])
def test_the_documented_example_runs(tmp_path, run_dir, doc):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / doc).read_text(encoding="utf-8")
    block = next(b for b in text.split("```python")[1:] if "Tokenizer.from_pretrained" in b).split("```")[0]
    assert len(block.strip().splitlines()) <= 5
    exec(block.replace('"runs/a"', repr(str(run_dir))), {})


# ---------------------------------------------------------------- the shape researchers know


def test_calling_the_tokenizer_encodes_and_encode_batch_takes_a_list():
    tok, texts = Tokenizer(CUTTING), ["déjà vu", "漢字と仮名", "ok"]
    assert as_rows(tok(texts[0])) == as_rows(tok.encode(texts[0]))
    assert [as_rows(e) for e in tok.encode_batch(texts)] == [as_rows(e) for e in tok.encode(texts)]
    assert [as_rows(e) for e in tok.encode_batch(tuple(texts))] == [as_rows(e) for e in tok.encode(texts)]


def test_save_pretrained_gives_the_same_tokenizer_back(tmp_path, run_dir):
    tok = Tokenizer.from_pretrained(run_dir, window=128)
    tok.save_pretrained(tmp_path / "saved")
    back = Tokenizer.from_pretrained(tmp_path / "saved", window=128)
    assert back.run_cfg == tok.run_cfg  # a run's config comes back: rate= calibrates on its val split
    for kw in ({}, {"greedy": False, "seed": 1}, {"rate": 0.3}):
        assert as_rows(back.encode(TEXT, **kw)) == as_rows(tok.encode(TEXT, **kw)), kw
    Tokenizer(CUTTING).save_pretrained(tmp_path / "bare")  # a model in memory: a model folder
    assert Tokenizer.from_pretrained(tmp_path / "bare").run_cfg is None


def test_byte_spans_stand_in_for_ids_and_decode_takes_what_encode_gives():
    tok = Tokenizer(CUTTING)
    enc = tok.encode(TEXT)
    assert b"".join(TEXT.encode()[a:b] for a, b in enc.byte_offsets) == TEXT.encode()
    assert [TEXT.encode()[a:b] for a, b in enc.byte_offsets] == enc.bytes
    with pytest.raises(AttributeError, match="byte_offsets"):
        getattr(enc, "ids")
    assert tok.decode(enc) == tok.decode(enc.bytes) == TEXT
    assert any(enc.starts_mid)  # cut characters: the display strings would not decode exactly
    with pytest.raises(TypeError, match=r"enc\.bytes"):
        tok.decode(enc.tokens)


def test_the_readme_model_example_runs_as_written():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = next(b for b in text.split("```python")[1:] if "model.generate" in b).split("```")[0]
    block = block.replace('model.save_pretrained("m"); AUNet.from_pretrained("m")', "")
    names: dict = {}
    exec(block, names)
    data, decisions = names["data"], names["decisions"]  # the names the README unpacks
    assert isinstance(data, bytes) and decisions.shape == (len(data),)
    assert "data, decisions = model.generate(" in block


# ---------------------------------------------------------------- one default rule


def test_one_default_rule_for_the_api_segment_sample_and_generate(tmp_path, capsys):
    import inspect

    from learntok.cli import build_parser
    from learntok.model.generate import DEFAULT_BOUNDARIES, SamplingOptions
    from learntok.text.sample import sample

    assert DEFAULT_BOUNDARIES == "greedy"
    for fn in (Tokenizer.encode, Tokenizer.encode_batch):
        assert inspect.signature(fn).parameters["greedy"].default is True
    # generate, stream and sample draw under SamplingOptions (sample's default: SamplingOptions())
    assert SamplingOptions().boundaries == DEFAULT_BOUNDARIES
    assert inspect.signature(sample).parameters["options"].default == SamplingOptions()
    parser = build_parser()
    assert parser.parse_args(["sample", "R", "--prompt", "a"]).boundaries == DEFAULT_BOUNDARIES
    assert parser.parse_args(["segment", "R", "a"]).sampled is False
    CUTTING.save_pretrained(tmp_path / "m")  # segment with no rule option gives encode's chunks
    cli = segment_json(tmp_path, tmp_path / "m", TEXT, "--window", "128")
    assert cli == as_rows(Tokenizer.from_pretrained(tmp_path / "m", window=128).encode(TEXT))
    sampled = segment_json(tmp_path, tmp_path / "m", TEXT, "--window", "128", "--sampled", "--seed", "2")
    api = Tokenizer.from_pretrained(tmp_path / "m", window=128).encode(TEXT, greedy=False, seed=2)
    assert sampled == as_rows(api) != cli
    capsys.readouterr()


# ---------------------------------------------------------------- the documented signatures


def documented_signatures() -> dict[str, str]:
    """The signature lines of docs/tokenizer.md's Encoding section: name -> parameters."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "tokenizer.md").read_text(encoding="utf-8")
    block = doc.split("## Encoding", 1)[1].split("```", 2)[1]
    found = {}
    for line in block.strip().splitlines():
        call = re.fullmatch(r"(tok|Tokenizer)(?:\.(\w+))?\((.*)\)", line.strip())
        assert call, line
        found[call[2] or ("__init__" if call[1] == "Tokenizer" else "__call__")] = call[3]
    return found


def code_signature(fn) -> str:
    import inspect

    params = [p for p in inspect.signature(fn).parameters.values() if p.name not in ("self", "cls")]
    return ", ".join(p.name if p.default is p.empty else f"{p.name}={p.default!r}" for p in params)


def test_the_documented_signatures_are_the_codes():
    documented = documented_signatures()
    public = {n for n in vars(Tokenizer) if not n.startswith("_")} - {"decide", "at_rate"}  # what segment uses
    assert public | {"__init__", "__call__"} == set(documented)
    for name, params in documented.items():
        assert params == code_signature(getattr(Tokenizer, name)), name


# ---------------------------------------------------------------- a rate that is not held


@pytest.mark.parametrize(
    "knob, target, reached, noted",
    [
        ("offset", 0.1, 0.027, True),
        ("offset", 0.1, 0.105, False),
        ("offset", 0.1, 0.111, True),
        ("online", 0.2, 0.185, True),
        ("online", 0.2, 0.2, False),
        ("condition", 0.3, 0.25, True),
        ("rule", 0.2, 0.195, False),
        ("rule", 0.2, 0.15, True),
    ],
)
def test_a_rate_not_held_on_a_text_is_said(knob, target, reached, noted):
    from learntok.run.rate import RateSetting

    setting = RateSetting("learned", target, knob, 0.0, target, 1000)
    note = setting.held_on(reached)
    assert bool(note) == noted
    if noted:
        assert f"{reached:.3f}" in note and f"{target:.3f}" in note
        enc = Encoding(b"x" * 1000, [], "greedy", round(reached * 1000), setting)
        assert enc.note == note and "note=" in repr(enc)


def test_segment_says_when_a_calibrated_rate_was_not_held(tmp_path, capsys):
    CUTTING.save_pretrained(tmp_path / "m")  # calibrates on the text's first 64 KiB: make the rest unlike it
    text = "a" * 70_000 + TEXT * 8
    args = ["segment", str(tmp_path / "m"), text, "--rate", "0.3", "--rate-mode", "calibrated", "--window", "512"]
    assert main(args) == 0
    err = capsys.readouterr().err
    enc = Tokenizer.from_pretrained(tmp_path / "m", window=512).encode(text, rate=0.3, rate_mode="calibrated")
    assert abs(enc.boundary_rate - 0.3) > 0.01 and enc.note and enc.note in err


def test_encoding_memory_is_linear_and_as_documented():
    """docs/benchmarks.md: about 230 bytes kept a chunk and about 120 MiB a MB at the peak
    (Python heap, tracemalloc); bounded here with a margin, on 200 KB of text."""
    import tracemalloc

    tok, text = Tokenizer(tiny_model().eval()), (corpus_text(100) + TEXT) * 20
    tok.encode(text[:20_000], greedy=False, seed=0)  # warm-up
    tracemalloc.start()
    try:
        enc = tok.encode(text, greedy=False, seed=0)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    n = len(text.encode())
    assert len(enc) > n / 10  # sampled at the model's rate, about 0.2
    assert kept / len(enc) < 300 and peak / n < 160, (kept / len(enc), peak / n)
