"""learntok through `transformers` (learntok.hf, the `hf` extra; docs/transformers.md): the Auto
classes load a learntok run with the native model's logits, the loss is `learntok eval`'s bits per
byte, generate() makes the native model's bytes, the byte tokenizer round-trips any text, an export
reads back bit for bit, lm-evaluation-harness's `hf` backend gives the project's adapter's figures,
and the shipped checkpoints load by name. Skipped where transformers is not installed."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, assert_one_line_error, checksums, run_cli, write_lm_eval_tasks

transformers = pytest.importorskip("transformers")
from learntok import AUNet, Tokenizer  # noqa: E402
from learntok.data.vocab import BOS, EOS, PAD  # noqa: E402
from learntok.util.errors import CheckpointError  # noqa: E402
from learntok.hf import LearntokByteTokenizer, LearntokForCausalLM, export  # noqa: E402  (registers the Auto classes)
from learntok.util.shipped import shipped_names  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: E402

TEXTS = ["ROMEO.\nWhat say you to this", "a line of text number 7.", "Déjà vu, 中文"]


def latest(run: Path) -> Path:
    return run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()


def test_auto_classes_load_a_learntok_run_with_the_native_logits(base):
    """A run's checkpoint through AutoConfig / AutoModelForCausalLM: logits equal to the native
    model's, exactly for one row; within float noise for a padded batch (left padding, as
    generate pads); the run folder itself through LearntokForCausalLM."""
    run = base / "run"
    assert AutoConfig.from_pretrained(latest(run)).model_type == "learntok"
    model = AutoModelForCausalLM.from_pretrained(latest(run))
    assert isinstance(model, LearntokForCausalLM) and not model.training
    native = AUNet.from_pretrained(run)
    tok = AutoTokenizer.from_pretrained(latest(run))
    assert isinstance(tok, LearntokByteTokenizer)
    with torch.no_grad():
        one = tok(TEXTS[0], return_tensors="pt")  # the bytes; the model reads them after BOS
        assert one["input_ids"].tolist() == [list(TEXTS[0].encode())]
        assert torch.equal(model(**one).logits, native(TEXTS[0], greedy=True).logits[:, 1:])  # max abs diff 0
        tok.padding_side = "left"
        batch = tok(TEXTS, return_tensors="pt", padding=True)
        out = model(**batch).logits
        worst = 0.0
        for i, text in enumerate(TEXTS):
            n = len(text.encode())
            want = native(text, greedy=True).logits[0, 1:]
            worst = max(worst, float((out[i, -n:] - want).abs().max()))
            assert not out[i, :-n].any()  # padding: zeros
        assert worst < 1e-4, worst
        assert torch.equal(LearntokForCausalLM.from_pretrained(run)(**one).logits, model(**one).logits)


def test_a_row_without_bos_is_read_after_one(base):
    """The tokenizer adds no BOS (as ByT5's): a row without one is read after BOS, as learntok reads it."""
    model = LearntokForCausalLM.from_pretrained(base / "run")
    with torch.no_grad():
        with_bos = model(**LearntokByteTokenizer(add_bos_token=True)(TEXTS[1], return_tensors="pt")).logits
        without = model(**LearntokByteTokenizer()(TEXTS[1], return_tensors="pt")).logits
    assert torch.equal(without, with_bos[:, 1:])


@pytest.mark.parametrize("rule", ["greedy", "sample"])
def test_the_loss_is_learntok_evals_bits_per_byte(base, rule):
    """Summed over the test split's windows, loss / ln 2 per byte equals `learntok eval --split test`
    under the same boundary rule (sampled: batch i draws from seed + i, as learntok.evaluation.evaluate does)."""
    from learntok.run.checkpoint import load_run
    from learntok.data import ByteData
    from learntok.evaluation.evaluate import EvalRequest, run_eval

    run = base / "run"
    want = run_eval(EvalRequest(run, "test", greedy=rule == "greedy", batch_size=4, max_bytes=600, seed=3))
    model = LearntokForCausalLM.from_pretrained(run, boundaries=rule)
    _, run_cfg = load_run(run)
    nats, n = 0.0, 0
    for i, (x, _) in enumerate(ByteData.from_config(run_cfg.data).eval_batches("test", 4, want["seq_len"], 600)):
        model.config.boundary_seed = 3 + i
        labels = x.masked_fill(x == PAD, -100)
        with torch.no_grad():
            loss = model(input_ids=x, labels=labels).loss
        scored = int((labels[:, 1:] != -100).sum())
        nats, n = nats + float(loss) * scored, n + scored
    assert i > 0 and n == want["n_bytes"]
    assert nats / n / math.log(2) == pytest.approx(want["bpb"], rel=1e-5)


def test_generate_makes_the_native_models_bytes(base):
    """transformers' generate, greedy: the native cached generation's 50 bytes (p > 0.5 boundaries,
    argmax bytes); a left-padded batch gives each row's own; sampling gives 50 bytes, the same
    under the same seed. Recomputing every step costs time: printed against the native cache."""
    model = AutoModelForCausalLM.from_pretrained(latest(base / "run"))
    native = AUNet.from_pretrained(base / "run")
    tok = AutoTokenizer.from_pretrained(latest(base / "run"))
    prompt = tok("a line of", return_tensors="pt")
    start = time.perf_counter()
    out = model.generate(**prompt, max_new_tokens=50, do_sample=False, min_new_tokens=50)
    hf_s = time.perf_counter() - start
    start = time.perf_counter()
    data, _ = native.generate("a line of", max_bytes=50, temperature=0, boundaries="greedy", stop_at_eos=False)
    native_s = time.perf_counter() - start
    made = out[0, prompt["input_ids"].size(1) :].tolist()  # the prompt's bytes come first
    assert len(made) == 50 and bytes(made) == data
    print(f"50 bytes: transformers' generate {hf_s:.3f} s (recomputed), native cached {native_s:.3f} s")
    tok.padding_side = "left"
    prompts = ["a line of", "text number 1"]
    batch = model.generate(**tok(prompts, return_tensors="pt", padding=True), max_new_tokens=20, do_sample=False)
    for row, p in zip(batch, prompts):
        alone = model.generate(**tok(p, return_tensors="pt"), max_new_tokens=20, do_sample=False)[0]
        assert row[-20:].tolist() == alone[-20:].tolist()
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        runs.append(model.generate(**prompt, max_new_tokens=50, min_new_tokens=50, do_sample=True, top_k=20)[0])
    assert torch.equal(runs[0], runs[1]) and runs[0].numel() == prompt["input_ids"].size(1) + 50
    assert all(i < 256 for i in runs[0].tolist())  # bytes only: BOS, PAD and the table's padding are suppressed


@settings(max_examples=60, deadline=None)
@given(st.text())
def test_the_byte_tokenizer_round_trips_any_text(text):
    tok = LearntokByteTokenizer()
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        with pytest.raises(ValueError, match="not UTF-8"):
            tok(text)
        return
    ids = tok(text)["input_ids"]
    assert ids == list(data)  # learntok.data.encode(text, bos=False)'s ids
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_the_tokenizer_reads_special_names_as_text_and_refuses_non_text():
    tok = LearntokByteTokenizer()
    assert tok("<s></s><pad>")["input_ids"] == list(b"<s></s><pad>")
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, len(tok)) == (256, 257, 258, 259)
    for bad in (b"bytes", 3, [1.5]):
        with pytest.raises((TypeError, ValueError)) as e:
            tok(bad)
        assert "\n" not in str(e.value)


def test_the_tokenizer_saves_and_loads_back_as_it_was(tmp_path):
    tok = LearntokByteTokenizer(add_bos_token=True)
    tok.save_pretrained(tmp_path / "tok")
    back = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert type(back) is LearntokByteTokenizer and back.add_bos_token and back.padding_side == "left"
    assert back("ab")["input_ids"] == [BOS, 97, 98]
    assert AutoTokenizer.from_pretrained(tmp_path / "tok", add_bos_token=False)("ab")["input_ids"] == [97, 98]


@pytest.mark.parametrize(
    "call",
    [
        lambda t: t.add_tokens(["<foo>"]),
        lambda t: t.add_tokens(["<foo>"], special_tokens=True),
        lambda t: t.add_special_tokens({"additional_special_tokens": ["<x>"]}),
        lambda t: t.add_special_tokens({"bos_token": "<bos>"}),
        lambda t: t.add_special_tokens({"bos_token": "</s>"}),
        lambda t: t.add_special_tokens({"unk_token": "<unk>"}),
    ],
)
def test_a_token_the_model_cannot_read_is_refused_before_any_change(call):
    """The byte vocabulary is fixed, as resize_token_embeddings says: a token added would have an
    id the model has no row for, and a special token moved would change what the model reads."""
    tok = LearntokByteTokenizer()
    before = (dict(tok.special_tokens_map), dict(tok.added_tokens_encoder), len(tok))
    with pytest.raises(ValueError, match="the byte vocabulary is fixed"):
        call(tok)
    assert (dict(tok.special_tokens_map), dict(tok.added_tokens_encoder), len(tok)) == before
    assert tok.all_special_ids == [BOS, EOS, PAD] and tok.add_special_tokens({"pad_token": "<pad>"}) == 0


def test_return_dict_false_gives_a_tuple():
    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare")
    ids = torch.tensor([[BOS, 104, 105, 33]])
    out = model(ids, labels=ids, return_dict=False)
    assert isinstance(out, tuple) and len(out) == 3 and out[0].dim() == 0 and out[1].shape[:2] == (1, 4)
    assert isinstance(model(ids, return_dict=False)[0], torch.Tensor) and model(ids, return_dict=False)[0].dim() == 3


def test_export_reads_back_bit_for_bit(base, tmp_path):
    """`learntok export` and save_pretrained write one folder: learntok and transformers read the
    same weights back, bit for bit; an export replaces an export, nothing else."""
    run = base / "run"
    native = AUNet.from_pretrained(run)
    r = run_cli("export", run, "--out", tmp_path / "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    loaded = [AUNet.from_pretrained(tmp_path / "out"), AutoModelForCausalLM.from_pretrained(tmp_path / "out").aunet]
    AutoModelForCausalLM.from_pretrained(tmp_path / "out").save_pretrained(tmp_path / "again")
    loaded.append(AUNet.from_pretrained(tmp_path / "again"))
    want = native.state_dict()
    for model in loaded:
        got = model.state_dict()
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert json.loads((tmp_path / "out" / "config.json").read_text())["auto_map"]["AutoConfig"]
    export(tmp_path / "again", tmp_path / "out")  # replaces an export
    Tokenizer.from_pretrained(tmp_path / "out")  # learntok's tokenizer reads it too


def test_bad_input_is_one_line_and_changes_nothing(base, tmp_path):
    """export of a folder that is not a model, of a transformers GPT-2 folder, into a run folder:
    one line, exit 2, nothing changed; the same folders through the Auto classes: one clear error."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("hello")
    gpt2 = tmp_path / "gpt2"
    transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2).save_pretrained(gpt2)
    (gpt2 / "model.safetensors").write_bytes(b"")
    before = checksums(tmp_path)
    for args, words in (
        (["export", tmp_path / "notes", "--out", tmp_path / "o1"], "neither a model folder"),
        (["export", gpt2, "--out", tmp_path / "o2"], "'gpt2' model"),
        (["export", base / "run", "--out", tmp_path / "notes"], "not a folder this writer made"),
        (["export", tmp_path / "missing", "--out", tmp_path / "o3"], "does not exist"),
    ):
        r = run_cli(*args, cwd=tmp_path)
        assert_one_line_error(r.returncode, r.stderr, words, before, checksums(tmp_path))
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()
    with pytest.raises(CheckpointError, match="'gpt2' model"):
        LearntokForCausalLM.from_pretrained(gpt2)
    with pytest.raises(CheckpointError, match="neither a model folder"):
        LearntokForCausalLM.from_pretrained(tmp_path / "notes")


def test_lm_eval_hf_backend_gives_the_adapters_figures(base, tmp_path, monkeypatch):
    """One local multiple-choice task and one rolling task, through lm-evaluation-harness's
    standard `hf` backend on an export and through learntok's own adapter on the run (greedy
    boundaries, the same window): the same accuracy and bits per byte."""
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    lm_eval = pytest.importorskip("lm_eval")
    pytest.importorskip("lm_eval.models.huggingface")  # the `hf` backend (it needs accelerate)
    from lm_eval.tasks import TaskManager

    import learntok.evaluation.lm_eval_adapter  # noqa: F401  (registers the adapter)

    export(base / "run", tmp_path / "hf-model")
    d = tmp_path / "tasks"
    d.mkdir()
    write_lm_eval_tasks(
        d,
        [
            {"q": f"a line of text number {i}", "choices": [f" {i}.", f" {i + 3}!", " text"], "label": i % 3}
            for i in range(6)
        ],
        '"{{q}}"\ntarget_delimiter: ""\n',
    )
    results = {}
    for name, model, args in (
        ("hf", "hf", f"pretrained={tmp_path / 'hf-model'},dtype=float32"),
        ("adapter", "learntok", f"pretrained={base / 'run'},seq_len=64,greedy_boundaries=true"),
    ):
        results[name] = lm_eval.simple_evaluate(
            model=model,
            model_args=args,
            tasks=["tiny_mc", "tiny_roll"],
            batch_size=4,
            device="cpu",
            task_manager=TaskManager(include_path=str(d), include_defaults=False),
        )["results"]
    hf, own = results["hf"], results["adapter"]
    print("lm-eval hf backend:", {t: {k: v for k, v in r.items() if "," in k} for t, r in hf.items()})
    print("learntok adapter:  ", {t: {k: v for k, v in r.items() if "," in k} for t, r in own.items()})
    for metric in ("acc,none", "acc_norm,none"):
        assert hf["tiny_mc"][metric] == own["tiny_mc"][metric]
    assert hf["tiny_roll"]["bits_per_byte,none"] == pytest.approx(own["tiny_roll"]["bits_per_byte,none"], rel=1e-5)


def test_documents_longer_than_the_window_score_as_learntok_eval_scores_them(base, tmp_path, monkeypatch):
    """40 documents of about 350 bytes, each read in several 64-byte windows: `learntok eval`,
    learntok's lm-eval adapter and lm-eval's standard `hf` backend on an export give one bits per
    byte (greedy boundaries): each reads a document in eval's windows."""
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    lm_eval = pytest.importorskip("lm_eval")
    pytest.importorskip("lm_eval.models.huggingface")
    from lm_eval.tasks import TaskManager

    import learntok.evaluation.lm_eval_adapter  # noqa: F401  (registers the adapter)
    from learntok.evaluation.evaluate import EvalRequest, run_eval

    texts = [p.read_text() for p in sorted((base / "docs").iterdir())]
    assert min(map(len, texts)) > 4 * 63  # every document spans several windows
    own = run_eval(EvalRequest(base / "run", split="all", source=str(base / "docs"), greedy=True, batch_size=7))
    assert own["seq_len"] == 64 and own["n_bytes"] == sum(map(len, texts))
    export(base / "run", tmp_path / "hf-model")
    d = tmp_path / "tasks"
    d.mkdir()
    write_lm_eval_tasks(d, [{"q": t, "choices": ["a", "b"], "label": 0} for t in texts], '"{{q}}"\n')
    figures = {}
    for name, model, args in (
        ("hf", "hf", f"pretrained={tmp_path / 'hf-model'},dtype=float32"),
        ("adapter", "learntok", f"pretrained={base / 'run'},greedy_boundaries=true"),
    ):
        res = lm_eval.simple_evaluate(
            model=model,
            model_args=args,
            tasks=["tiny_roll"],
            batch_size=5,
            device="cpu",
            task_manager=TaskManager(include_path=str(d), include_defaults=False),
        )["results"]
        figures[name] = res["tiny_roll"]["bits_per_byte,none"]
    print("learntok eval", own["bpb"], "lm-eval", figures)
    assert figures["hf"] == pytest.approx(own["bpb"], rel=1e-5)
    assert figures["adapter"] == pytest.approx(own["bpb"], rel=1e-5)


@pytest.mark.parametrize("name", ["tiny-shakespeare", "tiny-python", "tiny-chinese"])
def test_shipped_checkpoints_load_by_name(name):
    """Each shipped checkpoint: by its name and as learntok/NAME, through learntok and the Auto
    classes, with its model card, in the package data pyproject.toml declares."""
    if name not in shipped_names():
        pytest.skip(f"{name} is not shipped in this checkout")
    folder = ROOT / "learntok" / "pretrained" / name
    card = (folder / "README.md").read_text()
    for words in ("command: `learntok ", "commit: ", "seed: ", "test bits per byte", "boundary rate", "A toy"):
        assert words in card, words
    tok = Tokenizer.from_pretrained(f"learntok/{name}")
    enc = tok.encode(TEXTS[2])
    assert tok.decode(enc) == TEXTS[2] and len(enc) >= 1
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert torch.equal(model.aunet.head.linear.weight, AUNet.from_pretrained(name).head.linear.weight)
    assert LearntokForCausalLM.from_pretrained(f"learntok/{name}").config.trained_seq_len == 256


def test_package_data_holds_the_shipped_checkpoints():
    """pyproject's package data covers every file of learntok/pretrained/ (so a wheel or an install has them)."""
    import fnmatch
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["learntok"]
    for path in (ROOT / "learntok" / "pretrained").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            rel = path.relative_to(ROOT / "learntok").as_posix()
            assert any(fnmatch.fnmatch(rel, g) for g in globs), rel


def test_segment_a_shipped_name_on_the_command_line(tmp_path):
    if "tiny-shakespeare" not in shipped_names():
        pytest.skip("tiny-shakespeare is not shipped in this checkout")
    r = run_cli("segment", "tiny-shakespeare", "To be, or not to be", cwd=tmp_path)
    assert r.returncode == 0 and "|" in r.stdout, r.stderr


def test_the_readmes_first_python_example_runs_as_written(tmp_path):
    """README's first Python block, as written, against the shipped checkpoint, in a fresh
    interpreter (its time is measured in docs/transformers.md, not asserted: a loaded machine
    would fail a timed test)."""
    if "tiny-shakespeare" not in shipped_names():
        pytest.skip("tiny-shakespeare is not shipped in this checkout")
    text = (ROOT / "README.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert "tiny-shakespeare" in code
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_the_readmes_transformers_example_runs_as_written():
    if "tiny-shakespeare" not in shipped_names():
        pytest.skip("tiny-shakespeare is not shipped in this checkout")
    text = (ROOT / "README.md").read_text()
    block = next(b for b in text.split("```python")[1:] if "LearntokForCausalLM" in b).split("```")[0]
    names: dict = {}
    exec(block, names)
    assert names["out"].shape == (1, len(b"ROMEO.") + 50)
