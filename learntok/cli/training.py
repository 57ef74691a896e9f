"""`learntok train`, `config`, `compare` and `prepare`: the commands that make runs and data."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

from learntok.cli.options import Input, add_json, add_overrides, add_rate, add_seed, request, run_data
from learntok.cli.results import write_json
from learntok.cli.values import COUNT, FRACTION_ARG, POSITIVE, PROBABILITY, SHARD_MB
from learntok.util.environment import launch_rank
from learntok.util.errors import ConfigError, DataError
from learntok.util.files import input_data, input_file, input_run, output_folder

# compare's options that train variants, refused with --runs (learntok.compare.runs.refuse_training)
TRAINING_OPTIONS = (
    "--strategies",
    "--preset",
    "--steps",
    "--out",
    "--ablations",
    "--jobs",
    "--seeds",
    "--rates",
    "--sweep",
)


def with_steps(args) -> list[str]:
    """The command's overrides, with `--steps N` as train.steps=N (last, so it wins)."""
    return [*args.overrides, *([f"train.steps={args.steps}"] if args.steps is not None else [])]


def default_out(*names: str) -> str:
    """The folder of a run (or of a comparison) when --out is not given: runs/NAME-...-TIMESTAMP."""
    return f"runs/{'-'.join(names)}-{time.strftime('%Y%m%d-%H%M%S')}"


def add_train(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train a model (or resume a run)",
        description="Config layers: defaults <- --preset (default tiny) <- --config FILE <- key.sub=value.",
    )
    p.add_argument(
        "--preset",
        type=str,
        help="packaged preset: tiny, 20M, 40M, 90M, 147M (default: tiny, unless --config or --resume)",
    )
    p.add_argument("--config", type=input_file, help="a TOML (or JSON) file of config sections")
    p.add_argument("--out", type=output_folder, help="run folder (default: runs/<preset>-<strategy>-<timestamp>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    p.add_argument("--steps", type=POSITIVE, help="optimizer steps (train.steps)")
    add_json(p, "also write the summary to this JSON file")
    add_overrides(p)
    p.set_defaults(func=cmd_train, reads=train_reads, left=train_left)


def default_preset(preset: str | None, file: str | Path | None) -> str | None:
    """train's preset: the one given, else tiny unless a config file is given."""
    return preset or (None if file else "tiny")


def train_config(args):
    """(the config `train` runs, the name its default folder starts with): defaults <- the preset
    <- --config, or a resumed run's config.toml when neither is given <- the overrides."""
    from learntok.run.config import load_config

    if args.resume and not args.out:
        raise ConfigError("--resume needs --out RUN_DIR")
    base = Path(args.out) / "config.toml" if args.resume and not (args.preset or args.config) else args.config
    preset = default_preset(args.preset, base)
    return load_config(preset, base, with_steps(args)), preset or Path(base).stem


def cmd_train(args) -> None:
    from learntok.train.loop import train

    cfg, name = train_config(args)
    args.out = args.out or default_out(name, cfg.model.boundary)
    summary = train(cfg, args.out, resume=args.resume)
    if launch_rank() == 0:  # under torchrun, one summary
        print(json.dumps(summary, indent=2))
        write_json(args.json, summary)


def train_reads(args) -> list[Input]:
    """What `train` reads beyond its options' paths: the data.source of the config it runs
    (`train_config`); a config that does not resolve names nothing here (cmd_train reports it)."""
    try:
        cfg, _ = train_config(args)
    except (ConfigError, DataError):
        return []
    return [Input("data.source", cfg.data.source)]


def train_left(args) -> str:
    """What a train stopped by Ctrl-C or a fault leaves: the run, whole at its latest checkpoint
    (every write is atomic: docs/reliability.md), and the command that resumes it."""
    from learntok.run.checkpoint import latest_checkpoint

    if not args.out or not Path(args.out).is_dir():
        return "no run folder was written"
    try:
        latest = latest_checkpoint(args.out)
    except Exception:  # an unreadable pointer: say nothing wrong
        latest = None
    if latest is None:
        return f"the run {args.out} has no checkpoint yet: start it again with the same command"
    return (
        f"the run {args.out} is whole at step {int(latest.name.removeprefix('step_'))} (its latest "
        f"checkpoint); resume with `learntok train --out {args.out} --resume`"
    )


def add_config(sub) -> None:
    p = sub.add_parser(
        "config",
        help="show the resolved config with each key's source, every key, or a per-GPU plan",
        description="The config `learntok train` would run with the same --preset, --config and "
        "overrides (default preset tiny), as TOML; nothing is run.",
    )
    p.add_argument(
        "--preset", type=str, help="packaged preset: tiny, 20M, 40M, 90M, 147M (default: tiny, unless --config)"
    )
    p.add_argument("--config", type=input_file, help="a TOML (or JSON) file of config sections")
    show = p.add_mutually_exclusive_group()  # what to show: one of them, or the config
    show.add_argument("--keys", action="store_true", help="list every key instead: type, default and meaning")
    show.add_argument(
        "--plan",
        action="store_true",
        help="per GPU: parameters, peak memory, FLOPs, GPU-hours and the "
        "micro-batch that fits 24/40/80/141 GB, with DDP and FSDP (docs/reproduce.md)",
    )
    p.add_argument(
        "--mfu", type=PROBABILITY, help="with --plan: model FLOPs utilisation for the GPU-hours (default 0.4)"
    )
    add_overrides(p)
    p.set_defaults(func=cmd_config)


def cmd_config(args) -> None:
    from learntok.run.config import to_toml
    from learntok.run.config_info import all_keys, format_keys, resolve
    from learntok.train.plan import budget_lines, format_plan, plan

    cfg, sources = resolve(default_preset(args.preset, args.config), args.config, args.overrides)
    if args.keys:
        print(format_keys(all_keys()))
    elif args.plan:
        print(format_plan(cfg, plan(cfg) if args.mfu is None else plan(cfg, args.mfu)))
    else:
        print("\n".join(f"# {line}" for line in budget_lines(cfg)) + "\n\n" + to_toml(cfg, sources), end="")


def add_compare(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="train and evaluate several boundary strategies on one backbone and budget",
        description="Variants: STRATEGY[+key=value...], e.g. learned+gamma=1.0; finished variants are skipped. "
        "Or --runs: finished runs side by side on the same windows.",
    )
    p.add_argument("--preset", type=str, help="packaged preset shared by every variant (default tiny)")
    p.add_argument("--strategies", type=str, help="comma-separated variants, e.g. learned,uniform,bpe,learned+w=1")
    p.add_argument(
        "--runs",
        nargs="+",
        type=input_run,
        metavar="RUN",
        help="instead of training: evaluate these finished "
        "run folders on the first one's windows, with each one's difference from it paired by window "
        "(docs/compare.md)",
    )
    p.add_argument("--steps", type=POSITIVE, help="optimizer steps per variant (train.steps)")
    p.add_argument("--out", type=output_folder, help="results folder (default runs/compare-<preset>-<timestamp>)")
    p.add_argument(
        "--ablations",
        action="store_true",
        help="add the learned policy's ablations (gamma=1, no batch baseline, no early-exit reward, w=1, no rate loss)",
    )
    p.add_argument("--eval-bytes", type=POSITIVE, help="cap on bytes per split in the final evaluation (default: all)")
    p.add_argument("--jobs", type=POSITIVE, default=1, help="train this many variants at once, one CPU thread each")
    p.add_argument(
        "--seeds",
        type=str,
        help="train every variant at every seed: a count (3 = seeds 0,1,2) or a list (0,4,5); "
        "runs in OUT/<variant>/seed<k>, table over seeds with differences paired by seed",
    )
    p.add_argument(
        "--rates",
        type=str,
        help="comma-separated target rates: every variant at every rate (variant@rate), "
        "plus the bpb-vs-rate frontier (docs/rate.md)",
    )
    add_rate(
        p,
        "with --runs: score every run at this boundary rate, calibrated on the first run's val split "
        "(docs/rate.md); to train at rates, --rates",
        "with --rate: online (the offset moves with the decisions made) or calibrated (fixed)",
    )
    p.add_argument(
        "--sweep",
        type=str,
        metavar="VARIANT",
        help="with --rates: run this variant's model at every rate by "
        "calibration, against the models trained at each rate",
    )
    add_json(p, "also write the results to this JSON file")
    add_overrides(p, "config overrides shared by every variant")
    p.set_defaults(
        func=cmd_compare,
        reads=compare_reads,
        left=lambda args: f"finished variants are kept in {args.out}; the same command with --out {args.out} continues",
    )


def cmd_compare(args) -> None:
    from learntok.compare.runner import compare, parse_seeds
    from learntok.compare.report import format_seed_table, format_table, seed_summary

    if args.runs is not None:
        return cmd_compare_runs(args)
    if args.rate is not None:
        raise ConfigError(
            f"--rate {args.rate:g} scores finished runs (--runs) at a rate: to train the variants at it, "
            f"give --rates {args.rate:g}"
        )
    if args.strategies is None:
        raise ConfigError("compare needs --strategies (variants to train) or --runs (finished runs to evaluate)")
    preset, overrides, variants = compare_setup(args)
    seeds = parse_seeds(args.seeds) if args.seeds is not None else None
    out = args.out = args.out or default_out("compare", preset)
    records = compare(variants, out, preset, overrides, args.eval_bytes, jobs=args.jobs, sweep=args.sweep, seeds=seeds)
    if launch_rank() == 0:  # under torchrun, one table
        print(format_seed_table(seed_summary(records, variants)) if seeds is not None else format_table(records))
        print(f"results in {out}", file=sys.stderr)
        write_json(args.json, {"results": records})


def compare_setup(args) -> tuple[str, list[str], list[str]]:
    """(preset, shared overrides, variants) of a `compare` that trains: the preset (default tiny)
    and overrides every variant's config is built from (learntok.compare.runner.variant_config)."""
    from learntok.compare.runner import variants_from_args

    return args.preset or "tiny", with_steps(args), variants_from_args(args.strategies, args.ablations, args.rates)


def compare_reads(args) -> list[Input]:
    """What `compare` reads beyond its options' paths: each variant's data.source, its config
    built as `compare` builds it (the shared overrides, then the variant's own, e.g.
    `learned+data.source=FILE`); with --runs, the data of the first run (whose windows every run
    is scored on). What does not resolve names nothing here (the command reports it)."""
    from learntok.compare.runner import variant_config

    if args.runs is not None:
        return run_data(args.runs[0])
    if args.strategies is None:
        return []
    sources = []
    try:
        preset, overrides, variants = compare_setup(args)
        for spec in variants:
            with contextlib.suppress(ConfigError, DataError):
                sources.append(variant_config(spec, preset, overrides).data.source)
    except ConfigError:
        return []
    return [Input("data.source", s) for s in dict.fromkeys(sources)]


def cmd_compare_runs(args) -> None:
    from learntok.compare.runs import compare_runs, format_runs, refuse_training

    jobs = None if args.jobs == 1 else args.jobs  # None: not given
    given = (args.strategies, args.preset, args.steps, args.out, args.ablations or None, jobs, args.seeds, args.rates)
    refuse_training(dict(zip(TRAINING_OPTIONS, (*given, args.sweep))), args.overrides)
    report = compare_runs(args.runs, args.eval_bytes, args.rate, args.rate_mode)
    print(format_runs(report), end="")
    write_json(args.json, report)


def add_prepare(sub) -> None:
    p = sub.add_parser(
        "prepare",
        help="text, folders, JSONL(.gz), parquet -> memory-mapped byte shards",
        description="Streams the sources into DATA_DIR; train from it with data.source=DATA_DIR.",
    )
    p.add_argument(
        "sources", nargs="+", type=input_data, metavar="SOURCE", help="text file, folder, .jsonl(.gz) or .parquet"
    )
    p.add_argument("--out", type=output_folder, required=True, metavar="DATA_DIR", help="output folder (new or empty)")
    p.add_argument("--text-field", type=str, default="text", help="JSONL field / parquet column of the text")
    p.add_argument("--min-doc-bytes", type=COUNT, default=1, help="drop shorter documents")
    p.add_argument("--max-doc-bytes", type=POSITIVE, help="drop longer documents (or cut them with --truncate)")
    p.add_argument("--truncate", action="store_true", help="cut documents to --max-doc-bytes instead of dropping them")
    p.add_argument("--val-fraction", type=FRACTION_ARG, default=0.05, help="expected fraction of documents in val")
    p.add_argument("--test-fraction", type=FRACTION_ARG, default=0.05, help="expected fraction of documents in test")
    add_seed(p, "seed of the split hash")
    p.add_argument("--shard-mb", type=SHARD_MB, default=256, help="target shard size (MiB)")
    p.add_argument(
        "--piece-bytes", type=POSITIVE, default=1 << 14, help="read text files as documents of about this many bytes"
    )
    add_json(p, "also write the index to this JSON file")
    p.set_defaults(
        func=cmd_prepare,
        left=lambda args: (
            f"nothing was left in {args.out} (prepare writes its folder whole or not at all): run it again"
        ),
    )


def cmd_prepare(args) -> None:
    from learntok.data.prepare import PrepareOptions, prepare

    opts = request(PrepareOptions, args, shard_bytes=args.shard_mb << 20)
    index = prepare(args.sources, args.out, opts)
    mb = index["input_bytes"] / 1e6
    print(
        " ".join(f"{s} {v['documents']} docs {v['bytes']} bytes" for s, v in index["splits"].items())
        + f"; {mb:.1f} MB in {index['seconds']:.1f}s ({mb / max(index['seconds'], 1e-9):.1f} MB/s)",
        file=sys.stderr,
    )
    write_json(args.json, index)
