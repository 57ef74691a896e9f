"""Shared test helpers: a tiny model factory, the packaged Shakespeare text, JSON-lines and small
corpus files, and the command line as a user meets it (a trained tiny run to point commands at,
the one-line-error assertion of every bad-input table). Plain functions (importable: `from
conftest import tiny_model`) and fixtures."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from learntok import AUNet, ModelConfig
from learntok.boundaries.options import kept_options
from learntok.run.config import load_config

ROOT = Path(__file__).resolve().parents[1]
if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker per core (scripts/test.sh): one thread each, or they thrash
    torch.set_num_threads(1)
CORPUS = ROOT / "learntok" / "corpora" / "shakespeare.jsonl.gz"

# The smallest model that exercises every level: two heads of width 16, one block per level.
TINY = dict(d_model=32, n_heads=2, n_down=1, n_mid=1, n_up=1, attn_window=16)


def tiny_config(boundary: str = "learned", window: int | None = None, **overrides) -> ModelConfig:
    """TINY with `overrides`; `window` is the learned policy's w (ignored by strategies without one)."""
    strategy = dict(overrides.pop("strategy", {}))
    if window is not None:
        strategy.update(kept_options({"window": window}, boundary))
    return ModelConfig(**{**TINY, "boundary": boundary, **overrides, "strategy": strategy})


def tiny_model(boundary: str = "learned", seed: int = 0, **overrides) -> AUNet:
    """A freshly initialised tiny AUNet under `seed` (in training mode, like any new module)."""
    torch.manual_seed(seed)
    return AUNet(tiny_config(boundary, **overrides))


def shakespeare(n: int, skip: int = 5000) -> bytes:
    """n bytes of real prose from the packaged corpus (its first three documents), from `skip`."""
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        text = "".join(json.loads(line)["text"] for _, line in zip(range(3), f)).encode("utf-8")
    return text[skip : skip + n]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    """One JSON object a line, gzip-compressed when the name ends in .gz."""
    text = "".join(json.dumps(r) + "\n" for r in records).encode("utf-8")
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    return path


def write_lm_eval_tasks(folder: Path, rows: list[dict], mc_text: str) -> None:
    """Two local lm-eval tasks over `rows` ({"q", "choices", "label"}): tiny_mc (multiple choice,
    `mc_text` the YAML after doc_to_text, its prompt and delimiter) and tiny_roll (each q scored
    as a rolling text, in bits per byte)."""
    write_jsonl(folder / "mc.jsonl", rows)
    common = f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {folder / 'mc.jsonl'}\ntest_split: test\n"
    (folder / "mc.yaml").write_text(
        "task: tiny_mc\n" + common + "output_type: multiple_choice\n"
        f"doc_to_text: {mc_text}doc_to_target: label\n"
        "doc_to_choice: choices\nmetric_list:\n  - metric: acc\n  - metric: acc_norm\n"
    )
    (folder / "roll.yaml").write_text(
        "task: tiny_roll\n" + common + "output_type: loglikelihood_rolling\n"
        'doc_to_text: ""\ndoc_to_target: "{{q}}"\nmetric_list:\n  - metric: bits_per_byte\n'
    )


def corpus_text(n: int = 300) -> str:
    """A small plain-text corpus: n short sentences (about 50 bytes each)."""
    return " ".join(f"the quick brown fox {i} jumps over the lazy dog." for i in range(n))


@pytest.fixture
def corpus_file(tmp_path) -> Path:
    """A small text file to train on (data.source=PATH)."""
    path = tmp_path / "corpus.txt"
    path.write_text(corpus_text())
    return path


@pytest.fixture
def train_cfg(corpus_file):
    """A run config of a few seconds on `corpus_file`: 8 steps, a checkpoint, a validation and
    segmentations every 4; `train_cfg(*overrides)`."""
    return lambda *overrides: load_config(
        overrides=[
            "model.d_model=32",
            "model.n_heads=2",
            "model.n_mid=1",
            f"data.source={corpus_file}",
            "system.device=cpu",
            "train.seq_len=48",
            "train.batch_size=4",
            "train.steps=8",
            "optim.warmup_steps=2",
            "log.log_every=1",
            "log.eval_every=4",
            "log.eval_bytes=512",
            "checkpoint.every=4",
            "log.segment_every=4",
            *overrides,
        ]
    )


# ---------------------------------------------------------------- the command line, as a user meets it

TINY_RUN = [
    "model.d_model=32",
    "model.n_heads=2",
    "train.seq_len=64",
    "train.batch_size=4",
    "train.steps=3",
    "log.eval_bytes=1024",
]  # overrides of a run that trains in about a second


def run_cli(*args, cwd, timeout: float = 300):
    """`python -m learntok ARGS` in `cwd`, as a user runs it (its own process, one thread)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "learntok", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def checksums(folder: Path) -> dict[str, str]:
    """sha256 of every file below `folder`, but run-folder locks (their content names the last
    process that held them: bookkeeping, not data) and FIFOs and devices (never read)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def assert_one_line_error(returncode: int, stderr: str, words, before: dict, after: dict) -> None:
    """What every refused command line shows: exit 2, no traceback, exactly one line on stderr,
    `learntok: error: ...`, holding `words` (a string, or a tuple of which one must appear), and
    every file that was there before unchanged."""
    assert returncode == 2, (returncode, stderr[-2000:])
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("learntok: error: "), stderr[-2000:]
    assert not lines[0].startswith("learntok: error: learntok"), lines[0]  # one prefix, never two
    assert any(w in lines[0] for w in ((words,) if isinstance(words, str) else words)), lines[0]
    assert {k: after.get(k) for k in before} == before
    assert not Path("/dev/full").is_file()  # a device named as an output is written, never renamed over


@pytest.fixture(scope="session")
def base(tmp_path_factory):
    """Made once: a trained tiny run `run/` (data.source=corpus.txt), its corpus, a valid task
    file `task.jsonl`, a folder of 40 documents `docs/` and its prepared folder `prep/`."""
    from learntok.data.prepare import prepare

    root = tmp_path_factory.mktemp("base")
    (root / "corpus.txt").write_text(" ".join(f"a line of text number {i}." for i in range(300)))
    r = run_cli("train", "--preset", "tiny", *TINY_RUN, "data.source=corpus.txt", "--out", "run", cwd=root)
    assert r.returncode == 0, r.stderr
    (root / "task.jsonl").write_text(json.dumps({"context": "a line of", "continuation": "text"}) + "\n")
    docs = root / "docs"
    docs.mkdir()
    for i in range(40):
        (docs / f"{i:02d}.txt").write_text(f"document {i}: " + "some words here. " * 20)
    prepare([str(docs)], root / "prep", progress=False)
    return root


@pytest.fixture
def workdir(base, tmp_path, monkeypatch):
    """A fresh copy of `base` as the current folder. The run stores its data.source absolute
    (learntok.data.dataset.anchored_source): the copy's configs name the copy's corpus."""
    for p in base.iterdir():
        (shutil.copytree if p.is_dir() else shutil.copy)(p, tmp_path / p.name)
    for config in [tmp_path / "run" / "config.toml", *(tmp_path / "run").glob("checkpoints/*/config.json")]:
        if config.is_file():
            config.write_text(config.read_text().replace(str(base), str(tmp_path)))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@contextlib.contextmanager
def deadline(seconds: float):
    """Fail the block (TimeoutError) if it runs longer than `seconds`: a read that blocks (a
    FIFO with no writer) ends the test instead of hanging it."""

    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: blocked?")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def cli_in_process(args: list[str], capsys, seconds: float = 120) -> tuple[int, str]:
    """(exit code, stderr) of `learntok ARGS` run by learntok.cli.main in this process (what
    `python -m learntok` runs, without starting an interpreter: the tables stay fast). An
    exception that main lets through, a traceback for a user, fails the test here."""
    from learntok.cli import main

    capsys.readouterr()
    with deadline(seconds):
        code = main([str(a) for a in args])
    return code, capsys.readouterr().err
