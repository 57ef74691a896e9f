"""`learntok compare`: several boundary strategies (and ablations of the learned policy) on
one backbone, preset, data source, step budget and seed; one folder of results.

A variant is `STRATEGY[+OVERRIDE...]`, e.g. `learned`, `uniform`, `learned+gamma=1.0`,
`learned+strategy.window=1`. An override is `section.key=value` or one of the short names
in ALIASES. Each variant trains in OUT/<variant>/ through `learntok.train.loop.train`, then is
evaluated on the validation and test splits (bits per byte, with the standard error of the
mean over documents); a `done.json` marker holds its figures, so a rerun skips finished
variants and resumes unfinished ones from their latest checkpoint. OUT/ gets results.md,
results.json and curves.png (validation bpb against bytes seen, one curve a variant), written by
learntok.compare.report.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from learntok.boundaries import strategy_names
from learntok.boundaries.options import option_types
from learntok.run.checkpoint import EMA, latest_checkpoint, load_run
from learntok.compare.report import (
    annotate,
    compare_command,
    paper_figure,
    relative_step_time,
    seed_summary,
    write_results,
)
from learntok.run.config import STRATEGY, RunConfig, load_config
from learntok.data.corpora import check_source
from learntok.data.dataset import ByteData, small_split_warnings
from learntok.run.distributed import DistEnv, barrier, init_distributed, shutdown
from learntok.util.errors import ConfigError, DataError
from learntok.evaluation.metrics import EvalOptions, columns
from learntok.evaluation.score import evaluate_bpb
from learntok.util.files import inside
from learntok.util.typed_fields import comma_list
from learntok.data.identity import DATA_IDENTITY, source_identity
from learntok.compare.done import marked, read_done, write_done
from learntok.compare.frontier import check_sweep, write_frontier
from learntok.compare.jobs import Job, follow_parent, last_line, run_jobs
from learntok.run import metrics_log
from learntok.run.folder import anchored
from learntok.train.loop import train

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


def check_variant_source(spec: str, cfg: RunConfig) -> None:
    """A variant's data source (shared, or its own `+data.source=...`) names a corpus or a path
    that is there: else one line naming the variant, before any variant trains."""
    try:
        check_source(cfg.data.source)
    except DataError as e:
        raise DataError(f"variant {spec!r}: {e}") from None


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
    out = {}
    opts = EvalOptions.for_run(cfg, env.device, max_bytes, per_document=True)
    for split in ("val", "test"):
        bar = f"{name or run_dir.name} {split}" if progress else None
        r = evaluate_bpb(model, data, split, dataclasses.replace(opts, progress=bar), env)
        names = ("bpb", "doc_bpb", "doc_se", "docs", "bytes", "split_bytes", "boundary_rate", "whitespace_rate")
        out.update(columns(r, names, f"{split}_", split_bytes=data.n_bytes(split)))
    average = latest_checkpoint(run_dir) / EMA
    if average.is_dir():  # optim.ema: the weights' moving average, scored on the same test windows
        model, _ = load_run(average, env.device)
        bar = f"{name or run_dir.name} test (ema)" if progress else None
        r = evaluate_bpb(model, data, "test", dataclasses.replace(opts, progress=bar), env)
        out.update(columns(r, ("bpb", "doc_se", "boundary_rate"), "ema_test_"))
    return out


def train_speed(run_dir: Path) -> float:
    """Mean training bytes per second over the run's logged windows (0 if none)."""
    train_rows, _ = metrics_log.split(metrics_log.read(run_dir))
    speeds = [v for v in metrics_log.series(train_rows, "bytes_per_s")[1] if v]
    return sum(speeds) / len(speeds) if speeds else 0.0


def parse_seeds(text: str) -> list[int]:
    """`--seeds 3` -> [0, 1, 2]; `--seeds 0,4,5` -> [0, 4, 5] (a list: at least one comma; `7,`
    a list of one). An empty item inside the list (`1,,2`, `,1`) is a typo, refused."""
    parts = comma_list(text, "--seeds")
    try:
        values = [int(p) for p in parts]
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
    cfg: RunConfig,
    preset: str | None,
    out: Path,
    eval_bytes: int | None,
    env: DistEnv,
    progress: bool = True,
    seed: int | None = None,
) -> dict:
    """Train (or resume) and evaluate one variant at its config `cfg` (at `seed` when given); skip
    it when its done marker exists. Every rank calls it under torchrun; rank 0 writes."""
    run_dir = run_folder(out, spec, seed)
    cfg = anchored(cfg)
    if marked(run_dir):  # reused only while it matches these settings (learntok.compare.done)
        return read_done(run_dir, run_name(spec, seed), cfg, eval_bytes)
    resume = latest_checkpoint(run_dir) is not None
    barrier(env)  # every rank has looked before rank 0 writes
    identity = source_identity(cfg.data.source)  # as train records it; read_done checks it on a rerun
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
        DATA_IDENTITY: identity,
    }
    if env.is_main:
        metrics_log.append(run_dir, "eval", summary["step"], figures)
        write_done(run_dir, record)
    return record


def child_command(
    spec: str, seed: int | None, out: Path, preset: str | None, overrides: list[str], eval_bytes: int | None
) -> list[str]:
    """The command line of one `compare --jobs` child: this comparison narrowed to one run, on one
    CPU thread."""
    return [
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
    ]


def run_parallel(
    units: list[tuple[str, int | None]],
    cfgs: list[RunConfig],
    out: Path,
    preset: str | None,
    overrides: list[str],
    eval_bytes: int | None,
    jobs: int,
    progress: bool = True,
) -> None:
    """Train and evaluate unfinished (variant, seed) runs (`cfgs`: their configs) `jobs` at a time,
    each in its own process with one CPU thread (processes that each take every core thrash: a step
    runs up to 10x slower), its whole output in its run folder's train.log, one progress line each
    (learntok.compare.jobs). Each leaves its done marker; `compare` then reads them back."""
    children = [
        Job(
            run_name(spec, seed),
            run_folder(out, spec, seed),
            cfg.train.steps,
            child_command(spec, seed, out, preset, overrides, eval_bytes),
        )
        for (spec, seed), cfg in zip(units, cfgs)
        if not marked(run_folder(out, spec, seed))
    ]
    for job, code in zip(children, run_jobs(children, jobs, progress)):
        if code != 0:
            raise ConfigError(
                f"variant {job.name} failed (exit {code}): {last_line(job.log)}; its whole log: {job.log}"
            )


def check_variants(variants: list[str], overrides: list[str], sweep: str | None) -> None:
    """Refuse, before any work, no variant, a repeated one, a shared strategy option no variant has
    and a `--sweep` that is not one of the variants at a rate."""
    if not variants:
        raise ConfigError("no variants to compare: --strategies names no strategy (e.g. learned,uniform)")
    if len(set(variants)) != len(variants):
        raise ConfigError(f"variants repeat: {', '.join(variants)}")
    check_strategy_options(variants, overrides)
    check_sweep(sweep, variants)


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
    out, overrides = Path(out), list(overrides)
    follow_parent()  # a child of `compare --jobs` ends with its parent
    check_variants(variants, overrides, sweep)
    units = [(spec, seed) for spec in variants for seed in (seeds if seeds is not None else [None])]
    # one config a run, built once: a bad name fails here, before any training
    cfgs = [variant_config(spec, preset, [*overrides, *seed_override(seed)]) for spec, seed in units]
    for (spec, seed), cfg in zip(units, cfgs):  # run folders inside --out, sources there: before any write
        run_folder(out, spec, seed)
        check_variant_source(spec, cfg)
    env = init_distributed(cfgs[0].system.device)
    if env.is_main:
        out.mkdir(parents=True, exist_ok=True)
    if seeds is not None and any(o.partition("=")[0].strip() == "train.seed" for o in overrides):
        raise ConfigError("--seeds sets train.seed for every run: drop the train.seed override")
    if jobs > 1:
        if env.world > 1:
            raise ConfigError("--jobs runs variants as separate processes: use it without torchrun")
        run_parallel(units, cfgs, out, preset, overrides, eval_bytes, jobs, progress)
    try:
        records = [
            run_variant(spec, cfg, preset, out, eval_bytes, env, progress, seed)
            for (spec, seed), cfg in zip(units, cfgs)
        ]
    finally:
        shutdown(env)
    relative_step_time(records)
    for r, cfg in zip(records, cfgs):
        annotate(r, cfg, preset)
    if not env.is_main:
        return records
    warnings = split_warnings(cfgs[0])
    if any("@" in spec for spec in variants):
        write_frontier(out, records, cfgs, eval_bytes, sweep, progress)
    summary = seed_summary(records, variants) if seeds is not None else None
    folders = {spec: [run_folder(out, spec, seed) for seed in seeds or [None]] for spec in variants}
    write_results(out, compare_command(preset, variants, seeds, overrides), records, summary, warnings, folders)
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
    specs = comma_list(strategies, "--strategies")
    specs += [a for a in ABLATIONS if ablations and a not in specs]
    if not rates:
        return specs
    values = [parse_rate(r, "--rates") for r in comma_list(rates, "--rates")]
    return [f"{spec}@{rate:g}" for spec in specs for rate in values]
