"""The options several commands take, each defined once: the run a command reads, `--device`,
`--seed` and `--greedy`, `--rate` with `--rate-mode`, `--json`, `--threads` and the `key=value`
overrides. A command passes its own help where the words differ; the type, default and choices
stay the same everywhere.

Also what a command reads beyond the paths its options name (`Input`): each command that reads
more (the data its config or its run names) declares it beside its function, as
`set_defaults(reads=...)`, a function of the parsed arguments that resolves those paths as the
command does; learntok.cli.outputs checks the command's outputs against them."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from learntok.cli.values import RATE_ARG, SEED_ARG, number
from learntok.util.errors import CheckpointError, ConfigError, DataError
from learntok.util.files import input_run, output_file
from learntok.util.ranges import THREADS

RUN_OR_MODEL = "run folder (latest checkpoint), model/checkpoint folder, or a shipped model's name (tiny-shakespeare)"
RATE_MODES = "with --rate: online (the offset moves with the decisions made, so the rate holds on any text; the default where the strategy has it) or calibrated (the offset found on val, fixed)"


@dataclass(frozen=True)
class Input:
    """A path a command reads."""

    what: str  # what names it, e.g. "data.source", "--config"; "" for a positional argument
    path: str  # as given
    data: bool = True  # a data folder (nothing may be written inside); False: a run or model folder


def run_data(run: str) -> list[Input]:
    """The data of the run or checkpoint `run`, found as the command finds it (the run located and
    its config read, learntok.run.checkpoint); none for a model folder. A run that cannot be read
    names nothing here: the command reports it."""
    from learntok.run.checkpoint import locate_run, run_config_of

    try:
        cfg = run_config_of(locate_run(run))
    except (CheckpointError, ConfigError, DataError, OSError):
        return []
    return [] if cfg is None else [Input("data.source", cfg.data.source)]


def model_data(args) -> list[Input]:
    """What a command that reads its run's data declares it reads (`reads`): that data, whatever
    its options ask of it (diagnose's training batches, segment --held-out's test passage,
    sample --rate's calibration on val), so that no output of it replaces the data."""
    return run_data(args.model)


def device_arg(text: str) -> str:
    """--device: a device learntok runs on and this machine has (checked before a model is read),
    as `resolve_device` names it (`cpu:0` is `cpu`, `cuda` the current GPU's index)."""
    if text == "cpu":  # the default, on every machine: checked without loading torch
        return text
    from learntok.util.runtime import resolve_device

    try:
        return str(resolve_device(text))
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_model(p, help: str | None = RUN_OR_MODEL) -> None:
    """The run or model folder a command reads (its first positional argument)."""
    p.add_argument("model", type=input_run, metavar="RUN_OR_CKPT", help=help)


def check_run(path: str) -> None:
    """A command whose first step reads the run refuses a missing one before the library (and
    torch) loads, with the line learntok.model.pretrained.resolve would give."""
    from learntok.util.shipped import named_folder, unknown_name

    if not Path(path).exists() and named_folder(path) is None:
        raise CheckpointError(f"{Path(path)} does not exist{unknown_name(path)}")


def add_device(p) -> None:
    p.add_argument("--device", default="cpu", type=device_arg)


def add_seed(p, help: str | None = "seed of the sampled boundaries", default: int | None = 0) -> None:
    p.add_argument("--seed", type=SEED_ARG, default=default, help=help)


def add_greedy(p, help: str = "decide p > 0.5 instead of sampling") -> None:
    p.add_argument("--greedy", action="store_true", help=help)


def add_rate(p, help: str, modes: str = RATE_MODES) -> None:
    """`--rate R` and `--rate-mode` (refused without --rate: OPTION_NEEDS in learntok.cli)."""
    p.add_argument("--rate", type=RATE_ARG, help=help)
    p.add_argument("--rate-mode", choices=["online", "calibrated"], help=modes)


def add_json(p, help: str) -> None:
    p.add_argument("--json", type=output_file, help=help)


def add_threads(p) -> None:
    p.add_argument(
        "--threads",
        type=number(int, THREADS),
        default=0,
        help="CPU threads for torch (default: all cores; give 1 to runs that share a machine)",
    )


def add_overrides(p, help: str = "config overrides, e.g. train.steps=100") -> None:
    p.add_argument("overrides", nargs="*", type=str, metavar="key.sub=value", help=help)


def request(cls, args, **given):
    """The library's request `cls` (a dataclass) from a parsed command line, the one way every
    command hands the library its options: each field from the option of the same dest, unless
    the command `given`s it (a value it renames or derives); a field no option names keeps its
    default."""
    names = [f.name for f in dataclasses.fields(cls) if f.init and f.name not in given and hasattr(args, f.name)]
    return cls(**{name: getattr(args, name) for name in names}, **given)
