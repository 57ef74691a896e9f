"""Command line: `learntok SUBCOMMAND ...`, each subcommand a thin call into the library.

To add a subcommand, write `add_NAME(sub)` in one of the command modules (training, evaluation,
text) that adds its parser and sets `func` (a function of the parsed args returning an exit code
or None), and list it in COMMANDS; take the shared options from learntok.cli.options. Expected
mistakes (bad config, data, checkpoint, a diverged run, a missing file) print one line
`learntok: error: ...` and exit 2; so do faults of the machine (disk full, a file size limit,
permission denied), saying what the command left behind. Ctrl-C prints one line and exits 130;
a closed pipe (`learntok sample ... | head`) ends the command quietly with 141, as SIGPIPE
would. Anything else is a bug and keeps its traceback (docs/reliability.md).

The command modules import the library inside each command, so that parsing, `--help` and an
argument's error are done before torch is loaded.
"""

from __future__ import annotations

import argparse
import io
import os
import sys

from learntok import __version__
from learntok.cli.evaluation import add_diagnose, add_eval, add_eval_tasks, add_plot
from learntok.cli.export import add_export
from learntok.cli.options import add_threads
from learntok.cli.signals import interrupts_between_imports
from learntok.cli.text import add_sample, add_segment
from learntok.cli.training import add_compare, add_config, add_prepare, add_train
from learntok.util.environment import check_environment
from learntok.util.errors import CheckpointError, ConfigError, DataError, OutputError, TrainingDiverged, fault_line

ERROR = "learntok: error: "  # the one prefix of every expected error's line
SIGINT_EXIT, SIGPIPE_EXIT = 130, 141  # 128 + the signal, as the shell reports a kill
# the mistakes a user makes (learntok.util.errors): one line, exit 2; anything else keeps its traceback
EXPECTED = (ConfigError, DataError, CheckpointError, OutputError, TrainingDiverged, FileNotFoundError)

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
    add_export,
]

# Options that only say how another one works: given without it, each would be ignored, so
# each is refused (checked in `main` for every command, before any work).
OPTION_NEEDS = {
    "rate_mode": ("rate", "--rate R (the rate to hold)"),
    "mfu": ("plan", "--plan (the GPU-hours it scales)"),
    "sweep": ("rates", "--rates (the rates it runs the variant at)"),
}


class _Parser(argparse.ArgumentParser):
    """Usage mistakes, like every expected error, are one line on stderr and exit 2."""

    def _print_message(self, message: str, file=None) -> None:
        """As argparse's, but a failed write (--help > /dev/full) is raised, not ignored (main)."""
        if message:
            (file or sys.stderr).write(message)

    def error(self, message: str):
        command = self.prog.removeprefix("learntok").strip()  # "" for the top level, else the subcommand
        self.exit(2, f"{ERROR}{command + ': ' if command else ''}{message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="learntok", description="Byte-level LMs that learn their own tokenization.")
    parser.add_argument("--version", action="version", version=f"learntok {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    for p in sub.choices.values():
        add_threads(p)
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


def check_needs(args) -> None:
    for dest, (needed, what) in OPTION_NEEDS.items():
        value = getattr(args, dest, None)
        if value is not None and getattr(args, needed, None) in (None, False):
            raise ConfigError(f"--{dest.replace('_', '-')} {value} needs {what}")


def check_given(args) -> None:
    """An option of plain text (`type=str`) given empty names nothing (`--preset ''` would
    otherwise fall back to the default): refused, as fields.check_values refuses an empty config
    value. So is an empty path, positional or not (`export ''` would read the current folder)."""
    from learntok.util.files import INPUT_TYPES, OUTPUT_TYPES

    for action in args.command_parser._actions:
        value = getattr(args, action.dest, None)
        empty = "" in value if isinstance(value, list) else value == ""
        if not empty:
            continue
        if action.type is str and action.option_strings:
            name = action.option_strings[-1]
            raise ConfigError(f"{name} is empty: give a value, or leave {name} out for its default")
        if action.type in INPUT_TYPES + OUTPUT_TYPES:
            name = action.option_strings[-1] if action.option_strings else (action.metavar or action.dest)
            raise ConfigError(f"{name} is empty: give a path")


def check_outputs(args) -> None:
    """Refuse, before any work, every output this command line must not write (learntok.cli.outputs)."""
    from learntok.cli.outputs import check_command_line

    check_command_line(args)


def set_threads(n: int) -> None:
    """--threads: torch's CPU threads (0, the default, leaves torch's own and does not load it)."""
    if n:
        from learntok.util.runtime import set_threads as set_torch_threads

        set_torch_threads(n)


def flushed_stdout() -> int:
    """Exit code of --help and --version, whose text argparse wrote to stdout: 0 once it is
    flushed, else the one line of any other output's fault (a full disk: > /dev/full)."""
    try:
        sys.stdout.flush()
    except OSError as e:
        return output_fault(e)
    return 0


def output_fault(e: OSError) -> int:
    """Exit code of a write to stdout that failed: a closed pipe quietly (SIGPIPE's), a fault of
    the machine its one line (learntok.util.errors.fault_line) and 2; anything else keeps its traceback."""
    quiet_stdout()  # the interpreter's own flush at exit would fail again
    if isinstance(e, BrokenPipeError):
        return SIGPIPE_EXIT
    line = fault_line(e)
    if line is None:
        raise e
    print(ERROR + line, file=sys.stderr)
    return 2


def quiet_stdout() -> None:
    """Point stdout at /dev/null: its reader is gone (a pipe closed early), and the interpreter's
    own flush at exit would otherwise report the broken pipe."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _stopped(args, what: str) -> str:
    """`what` happened, and what the command leaves behind (its `left` hook), in one line."""
    left = getattr(args, "left", None)
    try:
        return " ".join((f"{what}; {left(args)}" if left else what).split())
    except OSError:  # the path it would look at is itself what failed (a name too long): the line alone
        return " ".join(what.split())


def closed_stream() -> str | None:
    """The standard stream a parent closed (`learntok ... >&-`: Python then holds None for it),
    or None. Each command writes its report to stdout and its errors to stderr, so a closed one
    is refused before any work, as a write to it would fail after the work."""
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # the one line has nowhere to go; the exit code says it
        return "standard error"
    return "standard output" if sys.stdout is None else None


def main(argv: list[str] | None = None) -> int:
    """The command line: one command, its errors in one line and an exit code. Ctrl-C is held
    back while a module imports (learntok.cli.signals.interrupts_between_imports)."""
    try:
        with interrupts_between_imports():
            return _main(argv)
    except KeyboardInterrupt:  # before the command began (its arguments being parsed): nothing left behind
        print("learntok: interrupted", file=sys.stderr)
        return SIGINT_EXIT


def _main(argv: list[str] | None = None) -> int:
    closed = closed_stream()
    if closed:
        print(f"{ERROR}{closed} is closed: redirect it instead (> FILE, or > /dev/null to discard it)", file=sys.stderr)
        return 2
    try:
        args = parse_args(argv)
    except SystemExit as e:  # --help, --version, or a usage error already printed
        return e.code if e.code else flushed_stdout()
    except OSError as e:  # an unbuffered stdout fails at the write (_Parser._print_message)
        return output_fault(e)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="replace")  # a non-UTF-8 terminal shows "?", no crash
    try:
        check_environment()  # every variable learntok reads, before any work (learntok.util.environment)
        check_given(args)
        check_outputs(args)
        check_needs(args)
        if args.threads and hasattr(args, "overrides"):
            args.overrides = [*args.overrides, f"system.threads={args.threads}"]  # recorded in the run's config
        set_threads(args.threads)
        code = args.func(args) or 0
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except EXPECTED as e:
        message = " ".join(str(e).split()).replace(ERROR, "")  # a quoted child's error line keeps no prefix of its own
        print(ERROR + message, file=sys.stderr)
        return 2
    except BrokenPipeError:
        quiet_stdout()
        return SIGPIPE_EXIT
    except KeyboardInterrupt:
        print(f"learntok: {_stopped(args, 'interrupted')}", file=sys.stderr)
        return SIGINT_EXIT
    except MemoryError:  # anywhere, the library's import inside a command included (ulimit -v)
        print(f"{ERROR}{_stopped(args, 'out of memory (a memory limit, ulimit -v?)')}", file=sys.stderr)
        return 2
    except OSError as e:
        line = fault_line(e)
        if line is None:
            raise
        print(f"learntok: error: {_stopped(args, line)}", file=sys.stderr)
        return 2
