"""Frontiers (docs/rate.md): bits per byte against the boundary rate each variant of a
`learntok compare --rates ...` reached, with error bars from paired per-window differences
against `uniform` at the same target rate, and against training FLOPs per byte; and one model
run at every rate by calibration (`--sweep`) against the models trained at each rate."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from learntok.run.checkpoint import load_run
from learntok.run.config import RunConfig
from learntok.data.dataset import ByteData
from learntok.util.errors import ConfigError
from learntok.evaluation.metrics import EvalOptions
from learntok.evaluation.score import paired_difference, window_nats
from learntok.evaluation.statistics import mean_and_se, over_seeds, verdict
from learntok.run.labels import RATE_SLACK, REFERENCE, rate_cell
from learntok.util.files import replacing, write_text_atomic
from learntok.model.metrics import bits_per_byte
from learntok.model.flops import flops_per_byte
from learntok.run.plots import pyplot
from learntok.run.rate import held_out_batches, set_rate
from learntok.util.runtime import resolve_device


def _windows(run_dir: Path, cfg: RunConfig, data: ByteData, opts: EvalOptions, rate: float | None = None) -> dict:
    """window_nats on the test split of a run's model (at `rate` by calibration on val when
    given), cached in the run folder."""
    path = run_dir / (f"windows-test@{rate:g}.npz" if rate is not None else "windows-test.npz")
    if path.is_file():
        z = np.load(path)
        return {"nats": z["nats"], "bytes": z["bytes"], "rate": float(z["rate"]), "offset": float(z["offset"])}
    model, _ = load_run(run_dir, resolve_device(cfg.system.device))
    offset = math.nan
    if rate is not None:
        offset = set_rate(
            model, rate, held_out_batches(data, opts.seq_len), opts.greedy, opts.seed, mode="calibrated"
        ).value
    bar = f"{run_dir.name} test" + ("" if rate is None else f"@{rate:g}") if opts.progress is not None else None
    w = {**window_nats(model, data, "test", dataclasses.replace(opts, progress=bar)), "offset": offset}
    np.savez(path, **w)
    return w


def write_frontier(
    out: Path,
    records: list[dict],
    cfgs: list[RunConfig],
    eval_bytes: int | None,
    sweep: str | None = None,
    progress: bool = True,
) -> list[dict]:
    """frontier.md / .json / .png and flops.png: test bpb against the rate each variant reached,
    with the paired difference from `uniform` at the same target rate (per-window s.e.), and
    against training FLOPs per byte; with `sweep`, that one model at every rate (calibrated)
    against the model trained at each rate. Returns the frontier rows."""
    cfg0 = cfgs[0]
    data = ByteData.from_config(cfg0.data)
    opts = EvalOptions.for_run(
        cfg0, resolve_device(cfg0.system.device), eval_bytes, progress="frontier" if progress else None
    )  # _windows names each bar by its run
    run = lambda r: r.get("run", r["variant"])  # noqa: E731  (the run folder under OUT)
    windows = {run(r): _windows(out / run(r), c, data, opts) for r, c in zip(records, cfgs)}
    rows = []
    for r, c in zip(records, cfgs):
        name, _, _ = r["variant"].partition("@")
        rate = c.model.target_rate
        ref = reference_record(records, cfgs, r, rate)
        diff, se = paired_difference(windows[run(r)], windows[run(ref)]) if ref else (math.nan, math.nan)
        rows.append(
            {
                "variant": r["variant"],
                "seed": r.get("seed"),
                "family": name,
                "target_rate": rate,
                "rate": r["test_boundary_rate"],
                "test_bpb": r["test_bpb"],
                "vs_uniform": diff,
                "vs_uniform_se": se,
                "flops_per_byte": flops_per_byte(c.model, c.train.seq_len, rate),
            }
        )
    if len({run(r) for r in records}) > len({r["variant"] for r in records}):  # several seeds a variant
        if sweep:
            raise ConfigError("--sweep runs one model: use it without --seeds")
        rows = seed_rows(rows)
    sweep_rows = _sweep_rows(out, sweep, records, cfgs, windows, data, opts) if sweep else []
    write_text_atomic(out / "frontier.json", json.dumps({"frontier": rows, "sweep": sweep_rows}, indent=2) + "\n")
    _plot_frontier(out, rows, sweep_rows, sweep)
    write_text_atomic(out / "frontier.md", frontier_markdown(rows, sweep_rows, sweep))
    return rows


def reference_record(records: list[dict], cfgs: list[RunConfig], record: dict, rate: float) -> dict | None:
    """The `uniform` record `record` is measured against: the same seed and target rate (None: none)."""
    return next(
        (
            v
            for v, c in zip(records, cfgs)
            if c.model.boundary == REFERENCE
            and v.get("seed") == record.get("seed")
            and c.model.target_rate == rate
            and "+" not in v["variant"]
        ),
        None,
    )


def seed_rows(rows: list[dict]) -> list[dict]:
    """Frontier rows of several seeds -> one row a variant: means over seeds (test bpb with its
    s.e.), and the difference from uniform paired by seed (same seed, same rate) with its s.e. over
    seeds and whether its 95% t-interval includes 0 (`tie`), as compare's table over seeds."""
    out = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant]
        diffs = [r["vs_uniform"] for r in mine if not math.isnan(r["vs_uniform"])]
        diff, se, tie = over_seeds(diffs) if diffs else (math.nan, math.nan, True)
        bpb, bpb_se = mean_and_se([r["test_bpb"] for r in mine])
        rate, rate_se = mean_and_se([r["rate"] for r in mine])
        out.append(
            {
                **mine[0],
                "seed": None,
                "seeds": len(mine),
                "rate": rate,
                "rate_se": rate_se,
                "test_bpb": bpb,
                "test_bpb_se": bpb_se,
                "vs_uniform": diff,
                "vs_uniform_se": se if len(diffs) > 1 else math.nan,
                "tie": tie,
            }
        )
    return out


def check_sweep(sweep: str | None, variants: list[str]) -> None:
    """`--sweep` names one of the variants (checked before any training, and again here)."""
    if sweep is not None and sweep not in variants:
        raise ConfigError(f"--sweep {sweep!r} is not one of the variants: {', '.join(variants)}")


def _sweep_rows(out: Path, sweep: str, records, cfgs, windows, data, opts) -> list[dict]:
    """The `sweep` variant's model at every target rate of the comparison, calibrated on val."""
    by_name = {r["variant"]: (r, c) for r, c in zip(records, cfgs)}
    check_sweep(sweep, list(by_name))
    family = sweep.partition("@")[0]
    rows = []
    for rate in sorted({c.model.target_rate for c in cfgs}):
        w = _windows(out / sweep, by_name[sweep][1], data, opts, rate)
        own = next(
            (v for v, (r, c) in by_name.items() if v.partition("@")[0] == family and c.model.target_rate == rate), None
        )
        uni = next(
            (v for v, (r, c) in by_name.items() if v.partition("@")[0] == REFERENCE and c.model.target_rate == rate),
            None,
        )
        row = {
            "target_rate": rate,
            "rate": w["rate"],
            "offset": w["offset"],
            "test_bpb": float(bits_per_byte(w["nats"].sum(), w["bytes"].sum())),
        }
        if own:
            row["per_rate_bpb"] = by_name[own][0]["test_bpb"]
            row["vs_per_rate"], row["vs_per_rate_se"] = paired_difference(w, windows[own])
            if uni:
                gain = by_name[uni][0]["test_bpb"] - row["per_rate_bpb"]
                row["kept"] = (by_name[uni][0]["test_bpb"] - row["test_bpb"]) / gain if gain > 0 else math.nan
        rows.append(row)
    return rows


def frontier_markdown(rows: list[dict], sweep_rows: list[dict], sweep: str | None) -> str:
    seeds = any("seeds" in r for r in rows)
    paired = ", paired by seed (s.e. over seeds)" if seeds else " (paired s.e.)"
    lines = [
        "# bits per byte against compression\n",
        f"| variant | {'seeds | ' if seeds else ''}target rate | reached rate (test) | test bpb"
        f"{' (s.e.)' if seeds else ''} | bpb - uniform's at this rate{paired} | train FLOPs / byte |",
        f"|---|{'---|' if seeds else ''}---|---|---|---|---|",
    ]
    for r in rows:
        vs = "" if math.isnan(r["vs_uniform"]) else f"{r['vs_uniform']:+.4f} ({r['vs_uniform_se']:.4f})"
        if seeds and vs and r["vs_uniform"] != 0.0:
            vs += f": {verdict(r['vs_uniform'], r['tie'])}"
        n = f"{r['seeds']} | " if seeds else ""
        bpb = f"{r['test_bpb']:.4f}" + (f" ({r['test_bpb_se']:.4f})" if seeds else "")
        lines.append(
            f"| {r['variant']} | {n}{r['target_rate']:g} | {rate_cell(r['rate'], r['target_rate'], digits=4)} | {bpb} | "
            f"{vs} | {r['flops_per_byte']:.3g} |"
        )
    lines.append(
        f"\nA reached rate more than {RATE_SLACK:g} from its target is marked: that row is not at an equal rate."
    )
    if seeds:
        lines.append(
            "\nMeans over seeds; a difference whose 95% t-interval over seeds includes 0 is a tie (docs/compare.md)."
        )
    if sweep_rows:
        lines += [
            f"\n## one model ({sweep}) at every rate, by calibration on val\n",
            "| target rate | reached (test) | offset | test bpb | per-rate model's bpb | "
            "one - per-rate (paired s.e.) | "
            "kept of the per-rate model's gain over uniform |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in sweep_rows:
            per = f"{r['per_rate_bpb']:.4f}" if "per_rate_bpb" in r else ""
            vs = f"{r['vs_per_rate']:+.4f} ({r['vs_per_rate_se']:.4f})" if "vs_per_rate" in r else ""
            kept = f"{r['kept']:.2f}" if not math.isnan(r.get("kept", math.nan)) else ""
            lines.append(
                f"| {r['target_rate']:g} | {rate_cell(r['rate'], r['target_rate'], digits=4)} | {r['offset']:+.3f} | "
                f"{r['test_bpb']:.4f} | "
                f"{per} | {vs} | {kept} |"
            )
    lines.append("\n![bpb against rate](frontier.png)\n\n![bpb against training FLOPs per byte](flops.png)\n")
    return "\n".join(lines)


def _plot_frontier(out: Path, rows: list[dict], sweep_rows: list[dict], sweep: str | None) -> None:
    plt = pyplot()
    families = list(dict.fromkeys(r["family"] for r in rows))
    for x_key, x_label, name in (
        ("rate", "boundary rate reached (test)", "frontier.png"),
        ("flops_per_byte", "training FLOPs per byte (estimate)", "flops.png"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for i, fam in enumerate(families):
            pts = sorted((r for r in rows if r["family"] == fam), key=lambda r: r[x_key])
            err = [0.0 if math.isnan(r["vs_uniform_se"]) else r["vs_uniform_se"] for r in pts]
            ax.errorbar(
                [r[x_key] for r in pts],
                [r["test_bpb"] for r in pts],
                yerr=err,
                marker="o",
                ms=4,
                capsize=3,
                color=f"C{i % 10}",
                label=fam,
            )
        if sweep_rows and x_key == "rate":
            ax.errorbar(
                [r["rate"] for r in sweep_rows],
                [r["test_bpb"] for r in sweep_rows],
                yerr=[r.get("vs_per_rate_se", 0.0) for r in sweep_rows],
                ls="--",
                marker="s",
                ms=4,
                capsize=3,
                color="k",
                label=f"{sweep}, calibrated to each rate (error bars: paired against the per-rate model)",
            )
        ax.set_xlabel(x_label)
        ax.set_ylabel("test bits per byte")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        over = (
            "over seeds of the difference from uniform paired by seed"
            if any("seeds" in r for r in rows)
            else "of the paired per-window difference from uniform"
        )
        ax.set_title(f"error bars: s.e. {over}", fontsize=9)
        fig.tight_layout()
        with replacing(out / name) as tmp:
            fig.savefig(tmp, dpi=120, format="png")
        plt.close(fig)
