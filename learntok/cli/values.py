"""The command line's argparse types for values (docs/reliability.md): numbers in declared ranges
(learntok.util.ranges) and text for the model as the argument's bytes. Paths have their own types in
learntok.util.files, and the outputs they name are checked by learntok.cli.outputs."""

from __future__ import annotations

import argparse
import os

from learntok.util.ranges import BPE_VOCAB, FRACTION, GENERATED_BYTES, RATE, REPEATS, SEED, TEMPERATURE, Range, bounds


def number(kind: type, within: Range | None = None, **limits):
    """An argparse type: a `kind` number in the range `within` (or of the comparisons `limits`:
    ge, gt, le, lt; learntok.util.ranges), never NaN, an infinity or an int beyond int64. Every
    numeric option's type is one of these (tests/test_values.py checks it)."""
    rng = within or bounds(**limits)

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        problem = rng.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(f"{text} {problem}")
        return value

    parse.kind, parse.range = kind, rng
    return parse


POSITIVE, COUNT, WINDOW = number(int, ge=1), number(int, ge=0), number(int, ge=2)  # WINDOW: BOS and a byte
PROBABILITY = number(float, gt=0, le=1)
SEED_ARG, RATE_ARG, FRACTION_ARG = number(int, SEED), number(float, RATE), number(float, FRACTION)
TEMPERATURE_ARG = number(float, TEMPERATURE)
GENERATED_BYTES_ARG = number(int, bounds(ge=1, le=GENERATED_BYTES.high))
REPEAT, VOCAB = number(int, REPEATS), number(int, BPE_VOCAB)  # --samples, --batches: each a pass over the data
SHARD_MB = number(int, ge=1, le=2**43)  # MiB; its size in bytes fits in 64 bits


def text_arg(text: str) -> bytes:
    """An argument that is text for the model (a prompt, a text to segment): its bytes as the
    shell gave them, so an argument that is not UTF-8 is read as the bytes it is."""
    return os.fsencode(text)
