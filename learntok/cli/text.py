"""`learntok segment` and `sample`: a model on text, cut into its chunks or continued."""

from __future__ import annotations

import sys

from learntok.cli.options import (
    add_device,
    add_greedy,
    add_json,
    add_model,
    add_rate,
    add_seed,
    check_run,
    model_data,
    request,
)
from learntok.cli.results import short_run_hint, write_json
from learntok.cli.values import GENERATED_BYTES_ARG, POSITIVE, PROBABILITY, TEMPERATURE_ARG, WINDOW, text_arg
from learntok.util.files import input_file, output_file


def add_segment(sub) -> None:
    p = sub.add_parser("segment", help="show how a model cuts text into tokens")
    add_model(p)
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
    add_greedy(rule, "decide p > 0.5 (the default, as the API does)")
    rule.add_argument("--sampled", action="store_true", help="sample the decisions, as training does (--seed)")
    add_seed(p)
    p.add_argument(
        "--window", type=WINDOW, default=4096, help="read long texts in pieces of this many bytes (BOS included)"
    )
    add_rate(p, "cut at this boundary rate, calibrated on the first 64 KB of the text cut (docs/rate.md)")
    add_json(p, "write chunks and stats to this JSON file")
    p.set_defaults(func=cmd_segment, reads=model_data)


def cmd_segment(args) -> None:
    from learntok.text.segment import SegmentRequest, segment_command

    asked = request(SegmentRequest, args, greedy=not args.sampled, json_path=args.json, html_path=args.html)
    segment_command(args.model, args.text, args.file, args.held_out, args.window, asked, sys.stdout, sys.stderr)
    short_run_hint(args.model)


def add_sample(sub) -> None:
    p = sub.add_parser("sample", help="stream a model's continuation of a prompt (cached decoding)")
    add_model(p)
    p.add_argument("--prompt", required=True, type=text_arg, help="text to continue")
    p.add_argument(
        "--max-bytes", type=GENERATED_BYTES_ARG, default=256, help="bytes to generate (fewer if EOS is drawn)"
    )
    p.add_argument("--temperature", type=TEMPERATURE_ARG, default=1.0, help="0: argmax; at most 1e4")
    p.add_argument("--top-k", type=POSITIVE, help="sample from the k likeliest bytes")
    p.add_argument(
        "--top-p", type=PROBABILITY, help="nucleus sampling: the smallest set of bytes with probability >= p"
    )
    add_seed(p, "seed of the sampled bytes and boundaries", default=None)
    p.add_argument(
        "--boundaries",
        choices=["greedy", "sample"],
        default="greedy",
        help="take p > 0.5 (the default, as segment and the API do) or sample boundaries as training does",
    )
    p.add_argument("--show-boundaries", action="store_true", help="mark chunks: colours on a terminal, | otherwise")
    add_rate(p, "generate at this boundary rate, calibrated on the run's val split (docs/rate.md)")
    add_device(p)
    add_json(
        p,
        "write the prompt, the generated text (and its bytes in base64), bytes/s and boundary rate to this JSON file",
    )
    p.set_defaults(func=cmd_sample, reads=model_data)


def cmd_sample(args) -> None:
    check_run(args.model)
    from learntok.run.checkpoint import load_run
    from learntok.model.generate import SamplingOptions
    from learntok.text.sample import sample_at_rate

    model, run_cfg = load_run(args.model, args.device)
    opts = request(SamplingOptions, args)
    stats = sample_at_rate(model, run_cfg, args.prompt, opts, args.rate, args.rate_mode, args.show_boundaries)
    write_json(args.json, stats)
