"""bytes/s of cached generation at each rate: learned@0.2 calibrated on val, best of 3 timings
of 512 bytes, interleaved across rates (a shared machine: the best time is the least disturbed)."""

import io
import json
import sys
import torch
from learntok.run.checkpoint import load_run
from learntok.model.generate import SamplingOptions
from learntok.run.rate import set_rate_for_run
from learntok.text.sample import sample

torch.set_num_threads(1)
run = sys.argv[1]
rates = [0.1, 0.2, 0.33]
models = {}
for r in rates:
    m, cfg = load_run(run)
    print(set_rate_for_run(m, cfg, r, mode="calibrated").describe(), flush=True)
    models[r] = m
best = {r: 0.0 for r in rates}
rate_seen = {}
for rep in range(3):
    for r in rates:
        s = sample(models[r], "ROMEO.", SamplingOptions(512, seed=rep), out=io.StringIO())
        best[r] = max(best[r], s["bytes_per_s"])
        rate_seen[r] = s["boundary_rate"]
print(json.dumps({"bytes_per_s_best_of_3": best, "generated_boundary_rate": rate_seen}))
