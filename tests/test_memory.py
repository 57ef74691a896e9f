"""Memory is bounded by the attention window, not the input (docs/reliability.md): a long prompt's prefill
runs the training path's blocked local attention, so peak memory grows linearly in the prompt
length; `segment --file` streams, so its peak does not grow with the text. Measured in child
processes (peak RSS, resource.getrusage)."""

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import resource, sys, torch
from learntok.model.generate import generate
from learntok.model.aunet import AUNet
from learntok.model.config import ModelConfig
from learntok.text.windows import segment_text

torch.manual_seed(0)
model = AUNet(ModelConfig(d_model=32, n_heads=2, attn_window=64, strategy={"window": 1})).eval()
n, command = int(sys.argv[1]), sys.argv[2]
text = ("the quick brown fox jumps over the lazy dog. " * (n // 45 + 1))[:n]
generate(model, "warm up", max_bytes=2, seed=0)
segment_text(model, "warm up", window=256)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if command == "sample":
    generate(model, text, max_bytes=2, seed=0)
else:
    segment_text(model, text, window=4096)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)   # MiB above the warm baseline
"""


def peak_mib(n_bytes: int, command: str = "sample") -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(n_bytes), command], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return float(r.stdout.split()[-1])


def test_prefill_memory_grows_linearly_in_the_prompt():
    small, large = peak_mib(10_000), peak_mib(40_000)
    # 4x the prompt: linear gives about 4x (less, with fixed costs); the dense T x T mask of
    # before gave about 16x (10 KB: 1 GiB)
    assert large < 5 * max(small, 8.0), (small, large)


def test_a_100_kb_prompt_stays_small():
    assert peak_mib(100_000) < 800  # was about 80 GB with the dense mask


def test_segment_memory_is_bounded_by_its_window():
    small, large = peak_mib(10_000, "segment"), peak_mib(40_000, "segment")
    assert large < 2 * max(small, 8.0) + 50, (small, large)  # pieces of `window` bytes: flat in the text


SEGMENT_CHILD = """
import os, resource, sys, torch
from learntok.cli import main
from learntok.model.aunet import AUNet
from learntok.model.config import ModelConfig

torch.manual_seed(0)
folder, paths = sys.argv[1], sys.argv[2:]
AUNet(ModelConfig(d_model=32, n_heads=2, attn_window=64, strategy={"window": 1})).save_pretrained(folder)
sys.stdout = open(os.devnull, "w")
peaks = []
for path in paths:                                               # one after the other: the peak can only grow
    args = ["segment", folder, "--file", path, "--window", "512", "--json", path + ".json", "--html", path + ".html"]
    assert main(args) == 0
    peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(*peaks, file=sys.__stdout__)                               # MiB after each
"""


def test_segment_file_streams_with_memory_bounded_by_the_window(tmp_path):
    """`segment --file` with --json and --html: a text 4x longer (thousands of windows long) adds
    next to nothing to the peak (the text, its chunks, the JSON and the page are never held
    whole; before, the peak grew by about 160 bytes a byte: 604 MiB for 2 MB)."""
    text = ("Déjà vu: the quick brown fox 漢字 jumps over the lazy dog. " * 16000).encode()
    paths = []
    for name, n in (("warm", 100_000), ("small", 200_000), ("large", 800_000)):
        paths.append(tmp_path / f"{name}.txt")
        paths[-1].write_bytes(text[:n])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, "-c", SEGMENT_CHILD, str(tmp_path / "m"), *map(str, paths)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    _, small, large = map(float, r.stdout.split())
    assert large - small < 40, (small, large)  # growing with the text would add about 90 MiB
    chunks = json.loads((tmp_path / "large.txt.json").read_text())["chunks"]
    assert b"".join(base64.b64decode(c["bytes"]) for c in chunks) == text[:800_000]
