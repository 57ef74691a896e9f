"""The results of `learntok compare`: the paper's figures beside comparable runs, the table of
every run, the table over seeds (each variant paired by seed with its reference), the validation
curves, and the files OUT/results.json, results.md and curves.png that hold them.

A record is one finished run's figures (`learntok.compare.runner.run_variant`), annotated here with what
they were measured under (`annotate`).
"""

from __future__ import annotations

import json
from pathlib import Path

from learntok.run.config import RunConfig
from learntok.evaluation.statistics import mean_and_se, over_seeds, verdict
from learntok.run.config_info import settings_label
from learntok.run.labels import RATE_SLACK, REFERENCE, at_rate, covers, rate_cell, unequal_rate
from learntok.util.files import write_text_atomic
from learntok.run import metrics_log
from learntok.run.plots import pyplot, save_curves

# The paper's figures for orientation (docs/compare.md): test bits per byte at 147M on FineWeb,
# and the whitespace rate of the 40M ablations, all at a target rate of 0.2. Keyed by learntok's
# variant names, then by the preset they were measured at; shown only beside a run of that preset
# on FineWeb-like data at that rate (`paper_figure`), never beside another size or rate.
PAPER = {
    "learned": {"147M": "1.297 bpb (147M)", "40M": "ws 0.99 (40M)"},
    "learned+w=1": {"147M": "1.280 bpb (147M)"},
    "bpe": {"147M": "1.299 bpb (147M)"},
    "nawrot": {"147M": "1.372 bpb (147M)"},
    "uniform": {"147M": "1.376 bpb (147M)"},
    "hnet": {"147M": "1.386 bpb (147M)"},
    "learned+gamma=1.0": {"40M": "ws 0.41 (40M)"},
    "learned+early=false": {"40M": "ws 0.72 (40M)"},
}
PAPER_RATE = 0.2  # the target rate of every figure in PAPER


def paper_figure(spec: str, preset: str | None, cfg: RunConfig, reached: float | None = None) -> str | None:
    """The paper's figure for a variant when the run is comparable: the preset the figure was
    measured at, FineWeb-like data (a source whose name says fineweb), the paper's target rate and,
    when given, a test rate `reached` at it (learntok.run.labels.at_rate). None otherwise."""
    rates = [cfg.model.target_rate, *([] if reached is None else [reached])]
    if "fineweb" not in str(cfg.data.source).lower() or not all(at_rate(r, PAPER_RATE) for r in rates):
        return None
    return PAPER.get(spec.partition("@")[0], {}).get(preset)


def annotate(record: dict, cfg: RunConfig, preset: str | None) -> dict:
    """What a finished run's figures were measured under, for the tables: its target rate, the
    settings its policy ran (learntok.run.config_info.settings_label) and the paper's comparable figure.
    Set on every record, those read back from an earlier run's done marker included."""
    record.update(
        target_rate=cfg.model.target_rate,
        settings=settings_label(cfg),
        paper=paper_figure(record["variant"], preset, cfg, record["test_boundary_rate"]),
    )
    return record


def relative_step_time(records: list[dict], reference: str = REFERENCE) -> None:
    """Add `step_time_rel`: training seconds per byte relative to the reference strategy at the
    same rate suffix (`uniform`, or `uniform@0.2` for `learned@0.2`; same batch shape, so the
    same ratio per step) and seed. None without a reference run."""
    by_name = {(r["variant"], r.get("seed")): r for r in records}
    for r in records:
        _, at, rate = r["variant"].partition("@")
        ref = by_name.get((reference + at + rate, r.get("seed")))
        ok = ref is not None and ref["bytes_per_s"] > 0 and r["bytes_per_s"] > 0
        r["step_time_rel"] = ref["bytes_per_s"] / r["bytes_per_s"] if ok else None


def arm(name: str, r: dict) -> str:
    """A table's variant cell: the name and, for a learned arm, the settings it ran (`annotate`)."""
    return f"{name} ({r['settings']})" if r.get("settings") else name


def val_covers(records: list[dict]) -> str:
    """The val bpb column's head: what the figure covers (all of the split, or its first bytes)."""
    r = records[0] if records else {}
    return f"val bpb ({covers(r['val_bytes'], r['val_split_bytes'])})" if "val_split_bytes" in r else "val bpb"


def format_table(records: list[dict]) -> str:
    """The Markdown table of results.md, in the paper's layout: test bits per byte, the rate
    reached (marked when not at the target: learntok.run.labels), the whitespace rate, and the
    paper's figure beside runs of its preset, data and rate only; then the validation figures,
    the per-document standard errors and the step time."""
    paper = any(r.get("paper") for r in records)
    head = (
        "| variant | test bpb | boundary rate | whitespace rate | "
        + ("paper (same preset and rate, FineWeb) | " if paper else "")
        + f"test doc bpb (s.e.) | {val_covers(records)} | step time vs uniform |\n|---|---|---|---|"
        + ("---|" if paper else "")
        + "---|---|---|\n"
    )
    rows = []
    for r in records:
        rel = f"{r['step_time_rel']:.2f}x" if r.get("step_time_rel") else "n/a"
        cell = f"{r.get('paper') or '-'} | " if paper else ""
        rate = rate_cell(r["test_boundary_rate"], r.get("target_rate", r["test_boundary_rate"]))
        rows.append(
            f"| {arm(r.get('run', r['variant']), r)} | {r['test_bpb']:.4f} | {rate} | "
            f"{r['test_whitespace_rate']:.3f} | {cell}"
            f"{r['test_doc_bpb']:.4f} ({r['test_doc_se']:.4f}) | {r['val_bpb']:.4f} | {rel} |"
        )
    return head + "\n".join(rows) + "\n"


def reference_variant(variants: list[str], spec: str) -> str | None:
    """The variant `spec` is paired against: `uniform` at the same rate suffix when it is one of the
    variants, else the first variant (None for the reference itself)."""
    _, at, rate = spec.partition("@")
    ref = f"{REFERENCE}{at}{rate}" if f"{REFERENCE}{at}{rate}" in variants else variants[0]
    return None if ref == spec else ref


def seed_summary(records: list[dict], variants: list[str]) -> list[dict]:
    """One row a variant over its seeds: mean test / val bpb with the s.e. over seeds, mean rates,
    and the difference from the reference variant paired by seed (only seeds both have), its s.e.
    over seeds and whether its 95% t-interval includes 0 (`tie`)."""
    by = {(r["variant"], r["seed"]): r for r in records}
    rows = []
    for spec in variants:
        mine = sorted((r for r in records if r["variant"] == spec), key=lambda r: r["seed"])
        if not mine:  # a variant with no finished seed yet
            continue
        row = {
            "variant": spec,
            "seeds": [r["seed"] for r in mine],
            **{k: mine[0].get(k) for k in ("target_rate", "settings")},
            "val_covers": val_covers(mine),
        }
        for key in ("test_bpb", "val_bpb", "test_boundary_rate", "test_whitespace_rate"):
            row[key], row[f"{key}_se"] = mean_and_se([r[key] for r in mine])
        ref = reference_variant(variants, spec)
        pairs = (
            [(r["test_bpb"], by[(ref, r["seed"])]["test_bpb"]) for r in mine if (ref, r["seed"]) in by] if ref else []
        )
        if pairs:
            diff, se, tie = over_seeds([a - b for a, b in pairs])
            ref_rate = mean_and_se(
                [by[(ref, r["seed"])]["test_boundary_rate"] for r in mine if (ref, r["seed"]) in by]
            )[0]
            row.update(reference=ref, diff=diff, diff_se=se, diff_n=len(pairs), tie=tie, reference_rate=ref_rate)
        rows.append(row)
    return rows


def format_seed_table(rows: list[dict]) -> str:
    """results.md's table over seeds: mean (s.e. over seeds) and the paired difference, said to be
    not at an equal rate where the mean rate is off its target or off the reference's."""
    head = (
        f"| variant | seeds | test bpb (s.e.) | {rows[0]['val_covers'] if rows else 'val bpb'} (s.e.) | "
        "boundary rate | whitespace rate (s.e.) | "
        "test bpb - reference, paired by seed (s.e.) |\n|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        target = r["test_boundary_rate"] if r.get("target_rate") is None else r["target_rate"]
        if "diff" in r:
            unequal = unequal_rate(r["test_boundary_rate"], target, r["reference_rate"])
            vs = (
                f"{r['diff']:+.4f} ({r['diff_se']:.4f}) vs {r['reference']}, {r['diff_n']} seeds: "
                f"{verdict(r['diff'], r['tie'])}{', not at an equal rate' if unequal else ''}"
            )
        else:
            vs = "reference"
        lines.append(
            f"| {arm(r['variant'], r)} | {len(r['seeds'])} | {r['test_bpb']:.4f} ({r['test_bpb_se']:.4f}) | "
            f"{r['val_bpb']:.4f} ({r['val_bpb_se']:.4f}) | {rate_cell(r['test_boundary_rate'], target)} | "
            f"{r['test_whitespace_rate']:.3f} ({r['test_whitespace_rate_se']:.3f}) | {vs} |"
        )
    return head + "\n".join(lines) + "\n"


def plot_curves(out: Path, folders: dict[str, list[Path]]) -> Path:
    """OUT/curves.png: validation bpb against bytes seen, one curve a run, one colour a variant
    (`folders`: each variant's run folders, one a seed)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (spec, runs) in enumerate(folders.items()):
        for j, run_dir in enumerate(runs):
            _, val = metrics_log.split(metrics_log.read(run_dir))
            xs, ys = metrics_log.series(val, "val_bpb", "bytes_seen")
            if xs:
                ax.plot(
                    xs,
                    ys,
                    marker="o",
                    ms=3,
                    color=f"C{i % 10}",
                    ls="-" if i < 10 else "--",
                    alpha=0.8,
                    label=spec if j == 0 else None,
                )
    ax.set_xlabel("bytes seen")
    ax.set_ylabel("validation bits per byte")
    return save_curves(fig, ax, out / "curves.png")


def compare_command(preset: str | None, variants: list[str], seeds: list[int] | None, overrides: list[str]) -> str:
    """The command line that reruns this comparison, as results.md and results.json show it."""
    return " ".join(
        [
            "learntok compare",
            f"--preset {preset}" if preset else "",
            f"--strategies {','.join(variants)}",
            f"--seeds {','.join(map(str, seeds))}" if seeds else "",
            *overrides,
        ]
    ).replace("  ", " ")


def write_results(
    out: Path,
    command: str,
    records: list[dict],
    summary: list[dict] | None,
    warnings: list[str],
    folders: dict[str, list[Path]],
) -> None:
    """OUT/results.json (every record, the table over seeds when `summary`, the warnings),
    curves.png (`plot_curves` over `folders`) and results.md: the command, the warnings, the
    table over seeds, the table of every run, and what the columns mean."""
    write_text_atomic(
        out / "results.json",
        json.dumps({"command": command, "results": records, "over_seeds": summary, "warnings": warnings}, indent=2)
        + "\n",
    )
    plot_curves(out, folders)
    seed_section = (
        (
            f"## Over seeds\n\n{format_seed_table(summary)}\n"
            "Mean over seeds (standard error over seeds); the difference is paired by seed (same initial "
            "backbone, data and windows), with a tie where its 95% t-interval includes 0.\n\n"
            "## Every run\n\n"
        )
        if summary
        else ""
    )
    write_text_atomic(
        out / "results.md",
        f"# learntok compare\n\n`{command}`\n\n{''.join(w + chr(10) * 2 for w in warnings)}"
        f"{seed_section}{format_table(records)}\n"
        "bpb: corpus-level bits per byte (sampled boundaries, seeded); doc bpb: mean over documents "
        "with its standard error. Rates on the test split; a rate marked not at an equal rate is more "
        f"than {RATE_SLACK:g} from its target (or, over seeds, from the reference's).\n\n"
        "![validation bpb](curves.png)\n",
    )
