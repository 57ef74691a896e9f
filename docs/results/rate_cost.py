"""The cost table of docs/rate.md ("What control costs"): what holding a rate costs a trained run
in bits per byte, per text. For each text: the run as trained (no control), then at the rate the
run reaches on that text by itself and at 0.2, held three ways:
- "released online": the offset calibrated on the run's val split, then the strong controller
  (gain 1 with a warm-up of 4 over 32 bytes: `RateControl.for_rule`), as `--rate` did before;
- "online" (`--rate R`, the default): the offset calibrated on the text's own first 64 KB, then
  online control at GENTLE_GAIN (learntok.boundaries.rate.online_control, via learntok.run.rate.set_rate);
- "calibrated" (`--rate R --rate-mode calibrated`): that offset, fixed.
Every cell is `evaluate_bpb` on the first 64 KB of the text (sampled cuts, seed 0), as
`learntok eval RUN --source TEXT --split test --max-bytes 65536 --rate R` scores it.
Usage: python docs/results/rate_cost.py RUN OUT.json SOURCE[:SPLIT] ..."""

import dataclasses
import json
import sys

import torch

from provenance import git_commit

from learntok.run.checkpoint import load_run
from learntok.data import ByteData
from learntok.evaluation.evaluate import EvalOptions, evaluate_bpb
from learntok.boundaries.rate import RateControl
from learntok.run.rate import held_out_batches, set_rate

torch.set_num_threads(1)
MAX_BYTES = 1 << 16
run, out, sources = sys.argv[1], sys.argv[2], sys.argv[3:]
model, cfg = load_run(run)
strategy = model.strategy
opts = EvalOptions(cfg.train.batch_size, cfg.train.seq_len, MAX_BYTES, seed=0)
val = held_out_batches(ByteData.from_config(cfg.data), cfg.train.seq_len)
commit = git_commit()
report = {
    "command": "python docs/results/rate_cost.py " + " ".join(sys.argv[1:]),
    "commit": commit,
    "seeds": [cfg.train.seed],
    "run": run,
    "max_bytes": MAX_BYTES,
    "table": {},
}


def score(data, split):
    r = evaluate_bpb(model, data, split, opts)
    return {"bpb": round(r["bpb"], 5), "rate": round(r["boundary_rate"], 5)}


def held(data, split, target, how):
    own = held_out_batches(data, cfg.train.seq_len, split=split)
    if how == "released online":
        set_rate(model, target, val, mode="calibrated")
        strategy.set_rate_control(RateControl.for_rule(target, strategy.samples, strategy.rate_gain_unit))
    else:
        set_rate(model, target, own, mode=how)
    try:
        return score(data, split)
    finally:
        strategy.set_rate_control(None)


start = strategy.rate_knob()
for s in sources:
    source, _, split = s.partition(":")
    split = split or "test"
    data = ByteData.from_config(dataclasses.replace(cfg.data, source=source), unsplit=split == "all")
    strategy.set_rate_knob(start)
    row = {"none": score(data, split)}
    for name, target in (("own", round(row["none"]["rate"], 4)), ("0.2", 0.2)):
        for how in ("released online", "online", "calibrated"):
            row[f"{how} @ {name}"] = {"target": target, **held(data, split, target, how)}
            strategy.set_rate_knob(start)
    report["table"][s] = row
    print(s, json.dumps(row), flush=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
