"""Every public entry point of `learntok.__all__` checks its arguments (learntok.util.checks): a
wrong one raises TypeError or ValueError naming the parameter and what to pass, never an error
from deep inside. One table over every public callable x wrong arguments; the callables are
enumerated from `learntok.__all__`, so an export (or a public method) added later without a
row fails `test_every_public_callable_has_rows`."""

from __future__ import annotations

import inspect

import pytest
import torch

import learntok
from learntok import AUNet, Encoding, ModelConfig, ModelOutput, ObjectiveConfig, Tokenizer
from learntok.data import encode
from learntok.util.errors import OutputError
from conftest import checksums, tiny_model

MODEL = tiny_model().eval()
TOK = Tokenizer(MODEL)
IDS = encode("hello").unsqueeze(0)  # (1, T)
H, _ = MODEL.byte_level(IDS)


def entered(manager) -> None:
    with manager:
        pass


def needs_no_cuda(fn):
    """A row for a CUDA device this machine lacks (skipped where there is one)."""
    return pytest.param(*fn, marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here"))


NO_CUDA = ("cuda", "no CUDA")


def a_run(model_folder):
    """A folder beside `model_folder` laid out as a run folder (its files, a checkpoint)."""
    run = model_folder.parent / "run"
    (run / "checkpoints" / "step_0000001").mkdir(parents=True, exist_ok=True)
    for name in ("config.toml", "metrics.jsonl", "checkpoints/latest", "checkpoints/step_0000001/state.pt"):
        (run / name).write_text("kept\n")
    return run


# (callable, case, call, exception, words its message holds)
ROWS = [
    ("AUNet", "cfg-none", lambda p: AUNet(None), TypeError, "cfg"),
    ("AUNet", "cfg-dict", lambda p: AUNet({"d_model": 32}), TypeError, "ModelConfig"),
    ("AUNet.set_gradient_checkpointing", "on-str", lambda p: MODEL.set_gradient_checkpointing("yes"), TypeError, "on"),
    ("AUNet.init_weights", "seed-negative", lambda p: MODEL.init_weights(-1), ValueError, "seed"),
    ("AUNet.init_weights", "seed-str", lambda p: MODEL.init_weights("0"), TypeError, "seed"),
    ("AUNet.forward", "x-int", lambda p: MODEL(3), TypeError, "LongTensor"),
    ("AUNet.forward", "x-1d", lambda p: MODEL.forward(IDS[0]), ValueError, "unsqueeze"),
    ("AUNet.forward", "x-id-above-vocab", lambda p: MODEL(torch.full((1, 8), 999)), ValueError, "got an id 999"),
    ("AUNet.forward", "x-id-negative", lambda p: MODEL(torch.full((1, 8), -1)), ValueError, "got an id -1"),
    (
        "AUNet.forward",
        "x-no-position",
        lambda p: MODEL(torch.zeros(1, 0, dtype=torch.long)),
        ValueError,
        "x is empty",
    ),
    ("AUNet.as_ids", "x-id-above-vocab", lambda p: MODEL.as_ids(IDS + 1000), ValueError, "byte ids in"),
    ("AUNet.forward", "greedy-str", lambda p: MODEL(IDS, greedy="yes"), TypeError, "greedy"),
    ("AUNet.forward", "boundaries-shape", lambda p: MODEL(IDS, boundaries=torch.ones(1, 2)), ValueError, "boundaries"),
    ("AUNet.forward", "boundaries-ints", lambda p: MODEL(IDS, boundaries=IDS), TypeError, "boundaries"),
    ("AUNet.byte_level", "x-str", lambda p: MODEL.byte_level("text"), TypeError, "x must be"),
    ("AUNet.byte_level", "x-1d", lambda p: MODEL.byte_level(IDS[0]), ValueError, "x must be"),
    ("AUNet.byte_level", "pos-float", lambda p: MODEL.byte_level(IDS, torch.zeros(6)), TypeError, "pos"),
    ("AUNet.as_ids", "x-float", lambda p: MODEL.as_ids(3.0), TypeError, "LongTensor"),
    ("AUNet.token_level", "h-ids", lambda p: MODEL.token_level(IDS, None), TypeError, "h must be"),
    ("AUNet.token_level", "b-none", lambda p: MODEL.token_level(H, None), TypeError, "b must be"),
    ("AUNet.generate", "prompt-int", lambda p: MODEL.generate(3), TypeError, "prompt"),
    ("AUNet.generate", "prompt-empty-list", lambda p: MODEL.generate([]), ValueError, "prompt"),
    ("AUNet.generate", "prompt-list-int", lambda p: MODEL.generate(["a", 3]), TypeError, "prompt[1]"),
    ("AUNet.generate", "prompt-floats", lambda p: MODEL.generate(torch.rand(3)), TypeError, "prompt"),
    ("AUNet.generate", "prompt-2d", lambda p: MODEL.generate(IDS), ValueError, "prompt"),
    ("AUNet.generate", "max-bytes-negative", lambda p: MODEL.generate("a", -1), ValueError, "max_bytes"),
    ("AUNet.generate", "max-bytes-str", lambda p: MODEL.generate("a", "5"), TypeError, "max_bytes"),
    (
        "AUNet.generate",
        "temperature-negative",
        lambda p: MODEL.generate("a", temperature=-1),
        ValueError,
        "temperature",
    ),
    (
        "AUNet.generate",
        "temperature-beyond-float32",
        lambda p: MODEL.generate("a", temperature=1e308),
        ValueError,
        "temperature",
    ),
    ("AUNet.generate", "top-p-0", lambda p: MODEL.generate("a", top_p=0.0), ValueError, "top_p"),
    ("AUNet.generate", "top-k-0", lambda p: MODEL.generate("a", top_k=0), ValueError, "top_k"),
    (
        "AUNet.generate",
        "temperature-nan",
        lambda p: MODEL.generate("a", temperature=float("nan")),
        ValueError,
        "temperature",
    ),
    ("AUNet.generate", "top-k-zero", lambda p: MODEL.generate("a", top_k=0), ValueError, "top_k"),
    ("AUNet.generate", "top-p-above-1", lambda p: MODEL.generate("a", top_p=1.5), ValueError, "top_p"),
    ("AUNet.generate", "seed-negative", lambda p: MODEL.generate("a", seed=-1), ValueError, "seed"),
    (
        "AUNet.generate",
        "boundaries-unknown",
        lambda p: MODEL.generate("a", boundaries="maybe"),
        ValueError,
        "boundaries",
    ),
    ("AUNet.generate", "stop-at-eos-int", lambda p: MODEL.generate("a", stop_at_eos=1), TypeError, "stop_at_eos"),
    ("AUNet.generate", "unknown-keyword", lambda p: MODEL.generate("a", max_tokens=3), TypeError, "max_tokens"),
    ("AUNet.stream", "prompt-int", lambda p: MODEL.stream(3), TypeError, "prompt"),
    ("AUNet.stream", "prompt-list", lambda p: MODEL.stream(["a"]), TypeError, "prompt"),
    (
        "AUNet.stream",
        "include-prompt-str",
        lambda p: MODEL.stream("a", include_prompt="no"),
        TypeError,
        "include_prompt",
    ),
    ("AUNet.save_pretrained", "path-int", lambda p: MODEL.save_pretrained(3), TypeError, "path"),
    ("AUNet.save_pretrained", "path-empty", lambda p: MODEL.save_pretrained(""), ValueError, "path"),
    ("AUNet.save_pretrained", "path-run-folder", lambda p: MODEL.save_pretrained(a_run(p)), OutputError, "config.toml"),
    ("AUNet.save_pretrained", "path-file", lambda p: MODEL.save_pretrained(p / "config.json"), OutputError, "a file"),
    ("AUNet.from_pretrained", "path-int", lambda p: AUNet.from_pretrained(3), TypeError, "path"),
    ("AUNet.from_pretrained", "device-unknown", lambda p: AUNet.from_pretrained(p, "tpu"), ValueError, "map_location"),
    needs_no_cuda(
        ("AUNet.from_pretrained", "device-cuda", lambda p: AUNet.from_pretrained(p, "cuda"), ValueError, NO_CUDA)
    ),
    ("AUNet.from_files", "files-path", lambda p: AUNet.from_files(p), TypeError, "files"),
    ("Encoding", "data-str", lambda p: Encoding("text", [], "greedy"), TypeError, "data"),
    ("Encoding", "chunks-tuple", lambda p: Encoding(b"", (), "greedy"), TypeError, "chunks"),
    ("Encoding", "rule-unknown", lambda p: Encoding(b"", [], "fast"), ValueError, "rule"),
    ("ModelConfig", "d-model-str", lambda p: ModelConfig(d_model="x"), ValueError, "d_model"),
    ("ModelConfig", "rate-above-1", lambda p: ModelConfig(target_rate=1.5), ValueError, "target_rate"),
    ("ModelConfig", "heads-not-dividing", lambda p: ModelConfig(n_heads=3), ValueError, "n_heads"),
    ("ModelConfig", "strategy-list", lambda p: ModelConfig(strategy=[]), TypeError, "strategy"),
    ("ModelConfig", "range-one-rate", lambda p: ModelConfig(rate_range=(0.2,)), ValueError, "rate_range"),
    ("ModelOutput", "fields-none", lambda p: ModelOutput(*[None] * 9), TypeError, "logits"),
    ("ObjectiveConfig", "gamma-above-1", lambda p: ObjectiveConfig(gamma=2), ValueError, "gamma"),
    ("ObjectiveConfig", "baseline-int", lambda p: ObjectiveConfig(batch_baseline=3), ValueError, "batch_baseline"),
    ("ObjectiveConfig", "early-mix-str", lambda p: ObjectiveConfig(early_mix="yes"), ValueError, "early_mix"),
    ("Tokenizer", "model-path", lambda p: Tokenizer(str(p)), TypeError, "model"),
    ("Tokenizer", "run-cfg-dict", lambda p: Tokenizer(MODEL, {}), TypeError, "run_cfg"),
    ("Tokenizer", "window-1", lambda p: Tokenizer(MODEL, window=1), ValueError, "window"),
    ("Tokenizer", "batch-bytes-str", lambda p: Tokenizer(MODEL, batch_bytes="8"), TypeError, "batch_bytes"),
    ("Tokenizer.from_pretrained", "path-none", lambda p: Tokenizer.from_pretrained(None), TypeError, "path"),
    ("Tokenizer.from_pretrained", "window-0", lambda p: Tokenizer.from_pretrained(p, window=0), ValueError, "window"),
    ("Tokenizer.from_pretrained", "device-int", lambda p: Tokenizer.from_pretrained(p, 0), TypeError, "device"),
    needs_no_cuda(
        (
            "Tokenizer.from_pretrained",
            "device-cuda",
            lambda p: Tokenizer.from_pretrained(p, "cuda"),
            ValueError,
            NO_CUDA,
        )
    ),
    ("Tokenizer.save_pretrained", "path-none", lambda p: TOK.save_pretrained(None), TypeError, "path"),
    ("Tokenizer.save_pretrained", "path-run-folder", lambda p: TOK.save_pretrained(a_run(p)), OutputError, "replace"),
    ("Tokenizer.encode", "text-int", lambda p: TOK.encode(3), TypeError, "text"),
    ("Tokenizer.encode", "text-list-int", lambda p: TOK.encode(["a", 3]), TypeError, "text[1]"),
    ("Tokenizer.encode", "rate-above-1", lambda p: TOK.encode("a", rate=1.5), ValueError, "rate"),
    ("Tokenizer.encode", "rate-str", lambda p: TOK.encode("a", rate="0.2"), TypeError, "rate"),
    ("Tokenizer.encode", "greedy-str", lambda p: TOK.encode("a", greedy="no"), TypeError, "greedy"),
    ("Tokenizer.encode", "seed-negative", lambda p: TOK.encode("a", seed=-1), ValueError, "seed"),
    (
        "Tokenizer.encode",
        "rate-mode-unknown",
        lambda p: TOK.encode("a", rate=0.2, rate_mode="fast"),
        ValueError,
        "rate_mode",
    ),
    ("Tokenizer.__call__", "text-int", lambda p: TOK(3), TypeError, "text"),
    ("Tokenizer.encode_batch", "texts-str", lambda p: TOK.encode_batch("abc"), TypeError, "texts"),
    ("Tokenizer.encode_batch", "texts-list-none", lambda p: TOK.encode_batch([None]), TypeError, "text[0]"),
    ("Tokenizer.decide", "greedy-int", lambda p: TOK.decide([], 1, 0), TypeError, "greedy"),
    ("Tokenizer.decide", "seed-float", lambda p: TOK.decide([], True, 0.5), TypeError, "seed"),
    ("Tokenizer.at_rate", "rate-above-1", lambda p: entered(TOK.at_rate(2.0, True, 0, b"")), ValueError, "rate"),
    ("Tokenizer.at_rate", "text-int", lambda p: entered(TOK.at_rate(0.2, True, 0, 3)), TypeError, "text"),
    ("Tokenizer.decode_bytes", "encoding-int", lambda p: TOK.decode_bytes(3), TypeError, "encoding"),
    ("Tokenizer.decode_bytes", "encoding-str", lambda p: TOK.decode_bytes("text"), TypeError, "encoding"),
    ("Tokenizer.decode", "tokens", lambda p: TOK.decode(TOK.encode("text").tokens), TypeError, "display strings"),
    ("Tokenizer.decode", "not-utf8", lambda p: TOK.decode([b"\xff"]), ValueError, "decode_bytes"),
]

NO_ARGUMENTS = {"AUNet.num_params"}  # public callables that take no argument to get wrong


def public_callables() -> set[str]:
    """Every export of learntok.__all__ (its constructor) and every public callable its class
    defines itself (not the ones nn.Module gives AUNet), `__call__` included."""
    found = set()
    for name in learntok.__all__:
        obj = getattr(learntok, name)
        found.add(name)
        for attr, value in vars(obj).items():
            if attr.startswith("_") and attr != "__call__":
                continue
            if callable(value) or isinstance(value, (classmethod, staticmethod)):
                found.add(f"{name}.{attr}")
    return found


def row_name(row) -> str:
    return row.values[0] if hasattr(row, "values") else row[0]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("api") / "m"
    MODEL.save_pretrained(path)
    return path


def test_every_public_callable_has_rows():
    covered = {row_name(r) for r in ROWS} | NO_ARGUMENTS
    assert public_callables() == covered
    for name in NO_ARGUMENTS:
        owner, attr = name.split(".")
        assert list(inspect.signature(getattr(getattr(learntok, owner), attr)).parameters) == ["self"]


@pytest.mark.parametrize(
    "name, case, call, exc, words",
    ROWS,
    ids=[f"{row_name(r)}-{(r.values if hasattr(r, 'values') else r)[1]}" for r in ROWS],
)
def test_a_wrong_argument_is_named(folder, name, case, call, exc, words):
    with pytest.raises(exc) as info:
        result = call(folder)
        if inspect.isgenerator(result):
            next(result)
    message = str(info.value)
    assert type(info.value) is not TypeError or "object is not" not in message  # no deep Python error
    assert "\n" not in message
    for w in (words,) if isinstance(words, str) else words:
        assert w in message, message


# What save_pretrained may replace: (case, what is at the path, saved). A folder it did not
# write is refused whole and left as it was; a model folder, an empty one or none is written.
PLACES = [
    ("run-folder", lambda d: a_run(d / "m"), False),
    ("checkpoint", lambda d: a_run(d / "m") / "checkpoints" / "step_0000001", False),
    ("other-files", lambda d: (d / "notes").mkdir() or (d / "notes" / "a.txt").write_text("x") and d / "notes", False),
    (
        "model-folder-and-more",
        lambda d: MODEL.save_pretrained(d / "m") or (d / "m" / "x").write_text("x") and d / "m",
        False,
    ),
    ("a-file", lambda d: (d / "f.txt").write_text("x") and d / "f.txt", False),
    (
        "symlink-to-model-folder",
        lambda d: MODEL.save_pretrained(d / "m") or (d / "l").symlink_to(d / "m") or d / "l",
        False,
    ),
    ("model-folder", lambda d: MODEL.save_pretrained(d / "m") or d / "m", True),
    ("empty-folder", lambda d: (d / "e").mkdir() or d / "e", True),
    ("missing", lambda d: d / "new" / "m", True),
]


@pytest.mark.parametrize("case, place, saved", PLACES, ids=[p[0] for p in PLACES])
@pytest.mark.parametrize("save", [MODEL.save_pretrained, TOK.save_pretrained], ids=["AUNet", "Tokenizer"])
def test_save_pretrained_replaces_only_a_model_folder(tmp_path, case, place, saved, save):
    target = place(tmp_path)
    before = checksums(tmp_path)
    if saved:
        save(target)
        assert sorted(q.name for q in target.iterdir()) == ["config.json", "model.safetensors"]
        AUNet.from_pretrained(target)
        return
    with pytest.raises(OutputError) as info:
        save(target)
    assert str(target) in str(info.value) and "\n" not in str(info.value)
    assert checksums(tmp_path) == before
    assert not [q for q in tmp_path.rglob(".*tmp-*")]  # no temporary folder left behind


def test_the_models_own_output_is_not_checked_again_and_one_built_by_hand_is(monkeypatch):
    """ModelOutput's field checks run once, where an output comes from outside (built in Python),
    not on every forward of the model."""
    from learntok.model import aunet
    from learntok.util import checks

    model, calls, real = AUNet(ModelConfig(d_model=32, n_heads=2, n_mid=1)), [], checks.instance

    def counted(where, name, *args, **kwargs):
        calls.append(name) if where == "ModelOutput" else None
        return real(where, name, *args, **kwargs)

    monkeypatch.setattr(checks, "instance", counted)
    model(torch.randint(0, 256, (2, 16)))
    assert calls == []
    aunet.ModelOutput(*[torch.zeros(1)] * 7, 0.2, torch.zeros(1))
    assert calls == [*aunet.TENSOR_FIELDS, "target_rate"]
