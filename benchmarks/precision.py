"""fp32 against bf16 autocast for a preset's training step, side by side in one process: the
speed half of the question whether bf16 may be a default on a CPU with 16-bit matrix units
(the other half is the loss curve: docs/results/precision_curves.py).

    PYTHONPATH=. python benchmarks/precision.py [--preset tiny] [--threads 2] [--reps 20] [--json out.json]

Both arms are the preset's model at the same initial weights, with its optimizer, stepping
through the preset's own batches (learntok.train.step.train_step, as `learntok train` steps);
after 3 warm-up steps each, the arms alternate step by step (fp32, bf16, fp32, ...) and the
median wall time of a step is reported with bytes/s and the ratio, so load changes hit both
alike. bf16 is refused, in one line, on a CPU without AMX or AVX-512 BF16.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from learntok.data.dataset import ByteData
from learntok.model.objective import objective_for
from learntok.run.config import load_config
from learntok.run.distributed import DistEnv
from learntok.train.step import build_engine, lr_at, rank_batches, train_step
from learntok.util.runtime import resolve_dtype, seed_everything, set_threads


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    set_threads(args.threads)
    cfg = load_config(args.preset)
    env = DistEnv(0, 1, 0, torch.device("cpu"))
    data = ByteData.from_config(cfg.data)
    arms = {}
    for name in ("fp32", "bf16"):
        seed_everything(cfg.train.seed)
        eng, _ = build_engine(cfg, data, env, resolve_dtype(name, env.device), resume=False)
        arms[name] = (eng, objective_for(cfg.objective, eng.model.strategy.has_policy))
    times: dict[str, list[float]] = {name: [] for name in arms}
    steps = cfg.train.steps
    for step in range(3 + args.reps):
        xs, seeds = rank_batches(data, step, cfg, env)
        for name, (eng, objective) in arms.items():
            start = time.perf_counter()
            train_step(eng, xs, objective, cfg.optim, lr_at(step, cfg.optim, steps), seeds)
            if step >= 3:
                times[name].append(time.perf_counter() - start)
    step_bytes = cfg.train.batch_size * cfg.train.seq_len
    out = {"preset": args.preset, "threads": args.threads, "reps": args.reps, "torch": torch.__version__}
    for name, ts in times.items():
        med = statistics.median(ts)
        out[name] = {"step_s": med, "bytes_per_s": step_bytes / med}
        print(f"{name}: {med * 1000:.1f} ms a step, {step_bytes / med:,.0f} bytes/s")
    out["bf16_speedup"] = out["fp32"]["step_s"] / out["bf16"]["step_s"]
    print(f"bf16 / fp32 speed: {out['bf16_speedup']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
