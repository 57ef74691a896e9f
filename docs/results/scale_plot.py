"""docs/results/scale-curves.png: whitespace rate (training batches, a moving average over 5 log
lines, i.e. 50 steps) and validation bpb minus the uniform arm's against step, one line per arm of
docs/results/scale.md section 1. An arm folder holds one run or `seed<k>` runs (compare --seeds):
then the bpb line is the mean over seeds of the difference paired by seed, and the whitespace
rate is drawn once a seed. Run from the repo root once the runs are in RUNS:
    PYTHONPATH=. python docs/results/scale_plot.py RUNS [OUT.png]
"""

import sys
from pathlib import Path

from learntok.run.metrics_log import read, series, split
from learntok.run.plots import pyplot

PAPER = "learned+objective.gamma=0.99+strategy.window=8+objective.lambda_pi=0.01+objective.rate_gain=0+objective.rate_settle_gain=0+optim.policy_lr_mult=1"
ARMS = {  # arm folder (compare's variant name) -> label
    PAPER: "paper objective (gamma 0.99, w 8, x1)",
    "learned": "tiny recipe",
    "frozen": "frozen policy (never trained)",
    "uniform": "uniform boundaries (rate 0.2)",
}


def smooth(ys: list[float], k: int = 5) -> list[float]:
    return [sum(ys[max(0, i - k + 1) : i + 1]) / len(ys[max(0, i - k + 1) : i + 1]) for i in range(len(ys))]


def seeds(arm: Path) -> dict[str, Path]:
    """seed name -> run folder: the arm's seed<k> folders, or the arm itself as one run."""
    runs = {p.name: p for p in sorted(arm.glob("seed*")) if (p / "metrics.jsonl").is_file()}
    return runs or ({"": arm} if (arm / "metrics.jsonl").is_file() else {})


def main(root: Path, out: Path) -> None:
    plt = pyplot()
    fig, (ws_ax, bpb_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    base = {k: dict(zip(*series(split(read(p))[1], "val_bpb"))) for k, p in seeds(root / "uniform").items()}
    for i, (name, label) in enumerate(ARMS.items()):
        runs = seeds(root / name)
        diffs: dict[float, list[float]] = {}
        for j, (k, run) in enumerate(runs.items()):
            train, val = split(read(run))
            xs, ys = series(train, "whitespace_rate")
            ws_ax.plot(xs, smooth(ys), color=f"C{i}", lw=1.0, ls=["-", "--", ":"][j % 3], label=f"{label} {k}".strip())
            for x, y in zip(*series(val, "val_bpb")):
                if x in base.get(k, {}):
                    diffs.setdefault(x, []).append(y - base[k][x])
        xs = sorted(x for x, d in diffs.items() if len(d) == len(runs))
        if xs:
            bpb_ax.plot(xs, [sum(diffs[x]) / len(diffs[x]) for x in xs], color=f"C{i}", marker="o", ms=3, label=label)
    ws_ax.axhline(0.2, color="grey", ls=":", lw=1, label="chance (boundary rate 0.2)")
    ws_ax.set(xlabel="step", ylabel="whitespace rate (training batches)", ylim=(0, 1))
    bpb_ax.set(xlabel="step", ylabel="val bpb minus uniform's (paired by seed)")
    for ax in (ws_ax, bpb_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("5.2M parameters (256 wide, 2-3-2), Shakespeare, 16 x 256 bytes per step, 1,500 steps")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    here = Path(__file__).with_name("scale-curves.png")
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else here)
