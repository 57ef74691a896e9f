"""`learntok eval`, `eval-tasks`, `diagnose` and `plot`: figures of trained runs (docs/evaluation.md)."""

from __future__ import annotations

import sys
from pathlib import Path

from learntok.cli.options import (
    Input,
    add_device,
    add_greedy,
    add_json,
    add_model,
    add_rate,
    add_seed,
    check_run,
    model_data,
    request,
    run_data,
)
from learntok.cli.results import short_run_hint, write_json
from learntok.cli.values import POSITIVE, REPEAT, VOCAB, WINDOW, text_arg
from learntok.util.files import input_data, input_file, input_run, output_folder


def add_eval(sub) -> None:
    p = sub.add_parser("eval", help="bits per byte (with error bars) and boundary quality")
    add_model(p)
    p.add_argument(
        "--split", default="test", choices=["train", "val", "test", "all"], help="split of the data (all: unsplit)"
    )
    p.add_argument("--source", type=input_data, help="another data.source (built-in name or path) instead of the run's")
    p.add_argument("--samples", type=REPEAT, default=1, help="K sampled segmentations: mean bpb and log-mean-exp bound")
    add_greedy(p)
    p.add_argument("--batch-size", type=POSITIVE, help="rows per batch (default: the run's)")
    p.add_argument("--seq-len", type=WINDOW, help="bytes per row, BOS included (default: the run's)")
    p.add_argument("--max-bytes", type=POSITIVE, help="score at most this many bytes")
    p.add_argument("--bpe-vocab", type=VOCAB, default=4096, help="vocabulary of the BPE reference trained on the fly")
    add_seed(p)
    add_rate(p, "run at this boundary rate, calibrated on the first 64 KB of the split scored (docs/rate.md)")
    p.add_argument(
        "--boundaries-from",
        type=input_run,
        metavar="OTHER_RUN",
        help="score the model with another run's boundary decisions "
        "on the same windows, or 'uniform' (random at its target rate); also reports its own, paired "
        "(docs/compare.md)",
    )
    add_device(p)
    add_json(p, "write every figure to this JSON file")
    p.set_defaults(func=cmd_eval, reads=eval_reads)


def cmd_eval(args) -> None:
    check_run(args.model)
    from learntok.evaluation.evaluate import EvalRequest, evaluate_request, format_report

    run, report = evaluate_request(request(EvalRequest, args, run=args.model))
    print(format_report(report))
    write_json(args.json, report)
    short_run_hint(run)  # the checkpoint evaluated, not the one `latest` names now


def eval_reads(args) -> list[Input]:
    """What `eval` reads beyond its options' paths: the run's own data, unless --source (an
    option's path) replaces it."""
    return run_data(args.model) if args.source is None else []


def add_eval_tasks(sub) -> None:
    p = sub.add_parser("eval-tasks", help="zero-shot tasks from JSONL(.gz) files")
    add_model(p, help=None)
    p.add_argument(
        "--task", type=input_file, action="append", required=True, metavar="FILE", help="task file (repeatable)"
    )
    p.add_argument("--batch-size", type=POSITIVE, default=16)
    p.add_argument("--seq-len", type=WINDOW, help="bytes per row, BOS included (default: the run's)")
    add_greedy(p, "greedy boundaries (p > 0.5) instead of sampled ones")
    add_seed(p)
    p.add_argument("--limit", type=POSITIVE, help="first N examples of each task")
    p.add_argument(
        "--delimiter",
        default=" ",
        type=text_arg,
        help="between context and continuation (unless the context ends in whitespace)",
    )
    add_device(p)
    add_json(p, "write the results to this JSON file")
    p.set_defaults(func=cmd_eval_tasks)


def cmd_eval_tasks(args) -> None:
    check_run(args.model)
    from learntok.evaluation.tasks import TasksRequest, format_tasks, run_tasks

    report = run_tasks(args.model, request(TasksRequest, args, tasks=args.task))
    print(format_tasks(report))
    write_json(args.json, report)


def add_diagnose(sub) -> None:
    p = sub.add_parser("diagnose", help="variance and SNR of the policy-gradient estimator per trick")
    add_model(p, "run or checkpoint folder")
    p.add_argument("--batches", type=REPEAT, default=4, help="fixed training batches")
    p.add_argument("--samples", type=REPEAT, default=16, help="K boundary samples per batch")
    p.add_argument("--batch-size", type=POSITIVE, help="default: the run's, at most 16")
    p.add_argument("--seq-len", type=WINDOW, help="default: the run's, at most 512")
    add_seed(p, help=None)
    p.add_argument("--out", type=output_folder, help="folder for diagnose.md/.json/.png (default RUN/diagnose)")
    add_device(p)
    add_json(p, "also write the table to this JSON file")
    p.set_defaults(func=cmd_diagnose, reads=model_data)


def cmd_diagnose(args) -> None:
    check_run(args.model)
    from learntok.evaluation.diagnose import markdown_table, run_diagnose

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
    from learntok.cli.outputs import check_command_line
    from learntok.run.plots import plot_runs

    if args.out is None:  # the default folder is checked as a given one would be
        one = Path(args.runs[0])
        args.out = str((one if one.is_dir() else one.parent) / "plots") if len(args.runs) == 1 else "plots"
        check_command_line(args)
    for path in plot_runs(args.runs, args.out, args.x):
        print(path)
