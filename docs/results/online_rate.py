"""The reached-rate table of docs/rate.md: one trained run, every built-in corpus's test split,
each requested rate, in both rate modes. Each cell is what

    learntok eval RUN --source CORPUS --rate R --rate-mode MODE --max-bytes 40000 --batch-size 64

reports as `boundary_rate` and `bpb` (the same `evaluate_bpb`, without the boundary-quality
scores, and with the val split's calibration computed once per rate instead of once per cell).
Usage: python docs/results/online_rate.py RUN [OUT.json]"""

import json
import sys
import time

import torch

from learntok.boundaries.rate import RateControl
from learntok.run.checkpoint import load_run
from learntok.data import ByteData, DataConfig
from learntok.data.corpora import BUILTINS
from learntok.evaluation.evaluate import EvalOptions, evaluate_bpb
from learntok.run.rate import calibrate_inputs, held_out_batches, strategy_inputs

torch.set_num_threads(1)
RATES = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35)
run, out = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
model, cfg = load_run(run)
strategy, start = model.strategy, time.time()
val = strategy_inputs(model, held_out_batches(ByteData.from_config(cfg.data), cfg.train.seq_len))
offsets = {r: calibrate_inputs(strategy, val, r)[0] for r in RATES}  # as --rate calibrates, sampled cuts
opts = EvalOptions(64, cfg.train.seq_len, 40_000, seed=cfg.train.seed)
table = []
for corpus in BUILTINS:
    data = ByteData.from_config(DataConfig(source=corpus))
    for r in RATES:
        row = {"corpus": corpus, "target": r, "offset": offsets[r]}
        for mode in ("calibrated", "online"):
            strategy.set_rate_knob(offsets[r])
            strategy.set_rate_control(RateControl.for_rule(r, sampled=True) if mode == "online" else None)
            res = evaluate_bpb(model, data, "test", opts)
            row[mode] = {"rate": res["boundary_rate"], "bpb": res["bpb"], "bytes": res["n_bytes"]}
        table.append(row)
        print(
            f"| {corpus} | {r:.2f} | {row['calibrated']['rate']:.4f} | {row['online']['rate']:.4f} | "
            f"{row['calibrated']['bpb']:.4f} | {row['online']['bpb']:.4f} | "
            f"{row['online']['bpb'] - row['calibrated']['bpb']:+.4f} |",
            flush=True,
        )
print(f"{time.time() - start:.0f} s", file=sys.stderr)
if out:
    with open(out, "w") as f:
        json.dump({"run": run, "rates": RATES, "table": table}, f, indent=1)
