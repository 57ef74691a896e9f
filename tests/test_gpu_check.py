"""scripts/gpu_check.sh end to end on the CPU at toy sizes (the same script a GPU machine runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)


def test_gpu_check_runs_end_to_end_on_cpu(tmp_path):
    p = run("--device", "cpu", "--toy", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["tests"]["rc"] == 0 and "passed" in report["tests"]["summary"]
    rows = report["throughput"]["rows"]
    assert {r["strategy"] for r in rows} == {"learned", "uniform"}
    assert all(r["bytes_per_s"] > 0 and r["peak_mem_gib"] > 0 and 0 <= r["mfu"] < 1 for r in rows)
    assert report["torchrun"]["rc"] == 0 and report["torchrun"]["last_metrics"]["step"] == 2
    md = (tmp_path / "gpu_check.md").read_text()
    assert "| preset | params | boundaries | compile |" in md and "torchrun (1 process): exit 0" in md


@pytest.mark.parametrize(
    "args, message",
    [
        (["--device", "tpu"], "--device 'tpu'"),
        (["--bogus"], "unknown argument '--bogus'"),
        (["--out"], "--out needs a folder"),
    ],
)
def test_gpu_check_bad_arguments(tmp_path, args, message):
    p = run(*args)
    assert p.returncode == 2
    assert p.stderr.startswith("learntok: error:") and message in p.stderr and "Traceback" not in p.stderr
