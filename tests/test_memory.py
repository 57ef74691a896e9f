"""Memory is bounded by the attention window, not the input (docs/reliability.md): a long prompt's prefill
runs the training path's blocked local attention, so peak memory grows linearly in the prompt
length. Measured in child processes (peak RSS, resource.getrusage), one per prompt length."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import resource, sys, torch
from learntok.model.generate import generate
from learntok.model.aunet import AUNet
from learntok.nn.config import ModelConfig
from learntok.segment import segment_text

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
    r = subprocess.run([sys.executable, "-c", CHILD, str(n_bytes), command], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return float(r.stdout.split()[-1])


def test_prefill_memory_grows_linearly_in_the_prompt():
    small, large = peak_mib(10_000), peak_mib(40_000)
    # 4x the prompt: linear gives about 4x (less, with fixed costs); the dense T x T mask of
    # before gave about 16x (10 KB: 1 GiB)
    assert large < 5 * max(small, 8.0), (small, large)


def test_a_100_kb_prompt_stays_small():
    assert peak_mib(100_000) < 800                               # was about 80 GB with the dense mask


def test_segment_memory_is_bounded_by_its_window():
    small, large = peak_mib(10_000, "segment"), peak_mib(40_000, "segment")
    assert large < 2 * max(small, 8.0) + 50, (small, large)      # pieces of `window` bytes: flat in the text
