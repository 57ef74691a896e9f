"""`learntok compare --runs A B ...`: finished runs side by side on the same windows of the val
and test splits (docs/compare.md). Each run's bits per byte, and its difference from the first
run (the reference) paired window by window, with the standard error over windows
(learntok.evaluation.evaluate.paired_difference). The windows, and the seeded draws of sampled boundaries,
are the reference run's: its data, train.seq_len, train.batch_size and train.seed. Runs that
differ in data, budget, size or rate are still compared; the table says how they differ. With a
rate (`--rate`), every run is scored at it, calibrated on the reference's val split.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from learntok.run.checkpoint import load_checkpoint, load_run
from learntok.run.config import RunConfig
from learntok.data.dataset import ByteData
from learntok.util.errors import CheckpointError, ConfigError
from learntok.evaluation.metrics import EvalOptions, columns
from learntok.evaluation.score import paired_difference, window_nats
from learntok.run.labels import rate_cell, unequal_rate
from learntok.run.rate import held_out_batches, set_rate
from learntok.util.runtime import resolve_device

SPLITS = ("val", "test")

# The model fields that set its size (the strategy's own parameters aside: they are what differs).
SHAPE = (
    "d_model",
    "n_heads",
    "n_down",
    "n_mid",
    "n_up",
    "attn_window",
    "mlp_ratio_bytes",
    "mlp_ratio_tokens",
    "vocab_size",
)


@dataclasses.dataclass
class Run:
    path: str  # as given on the command line
    cfg: RunConfig  # its resolved run config
    step: int  # optimizer steps its latest checkpoint completed
    bytes_seen: int  # training bytes read up to that checkpoint


def read_run(path: str) -> Run:
    """A run folder's config and progress, or a one-line error naming `path`."""
    if not Path(path).exists():
        raise ConfigError(f"--runs {path}: no such folder")
    try:
        ckpt = load_checkpoint(path)
        cfg = RunConfig.from_dict(ckpt.config)
    except (CheckpointError, ConfigError) as e:
        raise CheckpointError(f"--runs {path}: {e} (--runs takes run folders that `learntok train` wrote)") from None
    return Run(path, cfg, ckpt.step, int(ckpt.state.get("bytes_seen", ckpt.step * cfg.train.bytes_per_step)))


def differences(runs: list[Run]) -> list[dict]:
    """How the runs differ in data, budget or size: one entry a differing field, with its value
    for each run (in the order of the runs)."""
    fields = {
        "data": lambda r: {f"data.{k}": v for k, v in dataclasses.asdict(r.cfg.data).items()},
        "budget": lambda r: {
            "train.steps": r.cfg.train.steps,
            "train.batch_size": r.cfg.train.batch_size,
            "train.seq_len": r.cfg.train.seq_len,
            "steps done": r.step,
            "bytes seen": r.bytes_seen,
        },
        "size": lambda r: {f"model.{k}": getattr(r.cfg.model, k) for k in SHAPE},
    }
    out = []
    for kind, of in fields.items():
        values = [of(r) for r in runs]
        out += [
            {"kind": kind, "key": key, "values": [v[key] for v in values]}
            for key in values[0]
            if len({repr(v[key]) for v in values}) > 1
        ]
    return out


def at_set_rate(runs: list[Run], device, data: ByteData, opts: EvalOptions, rate: float | None, mode: str | None):
    """Each run's model, with the RateSetting that put it at `rate` (calibrated on the reference's
    val split, then held by `mode`: learntok.run.rate.set_rate), or None without a rate. Every model is
    set before any is evaluated, so a run that cannot be set at a rate fails first."""
    calibration = held_out_batches(data, opts.seq_len) if rate is not None else None
    out = []
    for run in runs:
        model, _ = load_run(run.path, device)
        try:
            setting = set_rate(model, rate, calibration, seed=opts.seed, mode=mode) if rate is not None else None
        except ConfigError as e:
            raise ConfigError(f"--runs {run.path} at --rate {rate:g}: {e}") from None
        out.append((model, setting))
    return out


def refuse_training(options: dict[str, object], overrides: list[str]) -> None:
    """`compare --runs` evaluates finished runs and trains nothing: refuse, in one line, every
    training option given (`options`: its name and value, None when not given) and any override
    but system.threads (the one `--threads` adds)."""
    given = [name for name, value in options.items() if value is not None]
    given += ["key=value overrides"] if any(not o.startswith("system.threads=") for o in overrides) else []
    if given:
        raise ConfigError(f"--runs evaluates finished runs: drop the training options ({', '.join(given)})")


def compare_runs(
    paths: list[str], eval_bytes: int | None = None, rate: float | None = None, rate_mode: str | None = None
) -> dict:
    """Evaluate the runs at `paths` on the reference's (the first's) windows of each split: per run
    bpb, rates and the paired difference from the reference; what differs between the runs. With
    `rate`, every run is scored at that boundary rate (`at_set_rate`)."""
    if len(paths) < 2:
        raise ConfigError(f"--runs needs at least two run folders (the first is the reference), got {len(paths)}")
    if len(set(map(str, paths))) != len(paths):
        raise ConfigError(f"--runs repeats a folder: {' '.join(map(str, paths))}")
    runs = [read_run(str(p)) for p in paths]  # every folder checked before any evaluation
    ref = runs[0].cfg
    device = resolve_device(ref.system.device)
    data = ByteData.from_config(ref.data)
    opts = EvalOptions.for_run(ref, device, eval_bytes)
    rows, ref_windows = [], {}
    for run, (model, setting) in zip(runs, at_set_rate(runs, device, data, opts, rate, rate_mode)):
        row = {
            "run": run.path,
            "strategy": model.cfg.boundary,
            "params": model.num_params(),
            "steps": run.step,
            "bytes_seen": run.bytes_seen,
            "target_rate": model.cfg.target_rate if setting is None else setting.target,
            "rate_setting": None if setting is None else dataclasses.asdict(setting),
        }
        for split in SPLITS:
            w = window_nats(model, data, split, dataclasses.replace(opts, progress=f"{Path(run.path).name} {split}"))
            ref_windows.setdefault(split, w)
            diff, se = paired_difference(w, ref_windows[split])
            names = ("bpb", "diff", "diff_se", "boundary_rate", "whitespace_rate")
            row.update(columns(w, names, f"{split}_", diff=diff, diff_se=se, boundary_rate=w["rate"]))
        rows.append(row)
    windows = {
        "reference": runs[0].path,
        "data_source": ref.data.source,
        "seq_len": opts.seq_len,
        "batch_size": opts.batch_size,
        "seed": opts.seed,
        "max_bytes": eval_bytes,
        "rate": rate,
        "rate_mode": None if rate is None else rate_mode or "each strategy's default mode",
        **{f"{split}_windows": len(ref_windows[split]["nats"]) for split in SPLITS},
    }
    diffs = differences(runs)
    return {"runs": rows, "windows": windows, "differences": diffs, "notes": notes(diffs) + rate_notes(rows)}


def unequal(row: dict, reference: dict) -> str:
    """Why a run's test figure is not at an equal rate ('' when it is): learntok.run.labels.unequal_rate."""
    return unequal_rate(row["test_boundary_rate"], row["target_rate"], reference["test_boundary_rate"])


def rate_notes(rows: list[dict]) -> list[str]:
    """One line when any run's test rate is not at an equal rate (`unequal_rate`), naming each."""
    off = [(r["run"], why) for r in rows if (why := unequal(r, rows[0]))]
    if not off:
        return []
    rates = " / ".join(f"{r['test_boundary_rate']:.3f}" for r in rows)
    targets = " / ".join(f"{r['target_rate']:g}" for r in rows)
    return [
        f"note: the runs differ in rate: test boundary rate {rates}, targets {targets} (in the order of --runs); "
        + "; ".join(f"{run}: {why}" for run, why in off)
    ]


def notes(diffs: list[dict]) -> list[str]:
    """One line per kind of difference: 'the runs differ in budget: train.steps 2 / 3, ...'."""
    lines = []
    for kind in ("data", "budget", "size"):
        mine = [d for d in diffs if d["kind"] == kind]
        if mine:
            lines.append(
                f"note: the runs differ in {kind}: "
                + ", ".join(f"{d['key']} {' / '.join(map(str, d['values']))}" for d in mine)
                + " (in the order of --runs)"
            )
    return lines


def format_runs(report: dict) -> str:
    """The Markdown table of `compare_runs`, with the windows it used and the notes."""
    lines = [
        "| run | strategy | params | steps | val bpb | val bpb - reference (s.e.) | test bpb | "
        "test bpb - reference (s.e.) | test boundary rate | test whitespace rate |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    ref = report["runs"][0]
    for i, r in enumerate(report["runs"]):
        vs = {s: "reference" if i == 0 else f"{r[f'{s}_diff']:+.4f} ({r[f'{s}_diff_se']:.4f})" for s in SPLITS}
        rate = rate_cell(r["test_boundary_rate"], r["target_rate"], ref["test_boundary_rate"])
        lines.append(
            f"| {r['run']} | {r['strategy']} | {r['params']:,} | {r['steps']} | {r['val_bpb']:.4f} | {vs['val']} | "
            f"{r['test_bpb']:.4f} | {vs['test']} | {rate} | {r['test_whitespace_rate']:.3f} |"
        )
    w = report["windows"]
    at = (
        f" Every run at rate {w['rate']:g} ({w['rate_mode']}), calibrated on the reference's val split."
        if w.get("rate") is not None
        else ""
    )
    lines += [
        "",
        f"Windows: the reference's ({w['reference']}): data.source {w['data_source']}, {w['seq_len']} bytes "
        f"a window, batches of {w['batch_size']}, boundary samples seeded by its train.seed {w['seed']}; "
        f"{w['val_windows']} val and {w['test_windows']} test windows. The s.e. is over windows (windows of "
        f"one document are not independent: a lower bound), with the runs fixed: it leaves out training "
        f"variance (compare --seeds).{at}",
        *report["notes"],
    ]
    return "\n".join(lines) + "\n"
