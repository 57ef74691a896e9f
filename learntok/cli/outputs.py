"""What a command may write: one check of every output path, before any work (docs/reliability.md).

An output names a file (`--json`, `--html`) or a folder (`--out`). Refused, each with one line:
- a name the system refuses, for an output or an input (too long, a component too long, a path
  through a file, invalid bytes: learntok.util.files.check_name);
- an empty path (which would be the current folder), a symlink to nothing, a path under a file
  (`a.txt/sub`), the wrong kind (a folder as a file output, a file as a folder output), a file
  output whose folder does not exist, a place this user cannot write;
- an input of the same command, symlinks resolved (the same file, the same folder, or a path
  inside a data folder the command reads);
- inside what learntok keeps: a model or checkpoint folder, a run's `checkpoints`, a prepared
  data folder (finished or not), or one of a run folder's own files (config.toml,
  metrics.jsonl, segments.txt, .lock);
- a file output inside a folder output of the same command, or two outputs naming one file;
- a folder output that is a training run's folder, but for `train` itself (learntok.run.folder.claim);
  a folder a command writes by default (plot's RUN/plots, diagnose's RUN/diagnose) is checked too.
Files are then written whole by learntok.util.files.write_output. A command line's outputs and inputs
are found from its options' types (learntok.util.files: output_file, input_data, ...) and, for what
it reads beyond them, from its command's own declaration (`reads`, learntok.cli.options.Input): no
config or run is read here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from learntok.cli.options import Input
from learntok.util.errors import OutputRefused
from learntok.util.files import INPUT_TYPES, OUTPUT_TYPES, check_name, input_data, output_folder

# The checks read runs and name the files of checkpoints and run folders through modules that
# load torch: they are imported inside the checks, which run only for a command line that names
# an output, so that any other one is parsed and refused without torch.


@dataclass(frozen=True)
class Output:
    option: str  # the option that names it, e.g. "--json"
    path: str  # as given
    folder: bool = False  # a folder output (--out) rather than a file


# ---------------------------------------------------------------- a command line's paths


def _values(args, action) -> list[str]:
    value = getattr(args, action.dest, None)
    return [] if value is None else [str(v) for v in value] if isinstance(value, list) else [str(value)]


def command_outputs(args) -> list:
    """Every output path of this command line, from the options typed output_file / output_folder."""
    return [
        Output(a.option_strings[0] if a.option_strings else a.dest, v, a.type is output_folder)
        for a in args.command_parser._actions
        if a.type in OUTPUT_TYPES
        for v in _values(args, a)
    ]


def command_inputs(args) -> list[Input]:
    """Every path this command line reads: the options typed input_*, and what its command
    declares it reads beyond them (its `reads`, beside the command in its cli module: the data
    its config or its run names, resolved as the command resolves it)."""
    typed = [
        Input(a.option_strings[0] if a.option_strings else "", v, a.type is input_data)
        for a in args.command_parser._actions
        if a.type in INPUT_TYPES
        for v in _values(args, a)
    ]
    reads = getattr(args, "reads", None)
    return typed + (reads(args) if reads else [])


def check_command_line(args) -> None:
    """check_outputs for a parsed command line (args.command_parser: its subcommand's parser); the
    name of every path it names, read or written, checked first (check_name)."""
    for a in args.command_parser._actions:
        if a.type in INPUT_TYPES + OUTPUT_TYPES:
            for v in _values(args, a):
                check_name(v, a.option_strings[0] if a.option_strings else (a.metavar or a.dest))
    outputs = command_outputs(args)
    if outputs:
        check_outputs(outputs, command_inputs(args), owns_runs=args.command == "train", command=args.command)


# ---------------------------------------------------------------- the check


# Commands that write inside a run folder (each into its own subfolder, RUN/plots and RUN/diagnose)
WRITE_IN_RUNS = ("plot", "diagnose")
# Commands whose folder output replaces a model folder it wrote before (learntok.hf.export checks
# that the folder holds its own files alone before it replaces it)
REPLACE_MODEL_FOLDER = ("export",)


def check_outputs(outputs: list[Output], inputs: list[Input], owns_runs: bool = False, command: str = "") -> None:
    """Refuse (OutputRefused) the first output that must not be written; see the module docstring.
    A folder output that is a training run's folder belongs to that run: only `train` (`owns_runs`,
    whose learntok.run.folder.claim decides) writes into it."""
    for what, path in [(o.option, o.path) for o in outputs] + [(i.what or "input", i.path) for i in inputs]:
        check_name(path, what)
    real_inputs = [(i, Path(os.path.realpath(i.path))) for i in inputs if i.path and os.path.exists(i.path)]
    folders = [(o, Path(os.path.realpath(o.path))) for o in outputs if o.folder and o.path.strip()]
    seen: dict[Path, str] = {}
    for out in outputs:
        if not out.path.strip():
            raise OutputRefused(f"{out.option} is empty: give a {'folder' if out.folder else 'file'} name")
        where = _real(out.path)
        for folder_out, folder in folders if not out.folder else []:
            if where.is_relative_to(folder):
                raise OutputRefused(
                    f"{out.option} {out.path} is inside {folder_out.option} {folder_out.path}, "
                    f"which this command writes: give a path outside it"
                )
        if where in seen:
            raise OutputRefused(f"{seen[where]} and {out.option} name the same path {out.path}")
        seen[where] = out.option
        _check_path(out, where)
        for inp, real in real_inputs:
            _check_not_input(out, where, inp, real)
        _check_not_kept(out, where, command in REPLACE_MODEL_FOLDER)
        _check_not_in_run(out, where, command)
        if out.folder and not owns_runs and where.is_dir() and _is_run(where):
            raise OutputRefused(
                f"{out.option} {out.path} is the folder of a training run, which belongs to that run: give another folder"
            )


def _real(path: str) -> Path:
    """Symlinks resolved; a device or FIFO named by a link (/dev/stdout) stays as given."""
    special = os.path.exists(path) and not (os.path.isfile(path) or os.path.isdir(path))
    return Path(os.path.abspath(path) if special else os.path.realpath(path))


def _check_path(out: Output, where: Path) -> None:
    """A path this user may write, of the right kind."""
    name = f"{out.option} {out.path}"
    if os.path.islink(out.path) and not os.path.exists(out.path):
        raise OutputRefused(f"{name} is a symlink to {os.readlink(out.path)}, which does not exist")
    if where.exists():
        if out.folder and not where.is_dir():
            raise OutputRefused(f"{name} is an existing file, not a folder")
        if not out.folder and where.is_dir():
            raise OutputRefused(f"{name} is a folder; give a file name")
        if not os.access(where, os.W_OK):  # os.access answers for the real user (root passes)
            raise OutputRefused(f"{name}: permission denied (it is not writable by this user)")
        if not (where.is_file() or where.is_dir()):  # a device or FIFO the user named: written in place
            return
    parent = where if out.folder else where.parent
    while not parent.exists():
        if not out.folder:
            raise OutputRefused(f"{name}: folder {parent} does not exist")
        parent = parent.parent
    if not parent.is_dir():
        raise OutputRefused(f"{name}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputRefused(f"{name}: permission denied (folder {parent} is not writable by this user)")


def _check_not_input(out: Output, where: Path, inp: Input, real: Path) -> None:
    name, source = f"{out.option} {out.path}", f"{inp.what} {inp.path}" if inp.what else inp.path
    if where == real or (where.exists() and os.path.samefile(where, real)):
        raise OutputRefused(
            f"{name} is an input of this command ({source}): give another {'folder' if out.folder else 'file'}"
        )
    if inp.data and real.is_dir() and where.is_relative_to(real):
        raise OutputRefused(f"{name} is inside {source}, a folder this command reads: give a path outside it")
    if out.folder and inp.data and real.is_relative_to(where):
        raise OutputRefused(f"{name} holds {source}, which this command reads: give another folder")


def _check_not_in_run(out: Output, where: Path, command: str) -> None:
    """Nothing inside a run folder, but for the commands that keep their own subfolder there."""
    if command in WRITE_IN_RUNS:
        return
    for folder in where.parents:
        if _is_run(folder, by_lock=False):
            raise OutputRefused(
                f"{out.option} {out.path} is inside run folder {folder}, which belongs to that run "
                f"(only {' and '.join(WRITE_IN_RUNS)} write there): give a path outside it"
            )


def _check_not_kept(out: Output, where: Path, replaces_model: bool = False) -> None:
    """Nothing inside a model, checkpoint or prepared folder, and none of a run folder's own files;
    a model folder itself only by a command that replaces one it wrote (`replaces_model`)."""
    from learntok.run.checkpoint import STATE
    from learntok.data.corpora import prepared_state
    from learntok.model.pretrained import LATEST, WEIGHTS
    from learntok.run.folder import LOCK, RUN_FILES

    name = f"{out.option} {out.path}"
    for folder in ([where] if out.folder else []) + list(where.parents):
        # a model folder the command itself wrote may be replaced: its writer decides (replaceable_folder)
        replaceable = folder == where and replaces_model and not (folder / STATE).is_file()
        if ((folder / WEIGHTS).is_file() and not replaceable) or (folder / STATE).is_file():
            raise OutputRefused(f"{name} is inside {folder}, a model or checkpoint folder: give a path outside it")
        if (folder / LATEST).is_file():
            raise OutputRefused(f"{name} is inside {folder}, the checkpoints of a run: give a path outside it")
        state = prepared_state(folder)
        if state is not None:
            raise OutputRefused(
                f"{name} is inside {folder}, {'a' if state == 'prepared' else 'an unfinished'} "
                f"prepared data folder: give a path outside it"
            )
    for folder in where.parents:
        own = where.relative_to(folder).parts[0]
        if own in (LOCK, *RUN_FILES) and _is_run(folder):
            raise OutputRefused(f"{name} is {own} of run folder {folder}, which the run keeps: give another path")


def _is_run(folder: Path, by_lock: bool = True) -> bool:
    from learntok.run.folder import is_run_folder

    return is_run_folder(folder, by_lock)
