"""`learntok compare --runs A B ...`: finished runs side by side on the same windows of the val
and test splits (docs/compare.md). Each run's bits per byte, and its difference from the first
run (the reference) paired window by window, with the standard error over windows
(learntok.evaluate.paired_difference). The windows, and the seeded draws of sampled boundaries,
are the reference run's: its data, train.seq_len, train.batch_size and train.seed. Runs that
differ in data, budget or size are still compared; the table says how they differ.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from learntok.checkpoint import load_checkpoint, load_run
from learntok.config import ConfigError, RunConfig
from learntok.data import ByteData
from learntok.errors import CheckpointError
from learntok.evaluate import EvalOptions, paired_difference, window_nats
from learntok.runtime import resolve_device, resolve_dtype

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


def compare_runs(paths: list[str], eval_bytes: int | None = None) -> dict:
    """Evaluate the runs at `paths` on the reference's (the first's) windows of each split: per run
    bpb, rates and the paired difference from the reference; what differs between the runs."""
    if len(paths) < 2:
        raise ConfigError(f"--runs needs at least two run folders (the first is the reference), got {len(paths)}")
    if len(set(map(str, paths))) != len(paths):
        raise ConfigError(f"--runs repeats a folder: {' '.join(map(str, paths))}")
    runs = [read_run(str(p)) for p in paths]  # every folder checked before any evaluation
    ref = runs[0].cfg
    device = resolve_device(ref.system.device)
    data = ByteData.from_config(ref.data)
    opts = EvalOptions(
        ref.train.batch_size,
        ref.train.seq_len,
        eval_bytes,
        seed=ref.train.seed,
        amp=resolve_dtype(ref.system.dtype, device),
    )
    rows, ref_windows = [], {}
    for run in runs:
        model, _ = load_run(run.path, device)
        row = {
            "run": run.path,
            "strategy": model.cfg.boundary,
            "params": model.num_params(),
            "steps": run.step,
            "bytes_seen": run.bytes_seen,
        }
        for split in SPLITS:
            w = window_nats(model, data, split, dataclasses.replace(opts, progress=f"{Path(run.path).name} {split}"))
            ref_windows.setdefault(split, w)
            diff, se = paired_difference(w, ref_windows[split])
            row.update(
                {
                    f"{split}_bpb": w["bpb"],
                    f"{split}_diff": diff,
                    f"{split}_diff_se": se,
                    f"{split}_boundary_rate": w["rate"],
                    f"{split}_whitespace_rate": w["whitespace_rate"],
                }
            )
        rows.append(row)
    windows = {
        "reference": runs[0].path,
        "data_source": ref.data.source,
        "seq_len": opts.seq_len,
        "batch_size": opts.batch_size,
        "seed": opts.seed,
        "max_bytes": eval_bytes,
        **{f"{split}_windows": len(ref_windows[split]["nats"]) for split in SPLITS},
    }
    diffs = differences(runs)
    return {"runs": rows, "windows": windows, "differences": diffs, "notes": notes(diffs)}


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
    for i, r in enumerate(report["runs"]):
        vs = {s: "reference" if i == 0 else f"{r[f'{s}_diff']:+.4f} ({r[f'{s}_diff_se']:.4f})" for s in SPLITS}
        lines.append(
            f"| {r['run']} | {r['strategy']} | {r['params']:,} | {r['steps']} | {r['val_bpb']:.4f} | {vs['val']} | "
            f"{r['test_bpb']:.4f} | {vs['test']} | {r['test_boundary_rate']:.3f} | {r['test_whitespace_rate']:.3f} |"
        )
    w = report["windows"]
    lines += [
        "",
        f"Windows: the reference's ({w['reference']}): data.source {w['data_source']}, {w['seq_len']} bytes "
        f"a window, batches of {w['batch_size']}, boundary samples seeded by its train.seed {w['seed']}; "
        f"{w['val_windows']} val and {w['test_windows']} test windows. The s.e. is over windows (windows of "
        f"one document are not independent: a lower bound), with the runs fixed: it leaves out training "
        f"variance (compare --seeds).",
        *report["notes"],
    ]
    return "\n".join(lines) + "\n"
