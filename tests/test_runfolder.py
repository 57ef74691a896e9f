"""Run-folder ownership and crash safety (docs/reliability.md, learntok.run.folder): one writer per folder,
never into a folder that is not a run, and a kill -9 at any point leaves nothing damaged: the
resumed run ends with the same metrics, segments and weights as an uninterrupted one."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from learntok.run.checkpoint import load_checkpoint
from learntok.run.config import load_config
from learntok.util.errors import RunFolderError
from learntok.run.folder import claim, release, trim_logs

ROOT = Path(__file__).resolve().parents[1]
RUN = [
    "--preset",
    "tiny",
    "model.d_model=32",
    "model.n_heads=2",
    "train.seq_len=64",
    "train.batch_size=4",
    "train.steps=8",
    "optim.warmup_steps=2",
    "log.log_every=1",
    "checkpoint.every=2",
    "log.eval_every=4",
    "log.eval_bytes=512",
    "log.segment_every=2",
    "checkpoint.keep=2",
    "data.source=corpus.txt",
]
TIMING = {"bytes_per_s", "time"}  # the figures a rerun cannot repeat

# A child that runs `learntok ARGS` after arranging to SIGKILL itself at one point of the run.
KILLER = r"""
import json, os, signal, sys
import torch
import learntok.run.checkpoint as ckpt
import learntok.run.metrics_log as metrics_log
from learntok.cli import main

point, at, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
die = lambda: os.kill(os.getpid(), signal.SIGKILL)

if point == "metrics-row":          # half a metrics row on disk, then killed
    append = metrics_log.append
    def torn_row(run_dir, kind, step, row):
        if step == at and kind == "train":
            with open(os.path.join(run_dir, "metrics.jsonl"), "a") as f:
                f.write(json.dumps({"kind": kind, "step": step, **row})[:25])
            die()
        return append(run_dir, kind, step, row)
    metrics_log.append = torn_row
elif point == "checkpoint":         # killed while state.pt of checkpoint `at` is half written
    save = torch.save
    def torn_save(obj, f, *a, **k):
        if isinstance(obj, dict) and obj.get("step") == at and "optimizer" in obj:
            out = f if hasattr(f, "write") else open(f, "wb")      # a path, or the open file checkpoint.save_torch passes
            out.write(b"PK\x03\x04 half a zip")
            out.flush()
            die()
        save(obj, f, *a, **k)
    torch.save = torn_save
elif point == "pointer":            # checkpoint `at` renamed into place, `latest` not yet moved
    write = ckpt.write_text_atomic
    def stop_before_pointer(path, text):
        if str(path).endswith("latest") and text == f"step_{at:07d}":
            die()
        write(path, text)
    ckpt.write_text_atomic = stop_before_pointer
elif point == "truncation":         # killed while the logs are cut back on resume: new file written, not renamed
    replace = os.replace
    def stop_before_rename(src, dst):
        if str(dst).endswith("metrics.jsonl"):
            die()
        replace(src, dst)
    os.replace = stop_before_rename
sys.exit(main(argv))
"""


def env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "learntok", *map(str, args)],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def killed(point, at, *args, cwd):
    r = subprocess.run(
        [sys.executable, "-c", KILLER, point, str(at), *map(str, args)],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == -signal.SIGKILL, (point, r.returncode, r.stderr[-2000:])


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "corpus.txt").write_text(" ".join(f"a line of text number {i}." for i in range(400)))
    return tmp_path


def metrics(run: Path) -> list[dict]:
    return [
        {k: v for k, v in json.loads(line).items() if k not in TIMING}
        for line in (run / "metrics.jsonl").read_text().splitlines()
    ]


def assert_whole(run: Path) -> None:
    """What a kill may leave: every metrics row but a torn last one parses, the config loads,
    and `latest` names a checkpoint that loads."""
    lines = (run / "metrics.jsonl").read_text().splitlines()
    for line in lines[:-1]:
        json.loads(line)
    load_config(file=run / "config.toml")
    load_checkpoint(run)


def test_a_kill_at_any_point_then_resume_equals_an_uninterrupted_run(folder):
    assert cli("train", *RUN, "--out", "full", cwd=folder).returncode == 0
    resume = ["train", "--out", "part", "--resume"]
    killed("checkpoint", 0, "train", *RUN, "--out", "part", cwd=folder)  # before any checkpoint: start again
    killed("metrics-row", 5, "train", *RUN, "--out", "part", cwd=folder)
    assert_whole(folder / "part")
    killed("truncation", 0, *resume, cwd=folder)
    assert_whole(folder / "part")
    killed("checkpoint", 6, *resume, cwd=folder)
    assert_whole(folder / "part")
    assert list((folder / "part" / "checkpoints").glob(".step_0000006.tmp-*"))  # the half-written one
    killed("pointer", 8, *resume, cwd=folder)
    assert_whole(folder / "part")
    r = cli(*resume, cwd=folder)
    assert r.returncode == 0, r.stderr[-2000:]

    full, part = folder / "full", folder / "part"
    assert metrics(part) == metrics(full)
    assert (part / "segments.txt").read_text() == (full / "segments.txt").read_text()
    a, b = load_checkpoint(part), load_checkpoint(full)
    assert a.step == b.step == 8 and all(torch.equal(a.model_state[k], b.model_state[k]) for k in a.model_state)
    assert not [p for p in part.rglob("*") if ".tmp-" in p.name]  # interrupted writes cleared


def test_two_trains_on_one_folder_one_runs_one_gets_an_error(folder):
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "learntok", "train", *RUN, f"train.seed={seed}", "--out", "conc"],
            cwd=folder,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(rc for rc, _ in results) == [0, 2], results
    winner = [seed for seed, (rc, _) in zip((1, 2), results) if rc == 0][0]
    loser = [err for rc, err in results if rc == 2][0].splitlines()
    assert len(loser) == 1 and loser[0].startswith("learntok: error: run folder conc")
    steps = [r["step"] for r in metrics(folder / "conc") if "loss" in r]
    assert steps == list(range(1, 9))  # one run's rows, each once
    assert load_config(file=folder / "conc" / "config.toml").train.seed == winner


def test_a_held_lock_names_its_holder_and_a_stale_one_is_taken_over(folder):
    claim(folder / "held", resume=False)
    try:
        r = cli("train", *RUN, "--out", "held", cwd=folder)
        assert r.returncode == 2 and f"in use by pid {os.getpid()}" in r.stderr and r.stderr.count("\n") == 1
    finally:
        release(folder / "held")
    (folder / "stale").mkdir()  # a lock left by a process that is gone
    (folder / "stale" / ".lock").write_text(json.dumps({"pid": 2**22 + 1, "host": "elsewhere"}))
    r = cli("train", *RUN, "train.steps=2", "--out", "stale", cwd=folder)
    assert r.returncode == 0, r.stderr[-2000:]


def test_claim_refuses_folders_that_are_not_runs(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(RunFolderError, match="not a run folder"):
        claim(tmp_path / "mine", resume=False)
    release(tmp_path / "mine")
    (tmp_path / "old").mkdir()  # a run whose checkpoints were deleted
    (tmp_path / "old" / "metrics.jsonl").write_text('{"step": 10, "loss": 1.0}\n')
    (tmp_path / "old" / ".lock").write_text("")
    with pytest.raises(RunFolderError, match="no checkpoint to resume from"):
        claim(tmp_path / "old", resume=False)
    release(tmp_path / "old")
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunFolderError, match="is a file"):
        claim(tmp_path / "file", resume=False)


def test_trim_logs_cuts_both_logs_back_to_the_step(tmp_path):
    rows = [{"step": s, "loss": 1.0 / s} for s in range(1, 7)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 7, "lo')
    (tmp_path / "segments.txt").write_text("== step 2\n[rate] a|b\n== step 4\n[rate] c|d\n== step 6\n[rate] e|f\n")
    trim_logs(tmp_path, 4)
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
    assert (tmp_path / "segments.txt").read_text() == "== step 2\n[rate] a|b\n== step 4\n[rate] c|d\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "segments.txt"]


@pytest.mark.parametrize(
    "step, then",
    [
        ("training_data", "train"),  # 3: nothing written but the lock: a fresh train may start
        ("build_engine", "train"),  # 4
        ("open_run", "train"),  # 6
        ("train_steps", "resume"),  # 7: the step-0 checkpoint is there: another process resumes it
        ("claim", "train"),  # 2: the folder refused after its lock was taken (not a fresh run's)
    ],
)
def test_a_train_that_raises_gives_its_folder_back_while_its_process_lives(folder, monkeypatch, step, then):
    """train() called from Python (a notebook) raises at one step of its set-up or in its loop;
    its process stays alive, and another process may then train (or resume) in the same folder."""
    from learntok.run import folder as run_folder
    from learntok.train import loop

    def boom(*args, **kwargs):
        raise RuntimeError(f"{step} failed")

    monkeypatch.chdir(folder)
    if step == "claim":
        (folder / "run").mkdir()
        (folder / "run" / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')  # not a fresh run
        monkeypatch.setattr(run_folder, "_check_fresh", boom)
    else:
        monkeypatch.setattr(loop, step, boom)
    cfg = load_config(preset="tiny", overrides=RUN[2:])
    with pytest.raises(RuntimeError, match=f"{step} failed"):
        loop.train(cfg, folder / "run", progress=False)
    if step == "claim":
        (folder / "run" / "metrics.jsonl").unlink()
    args = (
        ["train", "--out", "run", "--resume"] if then == "resume" else ["train", *RUN, "train.steps=2", "--out", "run"]
    )
    r = cli(*args, cwd=folder)
    assert r.returncode == 0, r.stderr[-2000:]
