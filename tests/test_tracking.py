"""Experiment tracking: metrics.jsonl rows with their kind and time, TensorBoard event files read
back with TensorBoard's own reader (also across a resume), W&B offline, a missing package."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from learntok.run.config import load_config
from learntok.run.metrics_log import read, split
from learntok.train.loop import train

from test_compare import TINY

ROOT = Path(__file__).resolve().parents[1]


def cfg(*overrides):
    return load_config(
        "tiny", None, [*TINY, "system.device=cpu", "log.segment_every=1", "checkpoint.every=1", *overrides]
    )


def rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.filterwarnings("ignore:the bpe strategy")  # a 300-token vocabulary misses the rate
def test_metrics_rows_have_a_kind_and_a_time(tmp_path):
    train(cfg("model.boundary=bpe", "strategy.vocab_size=300"), tmp_path / "r", progress=False)
    got = rows(tmp_path / "r")
    assert [(r["kind"], r["step"]) for r in got] == [("fit", 0), ("train", 1), ("val", 1), ("train", 2), ("val", 2)]
    assert all(isinstance(r["time"], float) for r in got) and got[0]["time"] <= got[-1]["time"]
    train_rows, val_rows = split(read(tmp_path / "r"))  # readers still split them
    assert [r["step"] for r in train_rows] == [0, 1, 2] and [r["step"] for r in val_rows] == [1, 2]


def test_tensorboard_events_read_back_and_a_resume_replaces_what_followed_its_checkpoint(tmp_path):
    pytest.importorskip("tensorboard")
    # the reader TensorBoard's server uses (every summary a tensor: scalars and text alike)
    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    full, part = tmp_path / "full", tmp_path / "part"
    train(cfg("log.tensorboard=true", "train.steps=3"), full, progress=False)
    train(cfg("log.tensorboard=true", "train.steps=3"), part, until=2, progress=False)
    ckpts = part / "checkpoints"  # lose step 2's checkpoint: resume from 1
    for p in (ckpts / "step_0000002").iterdir():
        p.unlink()
    (ckpts / "step_0000002").rmdir()
    (ckpts / "latest").write_text("step_0000001")
    train(cfg("log.tensorboard=true", "train.steps=3"), part, resume=True, progress=False)
    drop_time = lambda rs: [{k: v for k, v in r.items() if k not in ("time", "bytes_per_s")} for r in rs]  # noqa: E731
    assert drop_time(rows(part)) == drop_time(rows(full))  # resume is exact with tracking on

    for run in (full, part):
        events = EventAccumulator(str(run), size_guidance={"tensors": 0})
        events.Reload()
        scalars = {
            t for t in events.Tags()["tensors"] if events.SummaryMetadata(t).plugin_data.plugin_name == "scalars"
        }
        assert {
            "train/loss",
            "train/bpb",
            "train/boundary_rate",
            "train/whitespace_rate",
            "train/lr",
            "train/bytes_per_s",
            "val/bpb",
            "val/boundary_rate",
            "val/whitespace_rate",
        } <= scalars
        val = [r for r in rows(run) if r["kind"] == "val"]
        assert [(e.step, float(make_ndarray(e.tensor_proto))) for e in events.Tensors("val/bpb")] == [
            (r["step"], pytest.approx(r["val_bpb"], rel=1e-6)) for r in val
        ]  # once each: purged on resume
        text = events.Tensors("segments/text_summary")
        assert events.SummaryMetadata("segments/text_summary").plugin_data.plugin_name == "text"
        assert [t.step for t in text] == [1, 2, 3] and b"[rate " in make_ndarray(text[0].tensor_proto).item()


def run_cli(*args, **env):
    return subprocess.run(
        [sys.executable, "-m", "learntok", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env},
        timeout=300,
    )


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
def test_wandb_without_the_package_is_one_line_at_start_up(tmp_path):
    r = run_cli("train", "--out", tmp_path / "r", *TINY, "log.wandb=my-project")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "learntok: error: log.wandb = 'my-project' needs the wandb package" in r.stderr
    assert not (tmp_path / "r").exists()  # nothing written


def test_wandb_offline_logs_without_network_and_leaves_the_run_unchanged(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    train(cfg(), tmp_path / "plain", progress=False)
    train(cfg("log.wandb=learntok-test"), tmp_path / "w", progress=False)
    offline = list((tmp_path / "w" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(offline) == 1 and offline[0].stat().st_size > 0
    same = lambda rs: [(r["kind"], r["step"], r.get("loss"), r.get("val_bpb")) for r in rs]  # noqa: E731
    assert same(rows(tmp_path / "w")) == same(rows(tmp_path / "plain"))  # the RNG is left alone


def test_the_wandb_hint_is_the_readmes_install_command(monkeypatch):
    import re

    from learntok.run.config import LogConfig
    from learntok.util.errors import ConfigError
    from learntok.run.tracking import check_trackers

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    command = re.search(r"`(pip install [^`]*wandb[^`]*)`", readme)[1]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError) as info:
        check_trackers(LogConfig(wandb="my-project"))
    assert str(info.value).endswith(command), (str(info.value), command)
