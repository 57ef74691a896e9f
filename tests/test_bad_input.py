"""The bad-input matrix (docs/reliability.md): every mistake a user can make on the command line gives exit
2, exactly one line on stderr (`learntok: error: ...`), no traceback, and changes no file that
was there before (checksums of the whole folder before and after).

Each case is a row: an id, a setup that writes what the case needs into a fresh folder (which
already holds a copy of a trained tiny run `run/`, a corpus `corpus.txt`, a task file
`task.jsonl` and a prepared folder `prep/`) and returns the command's arguments, and words the
error must contain.
"""

import gzip
import json
import os
import shutil
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from conftest import TINY_RUN as TINY, checksums, assert_one_line_error, run_cli


# ---------------------------------------------------------------- bad files


def jsonl_gz_truncated(t: Path) -> str:
    data = gzip.compress(b"".join(json.dumps({"text": f"document {i} " * 50}).encode() + b"\n" for i in range(200)))
    (t / "cut.jsonl.gz").write_bytes(data[: len(data) // 2])
    return "cut.jsonl.gz"


def gz_not_gzip(t: Path) -> str:
    (t / "plain.jsonl.gz").write_text('{"text": "not compressed at all"}\n')
    return "plain.jsonl.gz"


def jsonl_bad_utf8(t: Path) -> str:
    (t / "latin.jsonl").write_bytes(b'{"text": "caf\xe9", "context": "caf\xe9", "continuation": "x"}\n')
    return "latin.jsonl"


def binary_file(t: Path) -> str:
    (t / "blob.jsonl").write_bytes(bytes(range(256)) * 8)
    return "blob.jsonl"


def unfinished_prepared(t: Path) -> str:
    """What a `prepare` killed before index.json leaves: shards, a docs .npy, a temporary file."""
    shutil.copytree(t / "prep", t / "killed")
    (t / "killed" / "index.json").unlink()
    (t / "killed" / ".val_docs.tmp").write_bytes(b"\0" * 16)
    return "killed"


def edit_run_config(t: Path, change) -> None:
    path = t / "run" / "checkpoints" / "step_0000003" / "config.json"
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def latin1_config(t: Path) -> str:
    (t / "c.toml").write_bytes(b"[train]\nsteps = 3 # caf\xe9\n")
    return "c.toml"


def index_without_splits(t: Path) -> str:
    shutil.copytree(t / "prep", t / "nosplits")
    index = json.loads((t / "nosplits" / "index.json").read_text())
    del index["splits"]
    (t / "nosplits" / "index.json").write_text(json.dumps(index))
    return "nosplits"


def object_npy(t: Path) -> str:
    shutil.copytree(t / "prep", t / "objnpy")
    np.save(t / "objnpy" / "train_docs.npy", np.array([0, "x", None], dtype=object), allow_pickle=True)
    return "objnpy"


def existing_comparison(t: Path) -> str:
    (t / "cmp").mkdir()
    (t / "cmp" / "results.md").write_text("# an earlier comparison\n")
    (t / "cmp" / "results.json").write_text('{"results": [{"variant": "learned"}]}\n')
    return "cmp"


def user_folder(t: Path) -> str:
    (t / "mine").mkdir()
    (t / "mine" / "config.toml").write_text("# my own notes, not a run\n")
    return "mine"


def run_without_checkpoints(t: Path) -> str:
    shutil.rmtree(t / "run" / "checkpoints")
    return "run"


DEEP = "[" * 200_000 + "]" * 200_000  # nested past any parser's recursion


def deep_file(t: Path, name: str, text: str = DEEP) -> str:
    (t / name).write_text(text)
    return name


def deep_run_config(t: Path) -> str:
    (t / "run" / "checkpoints" / "step_0000003" / "config.json").write_text(DEEP)
    return "run"


def bad_parquet(t: Path) -> str:
    """A parquet file cut in half (its footer gone), as an interrupted download leaves it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": [f"document {i} " * 30 for i in range(200)]}), t / "whole.parquet")
    data = (t / "whole.parquet").read_bytes()
    (t / "cut.parquet").write_bytes(data[: len(data) // 2])
    (t / "whole.parquet").unlink()
    return "cut.parquet"


def edit_state(t: Path, change) -> None:
    import torch

    path = t / "run" / "checkpoints" / "step_0000003" / "state.pt"
    torch.save(change(torch.load(path, weights_only=True)), path)


def wider_vocabulary(t: Path) -> str:
    """A model folder whose byte vocabulary is not the run's."""
    from learntok import AUNet, ModelConfig

    AUNet(ModelConfig(d_model=32, n_heads=2, vocab_size=384)).save_pretrained(t / "wide")
    return "wide"


def whitespace_model(t: Path) -> str:
    """A model folder of a strategy without online rate control."""
    from learntok import AUNet, ModelConfig

    AUNet(ModelConfig(d_model=32, n_heads=2, boundary="whitespace")).save_pretrained(t / "ws")
    return "ws"


def surrogate(t: Path, field: str = "text") -> str:
    """JSON lines whose text spells a lone surrogate with an escape (valid JSON, not Unicode)."""
    (t / "sur.jsonl").write_text(
        "".join(f'{{"{field}": "line {i} \\ud800 x", "continuation": "y"}}\n' for i in range(50))
    )
    return "sur.jsonl"


def surrogate_config(t: Path) -> str:
    (t / "c.json").write_text('{"log": {"wandb": "a\\udfffb"}}')
    return "c.json"


def run_without_lock(t: Path) -> str:
    """The trained run as it is between two commands (its lock file gone with its process)."""
    (t / "run" / ".lock").unlink(missing_ok=True)
    return "run"


def shuffled_offsets(t: Path) -> str:
    """A prepared folder whose train documents' offsets go down (two swapped): not prepare's."""
    shutil.copytree(t / "prep", t / "shuffled")
    path = t / "shuffled" / "train_docs.npy"
    offsets = np.load(path)
    offsets[[1, 2]] = offsets[[2, 1]]
    np.save(path, offsets)
    return "shuffled"


def two_text_columns(t: Path) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = pa.array([f"document {i} " * 30 for i in range(60)])
    pq.write_table(pa.Table.from_arrays([docs, docs], names=["text", "text"]), t / "two.parquet")
    return "two.parquet"


def no_val(t: Path) -> str:
    """A prepared folder whose val split holds no document (prepare --val-fraction 0)."""
    from learntok.data.prepare import PrepareOptions, prepare

    prepare([str(t / "corpus.txt")], t / "noval", PrepareOptions(val_fraction=0, piece_bytes=1000), progress=False)
    return "noval"


def latest_names(t: Path, text: str) -> str:
    """The run's checkpoint pointer (checkpoints/latest) holding `text`."""
    (t / "run" / "checkpoints" / "latest").write_text(text)
    return "run"


def link_loop(t: Path, name: str) -> str:
    """A symbolic link at `name` to itself: resolving it never ends (ELOOP)."""
    path = t / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.symlink_to(path.name)
    return name


def shard_link_loop(t: Path) -> str:
    """A prepared folder whose first train shard is a symbolic link to itself."""
    shutil.copytree(t / "prep", t / "looped")
    return link_loop(t, "looped/train_00000.bin").split("/")[0]


TRAIN = ["train", "--preset", "tiny", *TINY]
# (id, setup(tmp) -> args, words in the error); tmp holds run/, corpus.txt, task.jsonl, prep/
CASES = [
    # data can be lost or silently mixed
    ("train-out-foreign-folder", lambda t: [*TRAIN, "data.source=corpus.txt", "--out", user_folder(t)], "not empty"),
    (
        "train-out-run-without-checkpoints",
        lambda t: [*TRAIN, "data.source=corpus.txt", "--out", run_without_checkpoints(t)],
        "no checkpoint",
    ),
    (
        "train-resume-run-without-checkpoints",
        lambda t: ["train", "--out", run_without_checkpoints(t), "--resume"],
        "run",
    ),
    (
        "train-unfinished-prepared-folder",
        lambda t: [*TRAIN, f"data.source={unfinished_prepared(t)}", "--out", "new"],
        "unfinished prepared folder",
    ),
    (
        "prepare-unfinished-prepared-folder",
        lambda t: ["prepare", unfinished_prepared(t), "--out", "new"],
        "unfinished prepared folder",
    ),
    ("compare-empty-strategies", lambda t: ["compare", "--strategies", "", "--out", existing_comparison(t)], "strateg"),
    ("compare-steps-0", lambda t: ["compare", "--strategies", "uniform", "--steps", "0", "--out", "c"], "--steps"),
    ("eval-max-bytes-0", lambda t: ["eval", "run", "--max-bytes", "0"], "--max-bytes"),
    ("resume-steps-below-checkpoint", lambda t: ["train", "--out", "run", "--resume", "train.steps=2"], "step 3"),
    # tracebacks where a user made a mistake
    (
        "train-truncated-jsonl-gz",
        lambda t: [*TRAIN, f"data.source={jsonl_gz_truncated(t)}", "--out", "new"],
        "cut.jsonl.gz",
    ),
    ("train-gz-not-gzip", lambda t: [*TRAIN, f"data.source={gz_not_gzip(t)}", "--out", "new"], "gzip"),
    ("train-jsonl-bad-utf8", lambda t: [*TRAIN, f"data.source={jsonl_bad_utf8(t)}", "--out", "new"], "UTF-8"),
    ("prepare-truncated-jsonl-gz", lambda t: ["prepare", jsonl_gz_truncated(t), "--out", "new"], "cut.jsonl.gz"),
    ("prepare-gz-not-gzip", lambda t: ["prepare", gz_not_gzip(t), "--out", "new"], "gzip"),
    ("prepare-jsonl-bad-utf8", lambda t: ["prepare", jsonl_bad_utf8(t), "--out", "new"], "UTF-8"),
    ("eval-tasks-truncated-jsonl-gz", lambda t: ["eval-tasks", "run", "--task", jsonl_gz_truncated(t)], "cut.jsonl.gz"),
    ("eval-tasks-gz-not-gzip", lambda t: ["eval-tasks", "run", "--task", gz_not_gzip(t)], "gzip"),
    ("eval-tasks-jsonl-bad-utf8", lambda t: ["eval-tasks", "run", "--task", jsonl_bad_utf8(t)], "UTF-8"),
    ("eval-tasks-binary-file", lambda t: ["eval-tasks", "run", "--task", binary_file(t)], "blob.jsonl"),
    ("train-unknown-boundary", lambda t: [*TRAIN, "model.boundary=foo", "--out", "new"], "foo"),
    ("train-config-not-utf8", lambda t: ["train", "--config", latin1_config(t), "--out", "new"], "UTF-8"),
    ("train-out-is-a-file", lambda t: [*TRAIN, "data.source=corpus.txt", "--out", "corpus.txt"], "file"),
    ("prepare-out-is-a-file", lambda t: ["prepare", "corpus.txt", "--out", "task.jsonl"], "file"),
    ("compare-out-is-a-file", lambda t: ["compare", "--strategies", "uniform", "--out", "corpus.txt"], "file"),
    (
        "eval-run-config-unknown-strategy",
        lambda t: edit_run_config(t, lambda c: {**c, "model": {**c["model"], "boundary": "nosuch"}}) or ["eval", "run"],
        "nosuch",
    ),
    (
        "sample-run-config-is-a-list",
        lambda t: edit_run_config(t, lambda c: [c]) or ["sample", "run", "--prompt", "a"],
        "config.json",
    ),
    ("sample-top-p-0", lambda t: ["sample", "run", "--prompt", "a", "--top-p", "0"], "--top-p"),
    (
        "train-index-without-splits",
        lambda t: [*TRAIN, f"data.source={index_without_splits(t)}", "--out", "new"],
        "splits",
    ),
    ("train-object-dtype-npy", lambda t: [*TRAIN, f"data.source={object_npy(t)}", "--out", "new"], "train_docs.npy"),
    (
        "train-json-is-a-folder",
        lambda t: [*TRAIN, "data.source=corpus.txt", "--out", "new", "--json", "prep"],
        "--json",
    ),
    ("eval-json-is-a-folder", lambda t: ["eval", "run", "--json", "prep"], "--json"),
    ("segment-json-is-a-folder", lambda t: ["segment", "run", "text", "--json", "prep"], "--json"),
    ("sample-json-is-a-folder", lambda t: ["sample", "run", "--prompt", "a", "--json", "prep"], "--json"),
    ("segment-html-in-missing-folder", lambda t: ["segment", "run", "text", "--html", "no/such/page.html"], "--html"),
    # misleading or silently accepted
    ("eval-device-unknown", lambda t: ["eval", "run", "--device", "nosuch"], "unknown device"),
    ("sample-max-bytes-negative", lambda t: ["sample", "run", "--prompt", "a", "--max-bytes", "-1"], "--max-bytes"),
    (
        "sample-temperature-negative",
        lambda t: ["sample", "run", "--prompt", "a", "--temperature", "-1"],
        "--temperature",
    ),
    (
        "sample-temperature-beyond-float32",
        lambda t: ["sample", "run", "--prompt", "a", "--temperature", "1e308"],
        "--temperature",
    ),
    ("sample-top-p-0", lambda t: ["sample", "run", "--prompt", "a", "--top-p", "0"], "--top-p"),
    ("sample-top-p-above-1", lambda t: ["sample", "run", "--prompt", "a", "--top-p", "1.5"], "--top-p"),
    ("sample-top-k-0", lambda t: ["sample", "run", "--prompt", "a", "--top-k", "0"], "--top-k"),
    ("segment-window-negative", lambda t: ["segment", "run", "text", "--window", "-5"], "--window"),
    ("eval-window-negative", lambda t: ["eval", "run", "--window", "-5"], "--window"),
    (
        "eval-tasks-window-negative",
        lambda t: ["eval-tasks", "run", "--task", "task.jsonl", "--window", "-5"],
        "--window",
    ),
    ("eval-tasks-limit-0", lambda t: ["eval-tasks", "run", "--task", "task.jsonl", "--limit", "0"], "--limit"),
    ("train-unknown-argument", lambda t: [*TRAIN, "--bogus", "--out", "new"], "--bogus"),
    ("sample-stray-override", lambda t: ["sample", "run", "--prompt", "a", "train.steps=3"], "train.steps=3"),
    # options and inputs added by issues 9, 12 and 13
    ("train-threads-negative", lambda t: [*TRAIN, "--threads", "-1", "--out", "new"], "--threads"),
    ("train-other-strategys-option", lambda t: [*TRAIN, "strategy.temperature=0.5", "--out", "new"], "temperature"),
    ("train-steps-0-no-budget", lambda t: [*TRAIN, "train.steps=0", "--out", "new"], "train_bytes"),
    ("compare-jobs-0", lambda t: ["compare", "--strategies", "uniform", "--jobs", "0", "--out", "c"], "--jobs"),
    (
        "compare-rates-out-of-range",
        lambda t: ["compare", "--strategies", "uniform", "--rates", "1.5", "--out", "c"],
        "rate",
    ),
    (
        "compare-shared-option-of-no-variant",
        lambda t: ["compare", "--strategies", "uniform", "strategy.temperature=0.5", "--out", "c"],
        "temperature",
    ),
    ("eval-rate-out-of-range", lambda t: ["eval", "run", "--rate", "1.5"], "--rate"),
    ("segment-rate-zero", lambda t: ["segment", "run", "text", "--rate", "0"], "--rate"),
    (
        "segment-two-texts",
        lambda t: ["segment", "run", "text", "--greedy", "more text"],
        "unrecognized arguments: more text",
    ),
    (
        "prepare-piece-bytes-0",
        lambda t: ["prepare", "corpus.txt", "--out", "new", "--piece-bytes", "0"],
        "--piece-bytes",
    ),
    # one row of each kind of guard, as a user meets it (the kinds are tables in test_guards.py)
    (
        "eval-json-over-the-weights",
        lambda t: ["eval", "run", "--json", "run/checkpoints/step_0000003/model.safetensors"],
        "checkpoint folder",
    ),
    (
        "sample-json-over-latest",
        lambda t: ["sample", "run", "--prompt", "a", "--json", "run/checkpoints/latest"],
        "checkpoints of a run",
    ),
    (
        "segment-html-over-the-run-config",
        lambda t: ["segment", "run", "text", "--html", "run/config.toml"],
        "config.toml",
    ),
    (
        "train-json-over-its-source",
        lambda t: [*TRAIN, "data.source=corpus.txt", "--out", "new", "--json", "corpus.txt"],
        "input of this command",
    ),
    ("train-source-a-fifo", lambda t: os.mkfifo(t / "pipe") or [*TRAIN, "data.source=pipe", "--out", "new"], "FIFO"),
    ("prepare-a-fifo", lambda t: os.mkfifo(t / "pipe") or ["prepare", "pipe", "--out", "new"], "FIFO"),
    ("train-source-dev-zero", lambda t: [*TRAIN, "data.source=/dev/zero", "--out", "new"], "device"),
    ("train-source-empty", lambda t: [*TRAIN, "data.source=", "--out", "new"], "data.source is empty"),
    ("eval-seq-len-beyond-memory", lambda t: ["eval", "run", "--seq-len", "100000000"], "100000000 bytes needs"),
    ("train-config-a-folder", lambda t: ["train", "--config", "prep", "--out", "new"], "is a folder, not a file"),
    ("eval-device-meta", lambda t: ["eval", "run", "--device", "meta"], "not supported"),
    (
        "eval-latest-outside-the-run",
        lambda t: (t / "run" / "checkpoints" / "latest").write_text("../../elsewhere\n") and ["eval", "run"],
        "only its own checkpoints",
    ),
    # values out of their declared range, by kind (the property over every key: tests/test_values.py)
    ("train-n-heads-0", lambda t: [*TRAIN, "model.n_heads=0", "--out", "new"], "model.n_heads 0 must be >= 1"),
    ("train-d-bytes-negative", lambda t: [*TRAIN, "model.d_bytes=-8", "--out", "new"], "d_bytes"),
    # widths that the heads do not divide into even head sizes, at either level
    ("train-d-bytes-heads", lambda t: [*TRAIN, "model.d_bytes=15", "--out", "new"], "d_bytes 15 is not a multiple"),
    ("train-d-bytes-odd-head", lambda t: [*TRAIN, "model.d_bytes=18", "--out", "new"], "head size d_bytes"),
    ("train-seed-beyond-int64", lambda t: [*TRAIN, "train.seed=18446744073709551616", "--out", "new"], "train.seed"),
    (
        "train-config-lr-nan",
        lambda t: ["train", "--config", deep_file(t, "nan.toml", "[optim]\nlr = nan\n"), "--out", "new"],
        "optim.lr nan must be a finite number",
    ),
    ("train-source-not-utf8", lambda t: [*TRAIN, "data.source=caf\udce9.txt", "--out", "new"], "not UTF-8"),
    ("sample-temperature-nan", lambda t: ["sample", "run", "--prompt", "a", "--temperature", "nan"], "--temperature"),
    ("sample-top-p-nan", lambda t: ["sample", "run", "--prompt", "a", "--top-p", "nan"], "--top-p"),
    (
        "train-strategy-window-0",
        lambda t: [*TRAIN, "strategy.window=0", "--out", "new"],
        "strategy.window 0 must be >= 1",
    ),
    (
        "train-old-policy-window-0",
        lambda t: [*TRAIN, "model.policy_window=0", "--out", "new"],
        "strategy.window 0 must be >= 1",
    ),
    (
        "train-nawrot-hidden-mult-0",
        lambda t: [*TRAIN, "model.boundary=nawrot", "strategy.hidden_mult=0", "--out", "new"],
        "strategy.hidden_mult 0.0 must be > 0",
    ),
    ("config-lr-0", lambda t: ["config", "optim.lr=0"], "optim.lr 0.0 must be in (0, 10000]"),
    ("usage-said-once", lambda t: ["nosuch"], "invalid choice"),
    # nested 200,000 deep: a config, a run's config.json, a task file (every reader: tests/test_values.py)
    (
        "train-config-json-nested",
        lambda t: ["train", "--config", deep_file(t, "deep.json"), "--out", "new"],
        "nested too deeply",
    ),
    ("eval-run-config-nested", lambda t: ["eval", deep_run_config(t)], "nested too deeply"),
    (
        "eval-tasks-task-nested",
        lambda t: ["eval-tasks", "run", "--task", deep_file(t, "deep.jsonl")],
        "nested too deeply",
    ),
    # corrupt or incomplete files of other formats (every state.pt key: tests/test_faults.py)
    (
        "prepare-parquet-cut",
        lambda t: ["prepare", bad_parquet(t), "--out", "new"],
        "cut.parquet: cannot be read as parquet",
    ),
    (
        "resume-state-without-rng",
        lambda t: (
            edit_state(t, lambda s: {k: v for k, v in s.items() if k != "rng"})
            or ["train", "--out", "run", "--resume", "train.steps=4"]
        ),
        "incomplete: it lacks rng",
    ),
    # a full disk (the file existed before: /dev/full)
    (
        "segment-json-dev-full",
        lambda t: ["segment", "run", "abc", "--json", "/dev/full"],
        "cannot write /dev/full: no space left on device",  # as every output file says it
    ),
    # finished runs compared, and the boundary swap
    ("compare-runs-missing-folder", lambda t: ["compare", "--runs", "run", "nosuch"], "--runs nosuch: no such folder"),
    ("compare-runs-not-a-run", lambda t: ["compare", "--runs", "run", "prep"], "--runs prep"),
    (
        "compare-runs-model-folder",
        lambda t: ["compare", "--runs", "run", wider_vocabulary(t)],
        "not a training checkpoint",
    ),
    ("compare-runs-one-run", lambda t: ["compare", "--runs", "run"], "at least two"),
    (
        "compare-runs-with-training-options",
        lambda t: ["compare", "--runs", "run", "run", "--seeds", "2", "train.steps=4"],
        "drop the training options (--seeds, key=value overrides)",
    ),
    ("compare-neither-strategies-nor-runs", lambda t: ["compare", "--out", "c"], "--strategies"),
    ("eval-boundaries-from-missing-run", lambda t: ["eval", "run", "--boundaries-from", "no/such/run"], "no/such/run"),
    ("eval-boundaries-from-bad-name", lambda t: ["eval", "run", "--boundaries-from", "unifrom"], "or give 'uniform'"),
    (
        "eval-boundaries-from-not-a-run",
        lambda t: ["eval", "run", "--boundaries-from", "prep"],
        "--boundaries-from prep",
    ),
    (
        "eval-boundaries-from-other-vocabulary",
        lambda t: ["eval", "run", "--boundaries-from", wider_vocabulary(t)],
        "byte vocabulary",
    ),
    (
        "eval-boundaries-from-with-rate",
        lambda t: ["eval", "run", "--boundaries-from", "uniform", "--rate", "0.3"],
        "--rate",
    ),
    # rate modes (docs/rate.md)
    (
        "eval-rate-mode-without-rate",
        lambda t: ["eval", "run", "--rate-mode", "online"],
        "--rate-mode online needs --rate",
    ),
    (
        "sample-rate-mode-unknown",
        lambda t: ["sample", "run", "--prompt", "a", "--rate", "0.2", "--rate-mode", "fast"],
        "--rate-mode",
    ),
    (
        "segment-rate-mode-online-without-control",
        lambda t: ["segment", whitespace_model(t), "some text", "--rate", "0.2", "--rate-mode", "online"],
        "no online rate control",
    ),
    (  # refused before the reference BPE is trained (no progress line first)
        "eval-online-rate-without-control",
        lambda t: ["eval", whitespace_model(t), "--source", "corpus.txt", "--rate", "0.2", "--rate-mode", "online"],
        "no online rate control",
    ),
    # rate-conditioned training (docs/rate.md)
    (
        "train-rate-conditioned-uniform",
        lambda t: [*TRAIN, "model.boundary=uniform", "model.rate_conditioned=true", "--out", "new"],
        "cannot be rate-conditioned",
    ),
    (
        "train-rate-range-reversed",
        lambda t: [*TRAIN, "model.rate_conditioned=true", "model.rate_range=0.3,0.1", "--out", "new"],
        "rate_range",
    ),
    ("train-rate-range-one-rate", lambda t: [*TRAIN, "model.rate_range=0.2", "--out", "new"], "rate_range"),
    (
        "train-rows-per-rate-1",
        lambda t: [*TRAIN, "model.rate_conditioned=true", "model.rows_per_rate=1", "--out", "new"],
        "rows_per_rate",
    ),
    (
        "train-rate-conditioned-not-a-bool",
        lambda t: [*TRAIN, "model.rate_conditioned=maybe", "--out", "new"],
        "rate_conditioned",
    ),
    # learntok config
    ("config-unknown-key", lambda t: ["config", "--preset", "147M", "train.bogus=1"], "train.bogus"),
    ("config-bad-value", lambda t: ["config", "train.steps=many"], "train.steps=many"),
    ("config-unknown-preset", lambda t: ["config", "--preset", "1B"], "'1B'"),
    ("config-plan-bad-value", lambda t: ["config", "--plan", "model.d_model=130"], "n_heads"),
    ("config-plan-mfu-0", lambda t: ["config", "--plan", "--mfu", "0"], "--mfu"),
    ("config-mfu-without-plan", lambda t: ["config", "--mfu", "0.4"], "--mfu 0.4 needs --plan"),
    ("segment-rate-mode-without-rate", lambda t: ["segment", "run", "hi", "--rate-mode", "online"], "needs --rate"),
    ("compare-seeds-empty-item", lambda t: ["compare", "--strategies", "fixed", "--seeds", "1,,2"], "empty item"),
    ("config-unknown-argument", lambda t: ["config", "--bogus"], "config: unrecognized arguments: --bogus"),
    # values that pass their range but not their meaning (config.check_meaning, ByteData.check_window)
    ("train-val-fraction-0", lambda t: [*TRAIN, "data.val_fraction=0", "--out", "new"], "val split is empty"),
    ("train-val-fraction-0-prepared", lambda t: [*TRAIN, f"data.source={no_val(t)}", "--out", "new"], "val split"),
    (
        "train-rows-per-rate-not-dividing",
        lambda t: [*TRAIN, "model.rate_conditioned=true", "model.rows_per_rate=3", "--out", "new"],
        "rows_per_rate 3 does not divide",
    ),
    ("train-n-mid-huge", lambda t: [*TRAIN, "model.n_mid=1000000", "--out", "new"], "blocks"),
    ("config-n-up-huge", lambda t: ["config", "model.n_up=5000"], "blocks"),
    ("train-weights-beyond-memory", lambda t: [*TRAIN, "model.d_model=40000", "--out", "new"], "GiB"),
    ("train-batch-size-huge", lambda t: [*TRAIN, "train.batch_size=100000000000", "--out", "new"], "batch_size"),
    ("train-preset-empty", lambda t: ["train", "--preset", "", *TINY, "--out", "new"], "--preset is empty"),
    ("compare-preset-empty", lambda t: ["compare", "--strategies", "uniform", "--preset", ""], "--preset is empty"),
    ("prepare-text-field-empty", lambda t: ["prepare", "corpus.txt", "--out", "n", "--text-field", ""], "empty"),
    ("eval-samples-huge", lambda t: ["eval", "run", "--samples", "1000000000"], "--samples"),
    ("eval-bpe-vocab-huge", lambda t: ["eval", "run", "--bpe-vocab", "1000000000"], "--bpe-vocab"),
    ("eval-bpe-vocab-below-the-bytes", lambda t: ["eval", "run", "--bpe-vocab", "1"], "--bpe-vocab"),
    (
        "train-bpe-vocab-below-the-bytes",
        lambda t: [*TRAIN, "model.boundary=bpe", "strategy.vocab_size=255", "--out", "n"],
        "vocab_size 255",
    ),
    ("diagnose-samples-huge", lambda t: ["diagnose", "run", "--samples", "1000000000"], "--samples"),
    ("diagnose-batches-huge", lambda t: ["diagnose", "run", "--batches", "1000000000"], "--batches"),
    (
        "train-bpe-vocab-huge",
        lambda t: [*TRAIN, "model.boundary=bpe", "strategy.vocab_size=1000000000", "--out", "n"],
        "vocab",
    ),
    # text that is not Unicode: a lone surrogate spelt by a JSON escape, at every JSON reader (structured.parse_json)
    ("train-jsonl-lone-surrogate", lambda t: [*TRAIN, f"data.source={surrogate(t)}", "--out", "new"], "lone surrogate"),
    ("prepare-jsonl-lone-surrogate", lambda t: ["prepare", surrogate(t), "--out", "new"], "lone surrogate"),
    ("eval-source-lone-surrogate", lambda t: ["eval", "run", "--source", surrogate(t)], "lone surrogate"),
    ("eval-tasks-lone-surrogate", lambda t: ["eval-tasks", "run", "--task", surrogate(t, "context")], "lone surrogate"),
    ("train-config-json-lone-surrogate", lambda t: ["train", "--config", surrogate_config(t)], "lone surrogate"),
    (
        "eval-run-config-lone-surrogate",
        lambda t: edit_run_config(t, lambda c: {**c, "data": {**c["data"], "source": "x\ud800"}}) or ["eval", "run"],
        "lone surrogate",
    ),
    # folders and files that belong to something else (cli.outputs.check_outputs, shards.open_split, corpora)
    ("compare-out-a-train-run", lambda t: ["compare", "--strategies", "uniform", "--out", "run"], "training run"),
    ("prepare-out-a-train-run", lambda t: ["prepare", "corpus.txt", "--out", run_without_lock(t)], "training run"),
    ("plot-out-a-train-run", lambda t: ["plot", "run", "--out", "run"], "input of this command"),
    ("plot-a-text-file", lambda t: ["plot", "corpus.txt"], "corpus.txt"),
    (
        "train-prepared-offsets-decrease",
        lambda t: [*TRAIN, f"data.source={shuffled_offsets(t)}", "--out", "n"],
        "below",
    ),
    ("eval-prepared-offsets-decrease", lambda t: ["eval", "run", "--source", shuffled_offsets(t)], "below"),
    ("prepare-parquet-two-text-columns", lambda t: ["prepare", two_text_columns(t), "--out", "n"], "2 columns"),
    ("train-parquet-two-text-columns", lambda t: [*TRAIN, f"data.source={two_text_columns(t)}", "--out", "n"], "2 col"),
    ("compare-sweep-without-rates", lambda t: ["compare", "--strategies", "uniform", "--sweep", "uniform"], "--rates"),
    # symbolic links that loop where a path built from a name is resolved (files.resolved: inside, resolve)
    (
        "eval-latest-names-a-link-loop",
        lambda t: link_loop(t, "run/checkpoints/loop") and ["eval", latest_names(t, "loop")],
        "symbolic links loop",
    ),
    (
        "compare-variant-folder-a-link-loop",
        lambda t: ["compare", "--strategies", "uniform", "--out", link_loop(t, "c/uniform").split("/")[0]],
        "symbolic links loop",
    ),
    (
        "compare-seed-folder-a-link-loop",
        lambda t: [
            "compare",
            "--strategies",
            "uniform",
            "--seeds",
            "1",
            "--out",
            link_loop(t, "c/uniform/seed0").split("/")[0],
        ],
        "symbolic links loop",
    ),
    ("train-prepared-shard-a-link-loop", lambda t: [*TRAIN, f"data.source={shard_link_loop(t)}", "--out", "n"], "loop"),
    # a checkpoint pointer that holds no folder's name (pretrained.resolve)
    ("eval-latest-holds-a-nul", lambda t: ["eval", latest_names(t, "step_0000003\0x")], "not a checkpoint folder's"),
    ("eval-latest-holds-two-names", lambda t: ["eval", latest_names(t, "step_0000003\nstep_0000000\n")], "not a check"),
    # an empty item in a comma-separated list, wherever one is read (typed_fields.comma_list)
    ("compare-rates-empty-item", lambda t: ["compare", "--strategies", "uniform", "--rates", "0.2,,0.3"], "empty item"),
    ("compare-strategies-empty-item", lambda t: ["compare", "--strategies", "uniform,,fixed"], "empty item"),
    ("config-tuple-empty-item", lambda t: ["config", "optim.betas=0.9,,0.95"], "optim.betas '0.9,,0.95': an empty"),
    ("train-tuple-leading-comma", lambda t: [*TRAIN, "model.rate_range=,0.1,0.3", "--out", "n"], "empty item"),
    # a device this machine lacks, named in a config (runtime.resolve_device; --device: tests/test_guards.py)
    ("train-device-cpu-1", lambda t: [*TRAIN, "data.source=corpus.txt", "system.device=cpu:1", "--out", "n"], "cpu:1"),
    # options that exclude each other
    ("config-keys-and-plan", lambda t: ["config", "--keys", "--plan"], "--plan: not allowed with argument --keys"),
]


# Rows whose fix lands with another change; strict, so the marker must go when it does.
@pytest.mark.parametrize("make_args, words", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(base, tmp_path, make_args, words):
    for name in ("run", "prep"):
        shutil.copytree(base / name, tmp_path / name)
    for name in ("corpus.txt", "task.jsonl"):
        shutil.copy(base / name, tmp_path / name)
    args = make_args(tmp_path)
    before = checksums(tmp_path)
    r = run_cli(*args, cwd=tmp_path)
    assert_one_line_error(r.returncode, r.stderr, words, before, checksums(tmp_path))


def test_overrides_anywhere_among_the_options(base, tmp_path):
    shutil.copy(base / "corpus.txt", tmp_path / "corpus.txt")
    r = run_cli(
        "train",
        "--preset",
        "tiny",
        "data.source=corpus.txt",
        "--out",
        "r",
        *TINY[:-2],
        "--json",
        "s.json",
        "train.steps=2",
        "log.eval_bytes=512",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp_path / "s.json").read_text())["step"] == 2


def test_optional_positional_after_options():
    """`segment RUN --rate 0.3 "text"`: the text after an option is still the text (argparse
    alone leaves it over as an unrecognized argument)."""
    from learntok.cli import parse_args

    for argv in (["segment", "R", "--rate", "0.3", "a b"], ["segment", "R", "a b", "--rate", "0.3"]):
        args = parse_args(argv)
        assert (args.model, args.text, args.rate) == ("R", b"a b", 0.3)  # text for the model: its bytes
    assert parse_args(["segment", "R", "--greedy"]).text is None


# Every option of plain text, of every command (enumerated from the parsers), given empty.
NEEDS = {"segment": ["run", "t"], "eval": ["run"], "eval-tasks": ["run", "--task", "task.jsonl"], "diagnose": ["run"]}
NEEDS |= {"plot": ["run"], "sample": ["run", "--prompt", "a"], "prepare": ["corpus.txt", "--out", "n"]}


def text_options() -> list[tuple[str, str]]:
    from learntok.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    return [
        (name, a.option_strings[-1])
        for name, p in commands.items()
        for a in p._actions
        if a.type is str and a.option_strings
    ]


@pytest.mark.parametrize("command, option", text_options())
def test_every_text_option_given_empty_is_one_line(workdir, capsys, command, option):
    from conftest import cli_in_process

    before = checksums(workdir)
    code, err = cli_in_process([command, *NEEDS.get(command, []), option, ""], capsys)
    assert_one_line_error(code, err, f"{option} is empty", before, checksums(workdir))


def comma_list_readers() -> list[tuple[str, object]]:
    """Every reader of a comma-separated list a user writes: --seeds, --strategies, --rates, and an
    override of each tuple field of every config section (enumerated from the dataclasses)."""
    import typing

    from learntok.compare.runner import parse_seeds, variants_from_args
    from learntok.run.config import SECTIONS, defaults, parse_overrides
    from learntok.util.typed_fields import field_types

    readers = [
        ("--seeds", parse_seeds),
        ("--strategies", lambda text: variants_from_args(text, False)),
        ("--rates", lambda text: variants_from_args("uniform", False, text)),
    ]
    for section, cls in SECTIONS.items():
        for name, tp in field_types(cls).items():
            if typing.get_origin(tp) is tuple:
                key = f"{section}.{name}"
                readers.append((key, lambda text, key=key: parse_overrides(defaults(), [f"{key}={text}"])))
    return readers


# An empty item anywhere in a comma-separated list but last (`1,,2`, `,1`, `1, ,2`) is a typo at every
# reader of such lists (typed_fields.comma_list): one ConfigError naming the list, never the item dropped.
@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from(["1", "2", " 3", "0.2 ", "uniform"]), min_size=1, max_size=4),
    st.integers(0, 3),
    st.sampled_from(["", " ", "  "]),
)
def test_every_comma_list_refuses_an_empty_item(items, at, blank):
    import re

    from learntok.util.errors import ConfigError
    from learntok.util.typed_fields import comma_list

    assert comma_list(",".join(items), "x") == comma_list(",".join(items) + ",", "x") == [i.strip() for i in items]
    at %= len(items)  # the empty item stands before at least one item (a trailing comma is allowed)
    text = ",".join([*items[:at], blank, *items[at:]])
    for what, read in comma_list_readers():
        with pytest.raises(ConfigError, match=rf"^{re.escape(what)} .*: an empty item in the list"):
            read(text)


# Any Python str, lone surrogates included, at the one Unicode check of every text reader.
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=())))
def test_every_text_reader_takes_unicode_and_refuses_the_rest(s):
    from learntok.util import unicode as parameters
    from learntok.util.errors import FormatError
    from learntok.util.json_toml import parse_json

    try:
        s.encode("utf-8")
        unicode = True
    except UnicodeEncodeError:
        unicode = False
    if unicode:
        assert parse_json(json.dumps({s: [s]})) == {s: [s]}
        assert parameters.text("f", "text", s) == s.encode("utf-8")
        return
    with pytest.raises(FormatError, match="lone surrogate"):
        parse_json(json.dumps({"text": [s]}))
    with pytest.raises(ValueError, match=r"^f: text must be Unicode text"):  # surrogateescape's too
        parameters.text("f", "text", s)


_MODEL = []


def _api_model():
    from conftest import tiny_model

    if not _MODEL:
        _MODEL.append(tiny_model().eval())
    return _MODEL[0]


# Every API entry point that takes text, given a str with a surrogate (U+D800..U+DFFF, the
# surrogateescape range U+DC80..U+DCFF too): a ValueError naming the entry point and argument,
# never a UnicodeEncodeError or a byte made up from the surrogate.
@settings(max_examples=40, deadline=None)
@given(
    st.text(max_size=6),
    st.one_of(st.integers(0xD800, 0xDFFF), st.integers(0xDC80, 0xDCFF)).map(chr),
    st.text(max_size=6),
)
def test_every_api_text_refuses_a_surrogate(before, surrogate, after):
    from learntok import Tokenizer
    from learntok.data import DataConfig, encode
    from learntok.data.dataset import path_bytes_only

    s = before + surrogate + after
    model = _api_model()
    entries = [
        (lambda: Tokenizer(model).encode(s), r"Tokenizer.encode: text"),
        (lambda: Tokenizer(model).encode(["ok", s]), r"Tokenizer.encode: text\[1\]"),
        (lambda: model(s), r"AUNet: x"),
        (lambda: model.forward(s), r"AUNet: x"),
        (lambda: encode(s), r"learntok.data.encode: text"),
        (lambda: model.generate(s, max_bytes=1), r"generate: prompt"),
        *([] if path_bytes_only(s) else [(lambda: DataConfig(source=s), r"DataConfig.source")]),
        (lambda: DataConfig(text_field=s), r"DataConfig.text_field"),
    ]
    for call, name in entries:
        with pytest.raises(ValueError, match=rf"^{name} .*(Unicode|UTF-8) text"):
            call()
    if path_bytes_only(s):  # a path's bytes as os.fsdecode gives them: the path, not text
        assert DataConfig(source=s).source == s


def test_tokenizer_encode_names_a_text_that_is_not_unicode():
    from conftest import tiny_model
    from learntok import Tokenizer

    tok = Tokenizer(tiny_model())
    for text, name in (("\ud800abc", "text"), (["ok", "a\udfff"], r"text\[1\]")):
        with pytest.raises(ValueError, match=rf"^Tokenizer.encode: {name} must be Unicode text"):
            tok.encode(text)


# --help and --version write to stdout as every report does: a full disk is the same one line.
@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["train", "--help"]])
@pytest.mark.parametrize("buffered", [True, False])
def test_help_and_version_on_a_full_disk_are_one_line(tmp_path, argv, buffered):
    import subprocess
    import sys

    from conftest import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "" if buffered else "1"}
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [sys.executable, "-m", "learntok", *argv], stdout=full, stderr=subprocess.PIPE, text=True, env=env
        )
    assert_one_line_error(r.returncode, r.stderr, "no space left on device", {}, {})


# Memory that runs out, anywhere in a command (here past torch, in the library's import and the
# run's start): one line and exit 2, never a MemoryError traceback.
OUT_OF_MEMORY = """
import resource, sys
import torch  # loaded first: the limit falls on what the command allocates after it
size = int([line for line in open("/proc/self/status") if line.startswith("VmSize")][0].split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + 20 * 2**20,) * 2)
from learntok.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_out_of_memory_is_one_line(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-c", OUT_OF_MEMORY, "train", "--preset", "tiny", "train.steps=2", "--out", "r"]
    r = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert_one_line_error(r.returncode, r.stderr, "out of memory", {}, {})


# The process's own edges: a standard stream its parent closed, for every command.
@pytest.mark.parametrize("command", ["config", "segment", "eval", "sample", "plot", "train"])
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_closed_standard_stream_is_refused_before_any_work(base, tmp_path, command, stream):
    import subprocess
    import sys

    shutil.copytree(base / "run", tmp_path / "run")
    args = {"segment": ["run", "hi"], "eval": ["run"], "sample": ["run", "--prompt", "a"], "plot": ["run"]}
    before = checksums(tmp_path)
    code = f"import os, sys; os.close({1 if stream == 'stdout' else 2}); os.execv(sys.executable, sys.argv[1:])"
    argv = [sys.executable, "-c", code, sys.executable, "-m", "learntok", command, *args.get(command, [])]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=stream == "stdout", text=True, timeout=120)
    assert r.returncode == 2
    if stream == "stdout":
        assert_one_line_error(r.returncode, r.stderr, "standard output is closed", before, checksums(tmp_path))
    assert checksums(tmp_path) == before


def test_eval_at_a_rate_says_it_calibrated_on_the_split_it_scores(base, tmp_path):
    shutil.copytree(base / "run", tmp_path / "run")
    r = run_cli("eval", "run", "--rate", "0.3", cwd=tmp_path)  # the test split, by default
    assert r.returncode == 0, r.stderr[-2000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("rate: target"))
    assert "bytes of the test split scored" in line and "val" not in line, line


# ---------------------------------------------------------------- the process's environment

# A bad value of every variable learntok reads (learntok.util.environment.VARIABLES), and the words
# its one line holds; the launch variables have more rows in tests/test_run_integrity.py.
WORLD = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "29500"}
BAD_ENVIRONMENT = {
    "WORLD_SIZE": [({"WORLD_SIZE": "two"}, "WORLD_SIZE"), ({"WORLD_SIZE": "0"}, "WORLD_SIZE")],
    "RANK": [({"RANK": "-1"}, "RANK"), ({"WORLD_SIZE": "2", "RANK": "5"}, "RANK")],
    "LOCAL_RANK": [({"LOCAL_RANK": "x"}, "LOCAL_RANK")],
    "MASTER_ADDR": [
        ({**WORLD, "MASTER_ADDR": "no-such-host.invalid"}, "does not resolve"),
        ({**WORLD, "MASTER_ADDR": "a..b"}, "does not resolve"),
        ({**WORLD}, "MASTER_ADDR"),
    ],
    "MASTER_PORT": [({**WORLD, "MASTER_ADDR": "localhost", "MASTER_PORT": "99999"}, "MASTER_PORT")],
    "TQDM_MININTERVAL": [({"TQDM_MININTERVAL": "abc"}, "TQDM_MININTERVAL"), ({"TQDM_MININTERVAL": "nan"}, "TQDM")],
    "TQDM_DELAY": [({"TQDM_DELAY": "-1"}, "TQDM_DELAY"), ({"TQDM_DELAY": "inf"}, "TQDM_DELAY")],
    "LEARNTOK_JOBS_PARENT": [({"LEARNTOK_JOBS_PARENT": "abc"}, "LEARNTOK_JOBS_PARENT")],
}
for _name in BAD_ENVIRONMENT:  # set but empty (or blank) is a bad value of every variable, never "unset"
    BAD_ENVIRONMENT[_name] += [({_name: ""}, f"{_name} is set but empty"), ({_name: " "}, f"{_name} is set but empty")]


def test_every_environment_variable_has_bad_values_in_the_table():
    from learntok.util.environment import VARIABLES

    assert set(BAD_ENVIRONMENT) == set(VARIABLES)


@pytest.mark.parametrize("command", [["config"], ["diagnose", "run", "--samples", "1", "--batches", "1"]])
@pytest.mark.parametrize(
    "env, words",
    [pytest.param(e, w, id=f"{k}-{i}") for k, rows in BAD_ENVIRONMENT.items() for i, (e, w) in enumerate(rows)],
)
def test_a_bad_environment_variable_is_one_line_before_any_work(base, tmp_path, command, env, words, monkeypatch):
    """learntok.util.environment.check_environment, at the start of every command: one line, exit 2,
    at once (a MASTER_ADDR that does not resolve is not waited for)."""
    shutil.copytree(base / "run", tmp_path / "run")
    from learntok.util.environment import VARIABLES

    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    before = checksums(tmp_path)
    r = run_cli(*command, cwd=tmp_path, timeout=60)
    assert_one_line_error(r.returncode, r.stderr, words, before, checksums(tmp_path))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


TOML_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")))  # TOML's basic strings escape no control


@given(JSON_VALUES, st.dictionaries(st.text(alphabet="abcxyz_", min_size=1), st.integers() | TOML_TEXT, max_size=3))
def test_a_byte_order_mark_before_json_or_toml_is_read_as_the_encoding_mark(value, table):
    """Editors on Windows start a UTF-8 file with a byte-order mark: every JSON and TOML reader
    (util.json_toml) reads the text after it, as without it; a mark anywhere else is text."""
    from learntok.util.errors import FormatError
    from learntok.util.json_toml import parse_json, parse_toml

    text = json.dumps(value)
    assert parse_json("\ufeff" + text) == parse_json(text)
    toml = "[s]\n" + "".join(f"{k} = {json.dumps(v, ensure_ascii=False)}\n" for k, v in table.items())
    assert parse_toml("\ufeff" + toml) == {"s": table}
    with pytest.raises(FormatError):
        parse_toml("\ufeff\ufeff" + toml)


@pytest.mark.parametrize(
    "name, text", [("c.toml", "[model]\nd_model = 48\n"), ("c.json", '{"model": {"d_model": 48}}')]
)
def test_a_config_file_with_a_byte_order_mark_is_read(tmp_path, name, text):
    import subprocess
    import sys

    from conftest import ROOT

    (tmp_path / name).write_text("\ufeff" + text, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "learntok", "config", "--preset", "tiny", "--config", name]
    r = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "d_model = 48" in r.stdout
