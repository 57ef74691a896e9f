"""Faults by kind, each in one place of the code and tested here as a table:

1. A model folder's config.json is input: whatever reads a folder (`eval`, `segment`, `export`,
   `from_pretrained`, the Auto classes) checks it with `train`'s rules before building anything
   (learntok.model.sizes.check_model_sizes via model.pretrained.model_config; a run config whole).
2. Values inside a declared range that no machine runs: floats beyond float32 (util.ranges), the
   learning rates a float32 step holds, a strategy's own weights counted with the model's.
3. Names the operating system refuses, for every path a user gives (util.files.check_name; the
   command line's last resort util.errors.fault_line).
4. The byte tokenizer's edges (hf.tokenizer.checked_id, hf.config.checked_seed, its save).
5. Readers and docs that agree (parquet nulls, export over its own export, inside a run folder).

Each command-line row: exit 2, one line on stderr, no traceback, no file that was there changed.
"""

import json
import shutil
from pathlib import Path

import pytest

from conftest import TINY_RUN as TINY, assert_one_line_error, checksums, run_cli

LONG = "a" * 300  # a component longer than any file system's 255 bytes
DEEP = "/".join(["b" * 200] * 25)  # a path longer than PATH_MAX (4096)


def model_folder(t: Path, **changes) -> str:
    """A copy of the run's last checkpoint as a model folder whose config.json holds `changes`
    (dotted section.key: value)."""
    src = next((t / "run" / "checkpoints").glob("step_*"))
    dst = t / "m"
    dst.mkdir()
    shutil.copy(src / "model.safetensors", dst / "model.safetensors")
    config = json.loads((src / "config.json").read_text())
    for key, value in changes.items():
        section, name = key.split(".")
        config[section][name] = value
    (dst / "config.json").write_text(json.dumps(config))
    return "m"


def parquet_with_nulls(t: Path) -> str:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["first document " * 40, None, "third document " * 40]}), t / "n.parquet")
    return "n.parquet"


TRAIN = ["train", "--preset", "tiny", *TINY, "data.source=corpus.txt"]

CASES = [
    # 1. a model folder's config, read by every command that reads one
    *[
        (f"{cmd}-folder-{key}-{value}", lambda t, c=cmd, k=key, v=value: [*c.split(), model_folder(t, **{k: v})], words)
        for cmd in ("eval", "segment --held-out", "export --out e")
        for key, value, words in (
            ("model.n_mid", 1000000, "blocks"),
            ("model.d_model", 1000000000, "weights"),
            ("train.seq_len", 0, "seq_len"),
            ("train.seq_len", -5, "seq_len"),
            ("strategy.window", 100000000, ("window", "weights", "GiB")),
            ("optim.lr", 1e308, "float32"),
            ("model.d_bytes", 100000000, "weights"),
            ("model.token_pad_multiple", 1000000000, "token_pad_multiple"),
        )
    ],
    # 2. values in range that no machine runs
    ("train-lr-1e308", lambda t: [*TRAIN, "optim.lr=1e308", "--out", "n"], "float32"),
    ("train-lr-1e30", lambda t: [*TRAIN, "optim.lr=1e30", "--out", "n"], "optim.lr"),
    ("train-policy-lr-mult-huge", lambda t: [*TRAIN, "optim.policy_lr_mult=1e300", "--out", "n"], "float32"),
    ("train-weight-decay-huge", lambda t: [*TRAIN, "optim.weight_decay=1e300", "--out", "n"], "float32"),
    ("train-window-1e8", lambda t: [*TRAIN, "strategy.window=100000000", "--out", "n"], "window"),
    ("train-window-beyond-seq-len", lambda t: [*TRAIN, "strategy.window=65", "--out", "n"], "window"),
    ("train-n-mid-1e6", lambda t: [*TRAIN, "model.n_mid=1000000", "--out", "n"], "blocks"),
    ("train-rate-gain-huge", lambda t: [*TRAIN, "objective.rate_gain=1e39", "--out", "n"], "float32"),
    ("train-lr-below-float32", lambda t: [*TRAIN, "optim.lr=1e-50", "--out", "n"], "smallest normal"),
    ("train-d-bytes-huge", lambda t: [*TRAIN, "model.d_bytes=10000000", "--out", "n"], "weights"),
    (
        "train-token-pad-huge",
        lambda t: [*TRAIN, "model.token_pad_multiple=1000000000", "--out", "n"],
        "token_pad_multiple",
    ),
    (
        "train-token-pad-beyond-window",
        lambda t: [*TRAIN, "model.token_pad_multiple=65", "--out", "n"],
        "token_pad_multiple",
    ),
    (
        "config-rows-per-rate-huge",
        lambda t: ["config", "--preset", "tiny", "model.rows_per_rate=1000000000000"],
        "rows_per_rate",
    ),
    ("train-mlp-ratio-no-unit", lambda t: [*TRAIN, "model.mlp_ratio_bytes=1e-30", "--out", "n"], "mlp_ratio_bytes"),
    ("eval-tasks-task-too-long", lambda t: ["eval-tasks", "run", "--task", DEEP], "too long"),
    # 3. names the system refuses, read or written
    ("export-out-too-long", lambda t: ["export", "run", "--out", LONG], "too long"),
    ("train-out-too-long", lambda t: [*TRAIN, "--out", LONG], "too long"),
    ("segment-json-too-long", lambda t: ["segment", "run", "--held-out", "--json", LONG], "too long"),
    (
        "train-source-too-long",
        lambda t: ["train", "--preset", "tiny", *TINY, f"data.source={LONG}", "--out", "n"],
        "too long",
    ),
    ("eval-run-too-long", lambda t: ["eval", LONG], "too long"),
    ("eval-source-too-long", lambda t: ["eval", "run", "--source", LONG], "too long"),
    ("eval-path-too-long", lambda t: ["eval", DEEP], "too long"),
    ("export-out-path-too-long", lambda t: ["export", "run", "--out", DEEP], "too long"),
    (
        "export-out-through-a-file",
        lambda t: ["export", "run", "--out", "corpus.txt/sub"],
        ("not a directory", "is a file"),
    ),
    (
        "eval-json-through-a-file",
        lambda t: ["eval", "run", "--json", "corpus.txt/x.json"],
        ("not a directory", "is a file"),
    ),
    ("train-config-too-long", lambda t: [*TRAIN, "--config", LONG, "--out", "n"], "too long"),
    # 5. readers and docs that agree
    (
        "train-parquet-with-nulls",
        lambda t: ["train", "--preset", "tiny", *TINY, f"data.source={parquet_with_nulls(t)}", "--out", "n"],
        "null",
    ),
    ("prepare-parquet-with-nulls", lambda t: ["prepare", parquet_with_nulls(t), "--out", "n"], "null"),
    ("export-out-inside-a-run", lambda t: ["export", "run", "--out", "run/sub"], "inside run folder"),
    ("eval-json-inside-a-run", lambda t: ["eval", "run", "--json", "run/eval.json"], "inside run folder"),
    ("export-empty-source", lambda t: ["export", "", "--out", "e"], "empty"),
    ("eval-empty-run", lambda t: ["eval", ""], "empty"),
    ("segment-mistyped-shipped-name", lambda t: ["segment", "tiny-shakespear", "--held-out"], "tiny-shakespeare"),
]


@pytest.mark.parametrize("make_args, words", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_a_fault_is_one_line_exit_2_and_changes_nothing(base, tmp_path, make_args, words):
    shutil.copytree(base / "run", tmp_path / "run")
    shutil.copy(base / "corpus.txt", tmp_path / "corpus.txt")
    args = make_args(tmp_path)
    before = checksums(tmp_path)
    r = run_cli(*args, cwd=tmp_path, timeout=120)
    assert_one_line_error(r.returncode, r.stderr, words, before, checksums(tmp_path))
    assert not (tmp_path / "n").exists() and not (tmp_path / "e").exists()


def test_export_replaces_its_own_earlier_export(base, tmp_path):
    shutil.copytree(base / "run", tmp_path / "run")
    for _ in range(2):
        r = run_cli("export", "run", "--out", "e", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    assert (tmp_path / "e" / "model.safetensors").is_file()


# ---------------------------------------------------------------- the Python readers of a folder

TRANSFORMERS = pytest.importorskip("transformers", reason="the hf extra")


@pytest.mark.parametrize(
    "key, value",
    [("model.n_mid", 1000000), ("model.d_model", 10**9), ("train.seq_len", 0), ("train.seq_len", -5),
     ("strategy.window", 10**8), ("optim.lr", float("nan"))],
)  # fmt: skip
def test_from_pretrained_checks_a_folder_config_before_building(base, tmp_path, key, value):
    import learntok.hf  # noqa: F401  (registers the Auto classes)
    from transformers import AutoConfig, AutoModelForCausalLM

    from learntok.hf import LearntokForCausalLM

    shutil.copytree(base / "run", tmp_path / "run")
    folder = tmp_path / model_folder(tmp_path, **{key: value})
    for load in (LearntokForCausalLM.from_pretrained, AutoModelForCausalLM.from_pretrained, AutoConfig.from_pretrained):
        with pytest.raises((ValueError, RuntimeError)) as e:
            load(folder)
        assert key.split(".")[1] in str(e.value) or "weights" in str(e.value) or "blocks" in str(e.value)


@pytest.mark.parametrize(
    "ids, words",
    [([1000, 65], "id 1000 is outside"), ([-1, 65], "id -1 is outside"), ([259], "id 259 is outside"),
     ([2**40], "is outside"), ([65, 66, 300], "id 300 is outside"), ([65.0], "id 65.0 is not an integer"),
     ([True, 65], "id True is not an integer"), ([1.5], "id 1.5 is not an integer"), (["A"], "is not an integer")],
)  # fmt: skip
def test_the_byte_tokenizer_names_an_id_it_cannot_read(ids, words):
    from learntok.hf import LearntokByteTokenizer

    tok = LearntokByteTokenizer()
    for call in (tok.decode, tok.convert_ids_to_tokens):
        with pytest.raises(ValueError, match=words):
            call(ids)


@pytest.mark.parametrize("path", [LONG, DEEP, "corpus.txt/sub"])
def test_the_python_api_says_a_refused_name_in_one_line(base, tmp_path, monkeypatch, path):
    from learntok import AUNet
    from learntok.util.errors import CheckpointError, ConfigError, OutputError

    shutil.copy(base / "corpus.txt", tmp_path / "corpus.txt")
    monkeypatch.chdir(tmp_path)
    before = checksums(tmp_path)
    model = AUNet.from_pretrained("tiny-shakespeare")
    with pytest.raises((ConfigError, OutputError)) as e:
        model.save_pretrained(path)
    assert "\n" not in str(e.value) and len(str(e.value)) < 400
    with pytest.raises((ConfigError, CheckpointError)) as e:
        AUNet.from_pretrained(path)
    assert "\n" not in str(e.value) and len(str(e.value)) < 400
    assert checksums(tmp_path) == before


@pytest.mark.parametrize("seed", [float("nan"), float("inf"), -1, 1.5, 2**64, "7", True])
def test_boundary_seed_is_named_when_it_is_not_a_seed(seed):
    from learntok.hf import LearntokConfig

    with pytest.raises(ValueError, match="boundary_seed"):
        LearntokConfig(boundary_seed=seed)


def test_the_tokenizer_will_not_save_into_a_run_folder(base, tmp_path):
    from learntok.hf import LearntokByteTokenizer

    shutil.copytree(base / "run", tmp_path / "run")
    before = checksums(tmp_path)
    for where in (tmp_path / "run", tmp_path / "run" / "sub", next((tmp_path / "run" / "checkpoints").glob("step_*"))):
        with pytest.raises(ValueError, match="belongs to its run"):
            LearntokByteTokenizer().save_pretrained(where)
    assert checksums(tmp_path) == before
