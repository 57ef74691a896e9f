"""The loss curves of one recipe in fp32 and under bf16 autocast, paired by seed: the check a
precision must pass before it is a default (its curve within the seeds' noise of fp32's).

    learntok compare --preset tiny --strategies learned,learned+system.dtype=bf16 --seeds 3 \\
      --jobs 2 --threads 1 --out RUNS --json RUNS.json
    PYTHONPATH=. python docs/results/precision_curves.py RUNS RUNS.json --commit COMMIT \\
      --out docs/results/precision-curves.json --plot docs/results/precision-curves.png

Reads each seed's metrics.jsonl (training bits per byte every 10 steps, validation every
`log.eval_every`) and compare's final test figures. Prints, per step checkpoint and at the end,
bf16 minus fp32 paired by seed (mean and standard error over seeds), beside the fp32 arm's own
seed-to-seed standard deviation: the noise the difference is read against.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from learntok.evaluation.statistics import mean_and_se
from learntok.run.metrics_log import read, series, split
from learntok.run.plots import pyplot

ARMS = {"learned": "fp32", "learned+system.dtype=bf16": "bf16 autocast"}


def seed_runs(root: Path, arm: str) -> dict[str, Path]:
    return {p.name: p for p in sorted((root / arm).glob("seed*")) if (p / "metrics.jsonl").is_file()}


def curves(root: Path, key: str, rows: int) -> dict[str, dict[str, dict[int, float]]]:
    """arm -> seed -> step -> value of `key` (rows 0: training rows, 1: validation rows)."""
    out = {}
    for arm in ARMS:
        out[arm] = {}
        for seed, run in seed_runs(root, arm).items():
            xs, ys = series(split(read(run))[rows], key)
            out[arm][seed] = dict(zip(xs, ys))
    return out


def smooth(ys: np.ndarray, k: int = 10) -> np.ndarray:
    return np.array([ys[max(0, i - k + 1) : i + 1].mean() for i in range(len(ys))])


def paired(c: dict, steps: list[int]) -> list[dict]:
    """Per step: bf16 - fp32 paired by seed, and fp32's s.d. over seeds."""
    a, b = list(ARMS)
    seeds = sorted(set(c[a]) & set(c[b]))
    rows = []
    for step in steps:
        if not all(step in c[a][s] and step in c[b][s] for s in seeds):
            continue
        fp32 = np.array([c[a][s][step] for s in seeds])
        diff = np.array([c[b][s][step] - c[a][s][step] for s in seeds])
        mean, se = mean_and_se(diff)
        rows.append(
            {
                "step": step,
                "fp32": float(fp32.mean()),
                "bf16_minus_fp32": mean,
                "se": se,
                "fp32_sd": float(fp32.std(ddof=1)),
            }
        )
    return rows


def final_figures(results: dict) -> list[dict]:
    """compare's final figures per arm and seed (its --json), and bf16 - fp32 test bpb paired by seed."""
    rows = [
        {k: r[k] for k in ("variant", "seed", "test_bpb", "val_bpb", "test_boundary_rate", "test_whitespace_rate")}
        for r in results["results"]
        if r["variant"] in ARMS
    ]
    a, b = list(ARMS)
    by = {(r["variant"], r["seed"]): r["test_bpb"] for r in rows}
    diffs = [by[b, s] - by[a, s] for (v, s) in by if v == a and (b, s) in by]
    mean, se = mean_and_se(np.array(diffs))
    return rows + [{"test_bpb_bf16_minus_fp32": mean, "se": se, "seeds": len(diffs)}]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", help="compare's --out folder")
    p.add_argument("results", help="compare's --json")
    p.add_argument("--commit", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--plot", default=None)
    args = p.parse_args()
    root = Path(args.runs)
    train, val = curves(root, "bpb", 0), curves(root, "val_bpb", 1)
    val_steps = sorted({s for seeds in val.values() for run in seeds.values() for s in run})
    val_rows = paired(val, val_steps)
    for r in val_rows:
        print(
            f"step {r['step']:>5}: val bpb fp32 {r['fp32']:.4f}, bf16 - fp32 {r['bf16_minus_fp32']:+.4f} "
            f"({r['se']:.4f}), fp32 s.d. over seeds {r['fp32_sd']:.4f}"
        )
    results = json.loads(Path(args.results).read_text())
    final = final_figures(results)
    print(f"test bpb, bf16 - fp32 paired by seed: {final[-1]['test_bpb_bf16_minus_fp32']:+.4f} ({final[-1]['se']:.4f})")
    out = {
        "command": " ".join(["python", *sys.argv]),
        "commit": args.commit,
        "seeds": sorted(int(s.removeprefix("seed")) for s in train["learned"]),
        "val": val_rows,
        "final": final,
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    if args.plot:
        plt = pyplot()
        fig, (ax_t, ax_v) = plt.subplots(1, 2, figsize=(12, 4.5))
        for i, (arm, label) in enumerate(ARMS.items()):
            colour = f"C{i}"
            for j, ys in enumerate(train[arm].values()):
                steps = sorted(ys)
                ax_t.plot(
                    steps,
                    smooth(np.array([ys[s] for s in steps])),
                    colour,
                    lw=1,
                    alpha=0.8,
                    label=label if j == 0 else None,
                )
            for j, ys in enumerate(val[arm].values()):
                steps = sorted(ys)
                ax_v.plot(
                    steps, [ys[s] for s in steps], colour, marker="o", ms=3, lw=1, label=label if j == 0 else None
                )
        ax_t.set(
            xlabel="step",
            ylabel="training bits per byte (mean of 10 log lines)",
            ylim=(2.0, 4.0),
            title="training, one line a seed",
        )
        ax_v.set(xlabel="step", ylabel="validation bits per byte", ylim=(2.0, 3.5), title="validation, one line a seed")
        for ax in (ax_t, ax_v):
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
