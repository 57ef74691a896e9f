"""`learntok plot`: the metrics log split into curves (learntok.run.metrics_log) and PNG curves."""

import pytest

from learntok.util.errors import DataError
from learntok.run.metrics_log import read, series, split
from learntok.run.plots import plot_diagnose, plot_runs

from conftest import write_jsonl


def fake_run(path, shift=0.0):
    path.mkdir()
    lines = []
    for step in range(10, 110, 10):
        lines.append(
            {
                "step": step,
                "bytes_seen": step * 1000,
                "bpb": 3.0 - step / 100 + shift,
                "boundary_rate": 0.2,
                "whitespace_rate": step / 100,
                "loss": 2.0,
            }
        )
        if step % 50 == 0:
            lines.append(
                {
                    "step": step,
                    "bytes_seen": step * 1000,
                    "val_bpb": 3.1 - step / 100 + shift,
                    "val_boundary_rate": 0.21,
                    "val_whitespace_rate": step / 110,
                    "val_bytes": 512,
                }
            )
    write_jsonl(path / "metrics.jsonl", lines)
    return path


def test_the_log_splits_into_train_and_val_rows(tmp_path):
    train, val = split(read(fake_run(tmp_path / "a")))
    assert len(train) == 10 and len(val) == 2
    assert series(val, "val_bpb") == ([50, 100], [pytest.approx(2.6), pytest.approx(2.1)])
    assert series(train, "bpb", x="bytes_seen")[0][0] == 10_000


def test_plot_runs_writes_one_png_per_metric(tmp_path):
    runs = [fake_run(tmp_path / "a"), fake_run(tmp_path / "b", 0.1)]
    paths = plot_runs(runs, tmp_path / "plots")
    assert [p.name for p in paths] == ["bpb.png", "boundary_rate.png", "whitespace_rate.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)
    assert plot_runs(runs, tmp_path / "plots2", x="bytes_seen")


def test_bad_metrics_files(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        read(tmp_path / "nope")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.jsonl").write_text('{"step": 1}\n{"bpb": 2}\n')
    with pytest.raises(DataError, match="line 2: no field 'step'"):
        read(tmp_path / "r")


def test_plot_diagnose(tmp_path):
    table = {"raw (-CE)": {"variance": 4.0, "snr": 0.01}, "all (loo)": {"variance": 1e-5, "snr": 0.5}}
    assert plot_diagnose(table, tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"
