"""`learntok compare`: several boundary strategies (and ablations of the learned policy) on
one backbone, preset, data source, step budget and seed; one folder of results.

A variant is `STRATEGY[+OVERRIDE...]`, e.g. `learned`, `uniform`, `learned+gamma=1.0`,
`learned+strategy.window=1`. An override is `section.key=value` or one of the short names
in ALIASES. Each variant trains in OUT/<variant>/ through `learntok.train.train`, then is
evaluated on the validation and test splits (bits per byte, with the standard error of the
mean over documents); a `done.json` marker holds its figures, so a rerun skips finished
variants and resumes unfinished ones from their latest checkpoint. OUT/ gets results.md,
results.json and curves.png (validation bpb against bytes seen, one curve a variant).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from learntok.boundaries import strategy_names
from learntok.boundaries.options import option_types
from learntok.checkpoint import latest_checkpoint, load_run
from learntok.config import STRATEGY, ConfigError, RunConfig, load_config
from learntok.data import ByteData, small_split_warnings
from learntok.distributed import DistEnv, barrier, init_distributed, shutdown
from learntok.evaluate import EvalOptions, evaluate_bpb, mean_and_se, over_seeds, verdict
from learntok.figures import RATE_SLACK, at_rate, covers, rate_cell, settings_label, unequal_rate
from learntok.files import inside, write_text_atomic
from learntok.finished import marked, read_done, write_done
from learntok.frontier import REFERENCE, check_sweep, write_frontier
from learntok.jobs import Job, follow_parent, last_line, run_jobs
from learntok.plots import pyplot, read_metrics, save_curves, series
from learntok.runfolder import anchored
from learntok.runtime import resolve_dtype
from learntok.tracking import append_row
from learntok.train import train

ALIASES = {  # short override names for variants
    "gamma": "objective.gamma",
    "baseline": "objective.batch_baseline",
    "early": "objective.early_baseline",
    "w": "strategy.window",
    "lambda_rate": "objective.lambda_rate",
    "lambda_pi": "objective.lambda_pi",
    "rate": "model.target_rate",
}

# The paper's ablations of the learned policy (§4's tricks, the window, the rate loss).
ABLATIONS = [
    "learned+gamma=1.0",
    "learned+baseline=none",
    "learned+early=false",
    "learned+w=1",
    "learned+lambda_rate=0",
]


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
    when given, a test rate `reached` at it (learntok.figures.at_rate). None otherwise."""
    rates = [cfg.model.target_rate, *([] if reached is None else [reached])]
    if "fineweb" not in str(cfg.data.source).lower() or not all(at_rate(r, PAPER_RATE) for r in rates):
        return None
    return PAPER.get(spec.partition("@")[0], {}).get(preset)


def annotate(record: dict, cfg: RunConfig, preset: str | None) -> dict:
    """What a finished run's figures were measured under, for the tables: its target rate, the
    settings its policy ran (learntok.figures.settings_label) and the paper's comparable figure.
    Set on every record, those read back from an earlier run's done marker included."""
    record.update(
        target_rate=cfg.model.target_rate,
        settings=settings_label(cfg),
        paper=paper_figure(record["variant"], preset, cfg, record["test_boundary_rate"]),
    )
    return record


def parse_variant(spec: str) -> tuple[str, list[str]]:
    """`learned+gamma=1.0` -> ("learned", ["model.boundary=learned", "objective.gamma=1.0"]);
    a rate suffix `@0.2` (`learned@0.2`, `learned+w=1@0.2`) sets model.target_rate last."""
    body, at, rate = spec.strip().partition("@")
    strategy, *parts = body.split("+")
    overrides = [f"model.boundary={strategy}"]
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq:
            raise ConfigError(f"variant {spec!r}: {part!r} is not key=value")
        overrides.append(f"{ALIASES.get(key, key)}={value}")
    if at:
        overrides.append(f"model.target_rate={parse_rate(rate, spec)}")
    return strategy, overrides


def parse_rate(text: str, where: str) -> float:
    """A target rate rho* in (0, 1) from `text`, or a ConfigError naming `where`."""
    try:
        rate = float(text)
    except ValueError:
        raise ConfigError(f"{where}: rate {text!r} is not a number") from None
    if not 0.0 < rate < 1.0:
        raise ConfigError(f"{where}: rate {rate} must be in (0, 1)")
    return rate


def variant_config(spec: str, preset: str | None, overrides: list[str]) -> RunConfig:
    """The run config of one variant: preset <- the shared overrides <- the variant's own. A
    shared strategy option (`strategy.KEY=value`) goes to the variants whose strategy has it, e.g.
    `strategy.tokenizer=PATH` to `bpe` alone (check_strategy_options refuses one that none has)."""
    strategy, own = parse_variant(spec)
    if strategy not in strategy_names():
        raise ConfigError(
            f"variant {spec!r}: unknown boundary strategy {strategy!r}; known: {', '.join(strategy_names())}"
        )
    options = option_types(strategy)
    shared = [
        o for o in overrides if not o.startswith(f"{STRATEGY}.") or o.partition("=")[0][len(STRATEGY) + 1 :] in options
    ]
    return load_config(preset, None, [*shared, *own])


def check_strategy_options(variants: list[str], overrides: list[str]) -> None:
    """A shared `strategy.KEY=value` must be an option of at least one variant's strategy."""
    strategies = {parse_variant(v)[0] for v in variants} & set(strategy_names())
    known = set().union(*map(option_types, strategies))
    for o in overrides:
        key = o.partition("=")[0]
        if key.startswith(f"{STRATEGY}.") and key[len(STRATEGY) + 1 :] not in known:
            raise ConfigError(f"{key}: no variant's strategy has the option {key[len(STRATEGY) + 1 :]!r}")


def evaluate_run(
    run_dir: Path, cfg: RunConfig, max_bytes: int | None, env: DistEnv, progress: bool = False, name: str = ""
) -> dict:
    """Validation and test bits per byte of a run's latest checkpoint, with the per-document
    standard error; boundary and whitespace rates on the test split. Under torchrun the ranks
    share the windows (the same figures as one process). With `progress`, a bar per split."""
    model, _ = load_run(run_dir, env.device)
    data = ByteData.from_config(cfg.data)
    tc, out = cfg.train, {}
    opts = EvalOptions(
        tc.batch_size,
        tc.seq_len,
        max_bytes,
        seed=tc.seed,
        amp=resolve_dtype(cfg.system.dtype, env.device),
        per_document=True,
    )
    for split in ("val", "test"):
        bar = f"{name or run_dir.name} {split}" if progress else None
        r = evaluate_bpb(model, data, split, dataclasses.replace(opts, progress=bar), env)
        out.update(
            {
                f"{split}_bpb": r["bpb"],
                f"{split}_doc_bpb": r["doc_bpb_mean"],
                f"{split}_doc_se": r["doc_bpb_se"],
                f"{split}_docs": r["n_docs"],
                f"{split}_bytes": r["n_bytes"],
                f"{split}_split_bytes": data.n_bytes(split),
                f"{split}_boundary_rate": r["boundary_rate"],
                f"{split}_whitespace_rate": r["whitespace_rate"],
            }
        )
    return out


def train_speed(run_dir: Path) -> float:
    """Mean training bytes per second over the run's logged windows (0 if none)."""
    train_lines, _ = read_metrics(run_dir)
    speeds = [r["bytes_per_s"] for r in train_lines if r.get("bytes_per_s")]
    return sum(speeds) / len(speeds) if speeds else 0.0


def parse_seeds(text: str) -> list[int]:
    """`--seeds 3` -> [0, 1, 2]; `--seeds 0,4,5` -> [0, 4, 5] (a list: at least one comma; `7,`
    a list of one). An empty item inside the list (`1,,2`, `,1`) is a typo, refused."""
    parts = [p.strip() for p in text.split(",")]
    if "" in parts[:-1]:
        raise ConfigError(f"--seeds {text!r}: an empty item in the list; give integers separated by commas (0,1,2)")
    try:
        values = [int(p) for p in parts if p]
    except ValueError:
        raise ConfigError(
            f"--seeds {text!r}: expected a count (3) or a comma-separated list of integers (0,1,2)"
        ) from None
    if "," not in text:
        if len(values) != 1 or not 1 <= values[0] <= 1000:
            raise ConfigError(f"--seeds {text!r}: a count of seeds must be in 1..1000")
        return list(range(values[0]))
    if not values or any(not 0 <= v < 2**63 for v in values) or len(set(values)) != len(values):
        raise ConfigError(f"--seeds {text!r}: seeds must be distinct integers in [0, 2^63)")
    return values


def run_name(spec: str, seed: int | None) -> str:
    """The run folder of a variant under OUT: `<variant>` or `<variant>/seed<k>`."""
    return spec if seed is None else f"{spec}/seed{seed}"


def run_folder(out: Path, spec: str, seed: int | None) -> Path:
    """OUT/<run_name>: the variant's name is a value, so the folder is checked to stay below OUT."""
    return inside(out, run_name(spec, seed), "variant")


def seed_override(seed: int | None) -> list[str]:
    """The override that puts a run at `seed` (none without one)."""
    return [] if seed is None else [f"train.seed={seed}"]


def run_variant(
    spec: str,
    preset: str | None,
    overrides: list[str],
    out: Path,
    eval_bytes: int | None,
    env: DistEnv,
    progress: bool = True,
    seed: int | None = None,
) -> dict:
    """Train (or resume) and evaluate one variant (at `seed` when given); skip it when its done
    marker exists. Every rank calls it under torchrun; rank 0 writes."""
    run_dir = run_folder(out, spec, seed)
    cfg = anchored(variant_config(spec, preset, [*overrides, *seed_override(seed)]))
    if marked(run_dir):  # reused only while it matches these settings (learntok.finished)
        return read_done(run_dir, run_name(spec, seed), cfg, eval_bytes)
    resume = latest_checkpoint(run_dir) is not None
    barrier(env)  # every rank has looked before rank 0 writes
    summary = train(cfg, run_dir, resume=resume, progress=progress)
    figures = evaluate_run(run_dir, cfg, eval_bytes, env, progress, run_name(spec, seed))
    record = {
        "variant": spec,
        "run": run_name(spec, seed),
        "seed": cfg.train.seed,
        "strategy": cfg.model.boundary,
        "steps": cfg.train.steps,
        "params": summary.get("params"),
        "bytes_per_s": train_speed(run_dir),
        "paper": paper_figure(spec, preset, cfg),
        "eval_bytes": eval_bytes,
        **figures,
    }
    if env.is_main:
        append_row(run_dir, "eval", summary["step"], figures)
        write_done(run_dir, record)
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
    reached (marked when not at the target: learntok.figures), the whitespace rate, and the
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


def plot_curves(out: Path, variants: list[str], seeds: list[int] | None = None) -> Path:
    """Validation bpb against bytes seen, one curve a variant (and seed)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, spec in enumerate(variants):
        for j, seed in enumerate(seeds or [None]):
            _, val = read_metrics(run_folder(out, spec, seed))
            xs, ys = series(val, "val_bpb", "bytes_seen")
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


def run_parallel(
    units: list[tuple[str, int | None]],
    out: Path,
    preset: str | None,
    overrides: list[str],
    eval_bytes: int | None,
    jobs: int,
    progress: bool = True,
) -> None:
    """Train and evaluate unfinished (variant, seed) runs `jobs` at a time, each in its own process
    with one CPU thread (processes that each take every core thrash: a step runs up to 10x slower),
    its whole output in its run folder's train.log, one progress line each (learntok.jobs). Each
    leaves its done marker; `compare` then reads them back."""
    todo = [(spec, seed) for spec, seed in units if not marked(run_folder(out, spec, seed))]
    children = [
        Job(
            run_name(spec, seed),
            run_folder(out, spec, seed),
            variant_config(spec, preset, overrides).train.steps,
            [
                sys.executable,
                "-m",
                "learntok",
                "compare",
                "--strategies",
                spec,
                "--out",
                str(out),
                *(["--seeds", f"{seed},"] if seed is not None else []),
                *(["--preset", preset] if preset else []),
                *(["--eval-bytes", str(eval_bytes)] if eval_bytes else []),
                *overrides,
                "system.threads=1",
            ],
        )
        for spec, seed in todo
    ]
    for job, code in zip(children, run_jobs(children, jobs, progress)):
        if code != 0:
            raise ConfigError(
                f"variant {job.name} failed (exit {code}): {last_line(job.log)}; its whole log: {job.log}"
            )


def compare(
    variants: list[str],
    out: str | Path,
    preset: str | None = "tiny",
    overrides: list[str] = (),
    eval_bytes: int | None = None,
    progress: bool = True,
    jobs: int = 1,
    sweep: str | None = None,
    seeds: list[int] | None = None,
) -> list[dict]:
    """Run every variant (skipping finished ones) and write results.md, results.json, curves.png;
    with variants at rates (`variant@rate`), also the frontier (`write_frontier`), and with
    `sweep` (a finished variant) that one model run at every rate by calibration. Under torchrun
    every rank calls it: each variant trains on every rank, evaluation is shared, and rank 0
    writes the files."""
    out = Path(out)
    follow_parent()  # a child of `compare --jobs` ends with its parent
    if not variants:
        raise ConfigError("no variants to compare: --strategies names no strategy (e.g. learned,uniform)")
    if len(set(variants)) != len(variants):
        raise ConfigError(f"variants repeat: {', '.join(variants)}")
    check_strategy_options(variants, list(overrides))
    check_sweep(sweep, variants)
    # fail on a bad name before any training
    configs = [variant_config(spec, preset, list(overrides)) for spec in variants]
    units = [(spec, seed) for spec in variants for seed in (seeds if seeds is not None else [None])]
    for spec, seed in units:  # every run folder inside --out, before anything is written
        run_folder(out, spec, seed)
    env = init_distributed(configs[0].system.device)
    if env.is_main:
        out.mkdir(parents=True, exist_ok=True)
    if seeds is not None and any(o.partition("=")[0].strip() == "train.seed" for o in overrides):
        raise ConfigError("--seeds sets train.seed for every run: drop the train.seed override")
    if jobs > 1:
        if env.world > 1:
            raise ConfigError("--jobs runs variants as separate processes: use it without torchrun")
        run_parallel(units, out, preset, list(overrides), eval_bytes, jobs, progress)
    try:
        records = [
            run_variant(spec, preset, list(overrides), out, eval_bytes, env, progress, seed) for spec, seed in units
        ]
    finally:
        shutdown(env)
    relative_step_time(records)
    run_cfgs = [
        variant_config(spec, preset, [*overrides, *seed_override(seed)]) for spec, seed in units
    ]  # one a record
    for r, c in zip(records, run_cfgs):
        annotate(r, c, preset)
    if not env.is_main:
        return records
    warnings = split_warnings(configs[0])
    if any("@" in spec for spec in variants):
        write_frontier(
            out,
            records,
            run_cfgs,
            eval_bytes,
            sweep,
            progress,
        )
    command = " ".join(
        [
            "learntok compare",
            f"--preset {preset}" if preset else "",
            f"--strategies {','.join(variants)}",
            f"--seeds {','.join(map(str, seeds))}" if seeds else "",
            *overrides,
        ]
    ).replace("  ", " ")
    summary = seed_summary(records, variants) if seeds is not None else None
    write_text_atomic(
        out / "results.json",
        json.dumps({"command": command, "results": records, "over_seeds": summary, "warnings": warnings}, indent=2)
        + "\n",
    )
    plot_curves(out, variants, seeds)
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
    return records


def split_warnings(cfg: RunConfig) -> list[str]:
    """The held-out splits too small to compare runs by (learntok.data.small_split_warnings), as
    warning lines; printed on stderr here too, so they are not left in each run's train.log."""
    lines = [f"warning: {w}" for w in small_split_warnings(ByteData.from_config(cfg.data))]
    for line in lines:
        print(line, file=sys.stderr)
    return lines


def variants_from_args(strategies: str, ablations: bool, rates: str | None = None) -> list[str]:
    """`--strategies a,b+k=v` and `--ablations` -> the variant list (ablations appended once);
    with `--rates 0.1,0.2`, every variant at every rate: `a@0.1, a@0.2, b+k=v@0.1, ...`."""
    specs = [s.strip() for s in strategies.split(",") if s.strip()]
    specs += [a for a in ABLATIONS if ablations and a not in specs]
    if not rates:
        return specs
    values = [parse_rate(r.strip(), "--rates") for r in rates.split(",") if r.strip()]
    return [f"{spec}@{rate:g}" for spec in specs for rate in values]
