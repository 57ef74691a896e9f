"""`learntok plot`: training and validation curves of one or several runs, and the estimator
variance chart of `learntok diagnose`. PNG through matplotlib's Agg backend (no display).

The curves' rows come from learntok.run.metrics_log.
"""

from __future__ import annotations

import os
from pathlib import Path

from learntok.util.errors import DataError
from learntok.util.files import replacing
from learntok.run import metrics_log

METRICS = {"bpb": "bits per byte", "boundary_rate": "boundary rate", "whitespace_rate": "whitespace rate"}


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def run_curves(run: str | Path) -> tuple[list[dict], list[dict]]:
    """(training rows, validation rows) of a run to plot; a log without rows is one line."""
    rows = metrics_log.read(run)
    if not rows:
        raise DataError(f"{metrics_log.log_path(run)} holds no metrics rows (yet): nothing to plot")
    return metrics_log.split(rows)


def plot_runs(runs: list[str | Path], out: str | Path, x: str = "step") -> list[Path]:
    """One PNG per metric (bpb, boundary_rate, whitespace_rate): training (solid, thin) and
    validation (dashed, markers) of every run, one colour per run. Returns the paths written."""
    # a run's name as text for the legend (a folder named in another encoding than UTF-8: U+FFFD)
    data = {os.fsencode(Path(r).name or str(r)).decode("utf-8", "replace"): run_curves(r) for r in runs}
    plt = pyplot()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)  # once every run is read
    written = []
    for key, label in METRICS.items():
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for i, (name, (train, val)) in enumerate(data.items()):
            colour = f"C{i % 10}"
            xs, ys = metrics_log.series(train, key, x)
            if xs:
                ax.plot(xs, ys, color=colour, lw=1, alpha=0.8, label=f"{name} train")
            xs, ys = metrics_log.series(val, f"val_{key}", x)
            if xs:
                ax.plot(xs, ys, color=colour, ls="--", marker="o", ms=3, label=f"{name} val")
        ax.set_xlabel(x.replace("_", " "))
        ax.set_ylabel(label)
        written.append(save_curves(fig, ax, out / f"{key}.png"))
    return written


def save_curves(fig, ax, path: Path) -> Path:
    """Grid, a legend when any curve was drawn, tight layout; write the PNG and close the figure."""
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    fig.tight_layout()
    with replacing(path) as tmp:  # whole or not at all
        fig.savefig(tmp, dpi=120, format="png")
    pyplot().close(fig)
    return path


def plot_diagnose(table: dict[str, dict[str, float]], path: str | Path) -> Path:
    """Two bar charts (log scale): gradient variance and SNR per estimator variant."""
    plt = pyplot()
    names = list(table)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, key, title in zip(axes, ("variance", "snr"), ("variance (trace of covariance)", "signal-to-noise ratio")):
        vals = [max(table[n][key], 1e-30) for n in names]
        ax.barh(names, vals, color=[f"C{i % 10}" for i in range(len(names))])
        ax.set_xscale("log")
        ax.invert_yaxis()
        ax.set_title(title)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle("policy-gradient estimator on fixed batches")
    fig.tight_layout()
    path = Path(path)
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return path
