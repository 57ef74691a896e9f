"""Paired comparison against `uniform`: on the same windows of the val and test splits, each
strategy's bits per byte minus uniform's (corpus level) and the standard error of the mean
per-window difference (learntok.frontier.window_nats / paired_difference, which use the one
evaluation function). Run after the README's compare:

    PYTHONPATH=. python docs/results/paired_vs_uniform.py runs/compare-tiny learned whitespace ...
"""
import sys
from pathlib import Path

from learntok.checkpoint import load_run
from learntok.data import ByteData
from learntok.evaluate import EvalOptions
from learntok.frontier import paired_difference, window_nats

root, names = Path(sys.argv[1]), sys.argv[2:]
model, cfg = load_run(root / "uniform")
data, tc = ByteData.from_config(cfg.data), cfg.train
opts = EvalOptions(tc.batch_size, tc.seq_len, seed=tc.seed)
print("| strategy | val: bpb - uniform's (s.e.) | test: bpb - uniform's (s.e.) |\n|---|---|---|")
ref = {split: window_nats(model, data, split, opts) for split in ("val", "test")}
for name in names:
    m, _ = load_run(root / name)
    cells = []
    for split in ("val", "test"):
        diff, se = paired_difference(window_nats(m, data, split, opts), ref[split])
        cells.append(f"{diff:+.4f} ({se:.4f})")
    print(f"| {name} | {cells[0]} | {cells[1]} |", flush=True)
