"""docs/results/scale-curves.png: whitespace rate (training batches, a moving average over 5 log
lines, i.e. 50 steps) and validation bpb minus the uniform arm's against step, one line per arm of docs/results/scale.md.
Run from the repo root once the runs of that page are in RUNS (default /work/runs/scale2):
    PYTHONPATH=. python docs/results/scale_plot.py [RUNS]
"""

import sys
from pathlib import Path

from learntok.plots import pyplot, read_metrics, series

ARMS = {  # run folder -> label
    "paper": "paper objective (gamma 0.99, w 8, x1)",
    "recipe": "tiny recipe",
    "recipe-gamma1": "tiny recipe, gamma = 1",
    "recipe-noearly": "tiny recipe, no early-exit reward",
    "paper-lr16": "paper objective, policy lr x16 (one change)",
    "uniform": "uniform boundaries (rate 0.2)",
}


def smooth(ys: list[float], k: int = 5) -> list[float]:
    return [sum(ys[max(0, i - k + 1) : i + 1]) / len(ys[max(0, i - k + 1) : i + 1]) for i in range(len(ys))]


def main(root: Path) -> None:
    plt = pyplot()
    fig, (ws_ax, bpb_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    base = dict(zip(*series(read_metrics(root / "uniform")[1], "val_bpb")))
    for i, (name, label) in enumerate(ARMS.items()):
        if not (root / name / "metrics.jsonl").is_file():
            continue
        train, val = read_metrics(root / name)
        xs, ys = series(train, "whitespace_rate")
        ws_ax.plot(xs, smooth(ys), color=f"C{i}", lw=1.2, label=label)
        xs, ys = series(val, "val_bpb")
        bpb_ax.plot(xs, [y - base[x] for x, y in zip(xs, ys)], color=f"C{i}", marker="o", ms=3, label=label)
    ws_ax.axhline(0.2, color="grey", ls=":", lw=1, label="chance (boundary rate 0.2)")
    ws_ax.set(xlabel="step", ylabel="whitespace rate (training batches)", ylim=(0, 1))
    bpb_ax.set(xlabel="step", ylabel="validation bits per byte minus uniform's (same 64 KB)")
    for ax in (ws_ax, bpb_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("5.2M parameters (256 wide, 2-3-2), Shakespeare, 16 x 256 bytes per step, 1,500 steps")
    fig.tight_layout()
    fig.savefig(Path(__file__).with_name("scale-curves.png"), dpi=110)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/work/runs/scale2"))
