"""Command line: `learntok SUBCOMMAND ...`, each subcommand a thin call into the library.

To add a subcommand, write `add_NAME(sub)` that adds its parser and sets `func` (a function
of the parsed args returning an exit code or None), and list it in COMMANDS. Expected
mistakes (bad config, data, checkpoint, a diverged run, a missing file) print one line
`learntok: error: ...` and exit 2; so do faults of the machine (disk full, a file size limit,
permission denied), saying what the command left behind. Ctrl-C prints one line and exits 130;
a closed pipe (`learntok sample ... | head`) ends the command quietly with 141, as SIGPIPE
would. Anything else is a bug and keeps its traceback (docs/reliability.md).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

from learntok import __version__
from learntok.arguments import (
    COUNT,
    FRACTION_ARG,
    NONNEGATIVE,
    POSITIVE,
    PROBABILITY,
    RATE_ARG,
    SEED_ARG,
    SHARD_MB,
    WINDOW,
    number,
    text_arg,
)
from learntok.errors import ConfigError
from learntok.files import input_data, input_file, input_run, output_file, output_folder
from learntok.faults import SIGINT_EXIT, SIGPIPE_EXIT, fault_line, quiet_stdout
from learntok.ranges import THREADS


def set_threads(n: int) -> None:
    from learntok.runtime import set_threads as set_torch_threads

    set_torch_threads(n)


def launch_rank() -> int:
    from learntok.runtime import launch_rank as rank

    return rank()


def _expected_errors() -> tuple[type[BaseException], ...]:
    from learntok.checkpoint import CheckpointError
    from learntok.config import ConfigError
    from learntok.data import DataError
    from learntok.errors import OutputError
    from learntok.train import TrainingDiverged

    return ConfigError, DataError, CheckpointError, OutputError, TrainingDiverged, FileNotFoundError


ERROR = "learntok: error: "  # the one prefix of every expected error's line


class _Parser(argparse.ArgumentParser):
    """Usage mistakes, like every expected error, are one line on stderr and exit 2."""

    def error(self, message: str):
        command = self.prog.removeprefix("learntok").strip()  # "" for the top level, else the subcommand
        self.exit(2, f"{ERROR}{command + ': ' if command else ''}{message} (see {self.prog} --help)\n")


def device_arg(text: str) -> str:
    """--device: a device learntok runs on and this machine has (checked before a model is read)."""
    from learntok.runtime import resolve_device

    try:
        resolve_device(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def check_outputs(args) -> None:
    """Refuse, before any work, every output this command line must not write (learntok.outputs)."""
    from learntok.outputs import check_command_line

    check_command_line(args)


def with_steps(args) -> list[str]:
    """The command's overrides, with `--steps N` as train.steps=N (last, so it wins)."""
    return [*args.overrides, *([f"train.steps={args.steps}"] if args.steps is not None else [])]


def write_json(path: str | None, record: dict) -> None:
    """`--json PATH` for commands that report figures, written whole (learntok.files.write_output)."""
    from learntok.files import write_output

    if path:
        write_output(path, json.dumps(record, indent=2) + "\n")


def short_run_hint(path: str) -> None:
    """`segment` and `eval`, once they are done: one stderr line when a learned policy has trained
    too few steps to settle (after the output, so that an error stays the only line)."""
    from learntok.checkpoint import short_run_hint as hint

    line = hint(path)
    if line:
        print(line, file=sys.stderr)


# ---------------------------------------------------------------- train


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
    p.add_argument("--json", type=output_file, help="also write the summary to this JSON file")
    p.add_argument(
        "overrides", nargs="*", type=str, metavar="key.sub=value", help="config overrides, e.g. train.steps=100"
    )
    p.set_defaults(func=cmd_train, left=train_left)


def default_preset(preset: str | None, file: str | Path | None) -> str | None:
    """train's preset: the one given, else tiny unless a config file is given."""
    return preset or (None if file else "tiny")


def cmd_train(args) -> None:
    from learntok.config import ConfigError, load_config
    from learntok.train import train

    if args.resume and not args.out:
        raise ConfigError("--resume needs --out RUN_DIR")
    base = Path(args.out) / "config.toml" if args.resume and not (args.preset or args.config) else args.config
    preset = default_preset(args.preset, base)
    cfg = load_config(preset, base, with_steps(args))
    args.out = args.out or f"runs/{preset or Path(base).stem}-{cfg.model.boundary}-{time.strftime('%Y%m%d-%H%M%S')}"
    summary = train(cfg, args.out, resume=args.resume)
    if launch_rank() == 0:  # under torchrun, one summary
        print(json.dumps(summary, indent=2))
        write_json(args.json, summary)


def train_left(args) -> str:
    """What a train stopped by Ctrl-C or a fault leaves: the run, whole at its latest checkpoint
    (every write is atomic: docs/reliability.md), and the command that resumes it."""
    from learntok.checkpoint import latest_checkpoint

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


# ---------------------------------------------------------------- config


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
    p.add_argument("--keys", action="store_true", help="list every key instead: type, default and meaning")
    p.add_argument(
        "--plan",
        action="store_true",
        help="per GPU: parameters, peak memory, FLOPs, GPU-hours and the "
        "micro-batch that fits 24/40/80/141 GB, with DDP and FSDP (docs/reproduce.md)",
    )
    p.add_argument(
        "--mfu", type=PROBABILITY, help="with --plan: model FLOPs utilisation for the GPU-hours (default 0.4)"
    )
    p.add_argument(
        "overrides", nargs="*", type=str, metavar="key.sub=value", help="config overrides, e.g. train.steps=100"
    )
    p.set_defaults(func=cmd_config)


def cmd_config(args) -> None:
    from learntok.config import to_toml
    from learntok.config_info import all_keys, format_keys, resolve
    from learntok.plan import budget_lines, format_plan, plan

    cfg, sources = resolve(default_preset(args.preset, args.config), args.config, args.overrides)
    if args.keys:
        print(format_keys(all_keys()))
    elif args.plan:
        print(format_plan(cfg, plan(cfg) if args.mfu is None else plan(cfg, args.mfu)))
    else:
        print("\n".join(f"# {line}" for line in budget_lines(cfg)) + "\n\n" + to_toml(cfg, sources), end="")


# ---------------------------------------------------------------- segment


def add_segment(sub) -> None:
    p = sub.add_parser("segment", help="show how a model cuts text into tokens")
    p.add_argument(
        "model", type=input_run, metavar="RUN_OR_CKPT", help="run folder (latest checkpoint) or model/checkpoint folder"
    )
    p.add_argument("text", nargs="?", type=text_arg, help="text to segment (or --file, or --held-out)")
    p.add_argument("--file", type=input_file, help="read the text from this file (bytes as they are)")
    p.add_argument(
        "--held-out", action="store_true", help="a passage of the run's test split, with the run's validation figures"
    )
    p.add_argument(
        "--html",
        type=output_file,
        metavar="OUT",
        help="also write an HTML page (with the learned policy: a compression slider)",
    )
    rule = p.add_mutually_exclusive_group()
    rule.add_argument("--greedy", action="store_true", help="decide p > 0.5 (the default, as the API does)")
    rule.add_argument("--sampled", action="store_true", help="sample the decisions, as training does (--seed)")
    p.add_argument("--seed", type=SEED_ARG, default=0, help="seed of the sampled boundaries")
    p.add_argument(
        "--window", type=WINDOW, default=4096, help="read long texts in pieces of this many bytes (BOS included)"
    )
    p.add_argument(
        "--rate", type=RATE_ARG, help="cut at this boundary rate, calibrated on the run's val split (docs/rate.md)"
    )
    p.add_argument(
        "--rate-mode",
        choices=["online", "calibrated"],
        help="with --rate: online (the offset moves with the decisions made, so the rate holds on any "
        "text; the default where the strategy has it) or calibrated (the offset found on val, fixed)",
    )
    p.add_argument("--json", type=output_file, help="write chunks and stats to this JSON file")
    p.set_defaults(func=cmd_segment)


def cmd_segment(args) -> None:
    from learntok.segment import SegmentRequest, segment_command

    request = SegmentRequest(not args.sampled, args.seed, args.rate, args.rate_mode, args.json, args.html)
    segment_command(args.model, args.text, args.file, args.held_out, args.window, request, sys.stdout, sys.stderr)
    short_run_hint(args.model)


# ---------------------------------------------------------------- eval, eval-tasks, diagnose, plot (docs/evaluation.md)


def add_eval(sub) -> None:
    p = sub.add_parser("eval", help="bits per byte (with error bars) and boundary quality")
    p.add_argument(
        "model", type=input_run, metavar="RUN_OR_CKPT", help="run folder (latest checkpoint) or model/checkpoint folder"
    )
    p.add_argument(
        "--split", default="test", choices=["train", "val", "test", "all"], help="split of the data (all: unsplit)"
    )
    p.add_argument("--source", type=input_data, help="another data.source (built-in name or path) instead of the run's")
    p.add_argument(
        "--samples", type=POSITIVE, default=1, help="K sampled segmentations: mean bpb and log-mean-exp bound"
    )
    p.add_argument("--greedy", action="store_true", help="decide p > 0.5 instead of sampling")
    p.add_argument("--batch-size", type=POSITIVE, help="rows per batch (default: the run's)")
    p.add_argument("--seq-len", type=WINDOW, help="bytes per row, BOS included (default: the run's)")
    p.add_argument("--max-bytes", type=POSITIVE, help="score at most this many bytes")
    p.add_argument(
        "--bpe-vocab", type=POSITIVE, default=4096, help="vocabulary of the BPE reference trained on the fly"
    )
    p.add_argument("--seed", type=SEED_ARG, default=0, help="seed of the sampled boundaries")
    p.add_argument(
        "--rate", type=RATE_ARG, help="run at this boundary rate, calibrated on the val split (docs/rate.md)"
    )
    p.add_argument(
        "--rate-mode",
        choices=["online", "calibrated"],
        help="with --rate: online (the offset moves with the decisions made, so the rate holds on any "
        "text; the default where the strategy has it) or calibrated (the offset found on val, fixed)",
    )
    p.add_argument(
        "--boundaries-from",
        type=input_run,
        metavar="OTHER_RUN",
        help="score the model with another run's boundary decisions "
        "on the same windows, or 'uniform' (random at its target rate); also reports its own, paired "
        "(docs/compare.md)",
    )
    p.add_argument("--device", default="cpu", type=device_arg)
    p.add_argument("--json", type=output_file, help="write every figure to this JSON file")
    p.set_defaults(func=cmd_eval)


# Options that only say how another one works: given without it, each would be ignored, so
# each is refused (checked in `main` for every command, before any work).
OPTION_NEEDS = {
    "rate_mode": ("rate", "--rate R (the rate to hold)"),
    "mfu": ("plan", "--plan (the GPU-hours it scales)"),
}


def check_needs(args) -> None:
    for dest, (needed, what) in OPTION_NEEDS.items():
        value = getattr(args, dest, None)
        if value is not None and getattr(args, needed, None) in (None, False):
            raise ConfigError(f"--{dest.replace('_', '-')} {value} needs {what}")


def cmd_eval(args) -> None:
    from learntok.evaluate import format_report, run_eval

    report = run_eval(
        args.model,
        args.split,
        args.source,
        args.samples,
        args.greedy,
        args.batch_size,
        args.seq_len,
        args.max_bytes,
        args.seed,
        args.bpe_vocab,
        args.device,
        args.rate,
        args.boundaries_from,
        args.rate_mode,
    )
    print(format_report(report))
    write_json(args.json, report)
    short_run_hint(args.model)


def add_eval_tasks(sub) -> None:
    p = sub.add_parser("eval-tasks", help="zero-shot tasks from JSONL(.gz) files")
    p.add_argument("model", type=input_run, metavar="RUN_OR_CKPT")
    p.add_argument(
        "--task", type=input_file, action="append", required=True, metavar="FILE", help="task file (repeatable)"
    )
    p.add_argument("--batch-size", type=POSITIVE, default=16)
    p.add_argument("--seq-len", type=WINDOW, help="bytes per row, BOS included (default: the run's)")
    p.add_argument("--greedy", action="store_true", help="greedy boundaries (p > 0.5) instead of sampled ones")
    p.add_argument("--seed", type=SEED_ARG, default=0, help="seed of the sampled boundaries")
    p.add_argument("--limit", type=POSITIVE, help="first N examples of each task")
    p.add_argument(
        "--delimiter",
        default=" ",
        type=text_arg,
        help="between context and continuation (unless the context ends in whitespace)",
    )
    p.add_argument("--device", default="cpu", type=device_arg)
    p.add_argument("--json", type=output_file, help="write the results to this JSON file")
    p.set_defaults(func=cmd_eval_tasks)


def cmd_eval_tasks(args) -> None:
    from learntok.eval_tasks import format_tasks, run_tasks

    report = run_tasks(
        args.model,
        args.task,
        args.batch_size,
        args.seq_len,
        args.greedy,
        args.seed,
        args.limit,
        args.delimiter,
        args.device,
    )
    print(format_tasks(report))
    write_json(args.json, report)


def add_diagnose(sub) -> None:
    p = sub.add_parser("diagnose", help="variance and SNR of the policy-gradient estimator per trick")
    p.add_argument("model", type=input_run, metavar="RUN_OR_CKPT", help="run or checkpoint folder")
    p.add_argument("--batches", type=POSITIVE, default=4, help="fixed training batches")
    p.add_argument("--samples", type=POSITIVE, default=16, help="K boundary samples per batch")
    p.add_argument("--batch-size", type=POSITIVE, help="default: the run's, at most 16")
    p.add_argument("--seq-len", type=WINDOW, help="default: the run's, at most 512")
    p.add_argument("--seed", type=SEED_ARG, default=0)
    p.add_argument("--out", type=output_folder, help="folder for diagnose.md/.json/.png (default RUN/diagnose)")
    p.add_argument("--device", default="cpu", type=device_arg)
    p.add_argument("--json", type=output_file, help="also write the table to this JSON file")
    p.set_defaults(func=cmd_diagnose)


def cmd_diagnose(args) -> None:
    from learntok.diagnose import markdown_table, run_diagnose

    report = run_diagnose(
        args.model, args.batches, args.samples, args.batch_size, args.seq_len, args.seed, args.out, args.device
    )
    print(markdown_table(report["estimators"]))
    print("wrote " + ", ".join(report["files"]), file=sys.stderr)
    write_json(args.json, report)


def add_plot(sub) -> None:
    p = sub.add_parser("plot", help="training and validation curves of runs (PNG)")
    p.add_argument("runs", nargs="+", type=input_run, metavar="RUN")
    p.add_argument(
        "--out", type=output_folder, help="output folder (default: RUN/plots for one run, plots/ for several)"
    )
    p.add_argument("--x", default="step", choices=["step", "bytes_seen"], help="x axis")
    p.set_defaults(func=cmd_plot)


def cmd_plot(args) -> None:
    from learntok.plots import plot_runs

    out = args.out or (str(Path(args.runs[0]) / "plots") if len(args.runs) == 1 else "plots")
    for path in plot_runs(args.runs, out, args.x):
        print(path)


# ---------------------------------------------------------------- sample


def add_sample(sub) -> None:
    p = sub.add_parser("sample", help="stream a model's continuation of a prompt (cached decoding)")
    p.add_argument(
        "model", type=input_run, metavar="RUN_OR_CKPT", help="run folder (latest checkpoint) or model/checkpoint folder"
    )
    p.add_argument("--prompt", required=True, type=text_arg, help="text to continue")
    p.add_argument("--max-bytes", type=POSITIVE, default=256, help="bytes to generate (fewer if EOS is drawn)")
    p.add_argument("--temperature", type=NONNEGATIVE, default=1.0, help="0: argmax")
    p.add_argument("--top-k", type=POSITIVE, help="sample from the k likeliest bytes")
    p.add_argument(
        "--top-p", type=PROBABILITY, help="nucleus sampling: the smallest set of bytes with probability >= p"
    )
    p.add_argument("--seed", type=SEED_ARG, help="seed of the sampled bytes and boundaries")
    p.add_argument(
        "--boundaries",
        choices=["greedy", "sample"],
        default="greedy",
        help="take p > 0.5 (the default, as segment and the API do) or sample boundaries as training does",
    )
    p.add_argument("--show-boundaries", action="store_true", help="mark chunks: colours on a terminal, | otherwise")
    p.add_argument(
        "--rate", type=RATE_ARG, help="generate at this boundary rate, calibrated on the run's val split (docs/rate.md)"
    )
    p.add_argument(
        "--rate-mode",
        choices=["online", "calibrated"],
        help="with --rate: online (the offset moves with the decisions made, so the rate holds on any "
        "text; the default where the strategy has it) or calibrated (the offset found on val, fixed)",
    )
    p.add_argument("--device", default="cpu", type=device_arg)
    p.add_argument(
        "--json",
        type=output_file,
        help="write the prompt, the generated text (and its bytes in base64), "
        "bytes/s and boundary rate to this JSON file",
    )
    p.set_defaults(func=cmd_sample)


def cmd_sample(args) -> None:
    from learntok.checkpoint import load_run
    from learntok.model.generate import SamplingOptions
    from learntok.sample import sample_at_rate

    model, run_cfg = load_run(args.model, args.device)
    opts = SamplingOptions(args.max_bytes, args.temperature, args.top_k, args.top_p, args.seed, args.boundaries)
    stats = sample_at_rate(model, run_cfg, args.prompt, opts, args.rate, args.rate_mode, args.show_boundaries)
    write_json(args.json, stats)


# ---------------------------------------------------------------- compare


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
    p.add_argument(
        "--rate",
        type=RATE_ARG,
        help="with --runs: score every run at this boundary rate, calibrated on the first run's val split "
        "(docs/rate.md); to train at rates, --rates",
    )
    p.add_argument(
        "--rate-mode",
        choices=["online", "calibrated"],
        help="with --rate: online (the offset moves with the decisions made) or calibrated (fixed)",
    )
    p.add_argument(
        "--sweep",
        type=str,
        metavar="VARIANT",
        help="with --rates: run this variant's model at every rate by "
        "calibration, against the models trained at each rate",
    )
    p.add_argument("--json", type=output_file, help="also write the results to this JSON file")
    p.add_argument(
        "overrides", nargs="*", type=str, metavar="key.sub=value", help="config overrides shared by every variant"
    )
    p.set_defaults(
        func=cmd_compare,
        left=lambda args: f"finished variants are kept in {args.out}; the same command with --out {args.out} continues",
    )


def cmd_compare(args) -> None:
    from learntok.compare import compare, parse_seeds, variants_from_args
    from learntok.compare_report import format_seed_table, format_table, seed_summary

    if args.runs is not None:
        return cmd_compare_runs(args)
    if args.rate is not None:
        raise ConfigError(
            f"--rate {args.rate:g} scores finished runs (--runs) at a rate: to train the variants at it, "
            f"give --rates {args.rate:g}"
        )
    if args.strategies is None:
        raise ConfigError("compare needs --strategies (variants to train) or --runs (finished runs to evaluate)")
    preset = args.preset or "tiny"
    overrides = with_steps(args)
    seeds = parse_seeds(args.seeds) if args.seeds is not None else None
    out = args.out = args.out or f"runs/compare-{preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    variants = variants_from_args(args.strategies, args.ablations, args.rates)
    records = compare(variants, out, preset, overrides, args.eval_bytes, jobs=args.jobs, sweep=args.sweep, seeds=seeds)
    if launch_rank() == 0:  # under torchrun, one table
        print(format_seed_table(seed_summary(records, variants)) if seeds is not None else format_table(records))
        print(f"results in {out}", file=sys.stderr)
        write_json(args.json, {"results": records})


def cmd_compare_runs(args) -> None:
    from learntok.compare_runs import compare_runs, format_runs

    training = {
        "--strategies": args.strategies,
        "--preset": args.preset,
        "--steps": args.steps,
        "--out": args.out,
        "--ablations": args.ablations or None,
        "--jobs": None if args.jobs == 1 else args.jobs,
        "--seeds": args.seeds,
        "--rates": args.rates,
        "--sweep": args.sweep,
        "key=value overrides": [o for o in args.overrides if not o.startswith("system.threads=")] or None,
    }  # main adds --threads
    given = [name for name, value in training.items() if value is not None]
    if given:
        raise ConfigError(f"--runs evaluates finished runs: drop the training options ({', '.join(given)})")
    report = compare_runs(args.runs, args.eval_bytes, args.rate, args.rate_mode)
    print(format_runs(report), end="")
    write_json(args.json, report)


# ---------------------------------------------------------------- prepare (docs/scaling.md)


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
    p.add_argument("--seed", type=SEED_ARG, default=0, help="seed of the split hash")
    p.add_argument("--shard-mb", type=SHARD_MB, default=256, help="target shard size (MiB)")
    p.add_argument(
        "--piece-bytes", type=POSITIVE, default=1 << 14, help="read text files as documents of about this many bytes"
    )
    p.add_argument("--json", type=output_file, help="also write the index to this JSON file")
    p.set_defaults(
        func=cmd_prepare,
        left=lambda args: (
            f"nothing was left in {args.out} (prepare writes its folder whole or not at all): run it again"
        ),
    )


def cmd_prepare(args) -> None:
    from learntok.data.prepare import PrepareOptions, prepare

    opts = PrepareOptions(
        args.text_field,
        args.min_doc_bytes,
        args.max_doc_bytes,
        args.truncate,
        args.val_fraction,
        args.test_fraction,
        args.seed,
        args.shard_mb << 20,
        args.piece_bytes,
    )
    index = prepare(args.sources, args.out, opts)
    mb = index["input_bytes"] / 1e6
    print(
        " ".join(f"{s} {v['documents']} docs {v['bytes']} bytes" for s, v in index["splits"].items())
        + f"; {mb:.1f} MB in {index['seconds']:.1f}s ({mb / max(index['seconds'], 1e-9):.1f} MB/s)",
        file=sys.stderr,
    )
    write_json(args.json, index)


# ---------------------------------------------------------------- entry point

COMMANDS = [
    add_train,
    add_config,
    add_segment,
    add_eval,
    add_eval_tasks,
    add_diagnose,
    add_plot,
    add_sample,
    add_compare,
    add_prepare,
]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="learntok", description="Byte-level LMs that learn their own tokenization.")
    parser.add_argument("--version", action="version", version=f"learntok {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    for p in sub.choices.values():
        p.add_argument(
            "--threads",
            type=number(int, THREADS),
            default=0,
            help="CPU threads for torch (default: all cores; give 1 to runs that share a machine)",
        )
        p.set_defaults(command_parser=p)  # its options' types name its inputs and outputs
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Like parse_args, but `key=value` overrides may stand anywhere among the options (argparse
    alone takes them only as one run of positionals)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    command = parser._subparsers._group_actions[0].choices[args.command]  # the subcommand's parser
    # argparse fills positionals only from the first run of them: an optional one (segment's
    # text) given after an option is left over; place it (through its type, as argparse would).
    for action in command._get_positional_actions():
        if action.nargs == "?" and getattr(args, action.dest) is None:
            plain = [a for a in extra if not a.startswith("-") and (not hasattr(args, "overrides") or "=" not in a)]
            if plain:
                setattr(args, action.dest, action.type(plain[0]) if action.type else plain[0])
                extra.remove(plain[0])
    if hasattr(args, "overrides"):
        args.overrides += [a for a in extra if "=" in a and not a.startswith("-")]
        extra = [a for a in extra if "=" not in a or a.startswith("-")]
    if extra:
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _stopped(args, what: str) -> str:
    """`what` happened, and what the command leaves behind (its `left` hook), in one line."""
    left = getattr(args, "left", None)
    return " ".join((f"{what}; {left(args)}" if left else what).split())


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as e:  # --help, or a usage error already printed
        return e.code
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="replace")  # a non-UTF-8 terminal shows "?", no crash
    try:
        check_outputs(args)
        check_needs(args)
        if args.threads and hasattr(args, "overrides"):
            args.overrides = [*args.overrides, f"system.threads={args.threads}"]  # recorded in the run's config
        set_threads(args.threads)
        code = args.func(args) or 0
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except _expected_errors() as e:
        message = " ".join(str(e).split()).replace(ERROR, "")  # a quoted child's error line keeps no prefix of its own
        print(ERROR + message, file=sys.stderr)
        return 2
    except BrokenPipeError:
        quiet_stdout()
        return SIGPIPE_EXIT
    except KeyboardInterrupt:
        print(f"learntok: {_stopped(args, 'interrupted')}", file=sys.stderr)
        return SIGINT_EXIT
    except OSError as e:
        line = fault_line(e)
        if line is None:
            raise
        print(f"learntok: error: {_stopped(args, line)}", file=sys.stderr)
        return 2
