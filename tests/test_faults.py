"""Faults of the machine and of the session, by kind (docs/reliability.md, "Faults"): permissions,
a full disk or a file size limit, Ctrl-C, a pipe closed early, arguments that are not UTF-8,
a state.pt without its keys, and an eval that loses a race with checkpoint rotation. Each ends
in one line (or, for a closed pipe, quietly), leaves the run whole, and says how to go on.

Most rows run the command line in this process (`cli.main`: its exit code, its stderr lines,
no exception escaping it) on a copy of the bad-input matrix's trained tiny run; signals, pipes,
size limits and raw argv bytes need a child process.
"""

import contextlib
import base64
import errno
import json
import io
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import learntok.run.checkpoint as checkpoint
import learntok.model.pretrained as pretrained
from learntok import cli
from learntok.cli import signals
from learntok.run.checkpoint import STATE, STATE_KEYS, latest_checkpoint, load_checkpoint, load_run
from learntok.cli.values import text_arg
from learntok.util.errors import CheckpointError

from conftest import ROOT, TINY_RUN as TINY, checksums
from learntok.util import files as files
from learntok.util.files import INPUT_TYPES, OUTPUT_TYPES, output_folder
from test_values import MINIMAL

NOT_UTF8 = "caf\udce9"  # how Python holds the argument bytes b"caf\xe9"


@pytest.fixture
def work(base, tmp_path, monkeypatch):
    """A fresh copy of the trained run, its corpus, a task file and a prepared folder, as cwd."""
    for name in ("run", "prep"):
        shutil.copytree(base / name, tmp_path / name)
    for name in ("corpus.txt", "task.jsonl"):
        shutil.copy(base / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def main(argv, capsys) -> tuple[int, list[str]]:
    """(exit code, stderr lines that are learntok's own: progress bars aside) of `learntok ARGV`.
    stderr writes what it cannot encode as escapes, as Python's own stderr does."""
    sys.stderr.reconfigure(errors="backslashreplace")
    code = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err.replace("\r", "\n").splitlines()
    return code, [line for line in err if line.startswith("learntok")]


def one_line(code, lines, expected_code=2, *words):
    assert code == expected_code and len(lines) == 1, (code, lines)
    assert all(w in lines[0] for w in words), lines[0]


# ---------------------------------------------------------------- permissions


def output_options() -> list[tuple[str, str, bool]]:
    """(command, option, is a folder) for every output option of every command (typed
    files.output_file or output_folder)."""
    parser = cli.build_parser()
    return [
        (command, a.option_strings[0], a.type is output_folder)
        for command, sub in parser._subparsers._group_actions[0].choices.items()
        for a in sub._actions
        if a.type in OUTPUT_TYPES and a.option_strings
    ]


@pytest.mark.parametrize("command, option, folder", output_options())
def test_an_output_in_a_read_only_folder_is_refused_before_the_work(work, capsys, monkeypatch, command, option, folder):
    """We run as root, where chmod denies nothing: os.access is made to answer as for another
    user's folder. The command itself is replaced by one that fails the test if it runs."""
    (work / "ro").mkdir()
    real = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode: False if "ro" in Path(p).parts and mode & os.W_OK else real(p, mode)
    )
    cmd = f"cmd_{command.replace('-', '_')}"
    module = next(
        m for m in (cli.training, cli.evaluation, cli.text, cli.export) if hasattr(m, cmd)
    )  # where it is defined
    monkeypatch.setattr(module, cmd, lambda args: pytest.fail("the work started"))
    name = "ro/out" if folder else "ro/out.json"
    one_line(*main([command, *MINIMAL[command], option, name], capsys), 2, f"{option} {name}: permission denied")
    assert os.listdir(work / "ro") == []


def deny(monkeypatch, name: str) -> None:
    """Reading a file called `name` fails as for a file of another user (mode 0600): Python's
    opens raise PermissionError, safetensors' (in Rust) its own error naming the OS's."""
    real_open = io.open

    def guarded(file, *a, **k):
        if isinstance(file, (str, Path)) and Path(file).name == name:
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr(io, "open", guarded)
    monkeypatch.setattr("builtins.open", guarded)
    real_load = pretrained.load_file

    def load(path, *a, **k):
        if Path(path).name == name:
            raise RuntimeError("Error while deserializing header: I/O error: Permission denied (os error 13)")
        return real_load(path, *a, **k)

    monkeypatch.setattr(pretrained, "load_file", load)


@pytest.mark.parametrize(
    "name, argv",
    [
        ("latest", ["eval", "run", "--max-bytes", "256"]),
        ("config.json", ["eval", "run", "--max-bytes", "256"]),
        ("model.safetensors", ["sample", "run", "--prompt", "a", "--max-bytes", "2"]),
        ("state.pt", ["train", "--out", "run", "--resume", "train.steps=4"]),
        ("config.toml", ["train", "--out", "run", "--resume", "train.steps=4"]),
    ],
)
def test_reading_an_unreadable_run_is_one_line(work, capsys, monkeypatch, name, argv):
    before = checksums(work)
    deny(monkeypatch, name)
    one_line(*main(argv, capsys), 2, "permission denied", name)
    monkeypatch.undo()
    assert checksums(work) == before


def test_checkpoint_folders_take_the_permissions_of_any_new_folder(work):
    """Not tempfile.mkdtemp's 0700: another user (who may read the run folder) can evaluate it."""
    (work / "plain").mkdir()
    ckpt = latest_checkpoint(work / "run")
    assert ckpt.stat().st_mode & 0o777 == (work / "plain").stat().st_mode & 0o777


# ---------------------------------------------------------------- disk full


class FullDisk(io.RawIOBase):
    """A file on a disk that fills after `room` bytes."""

    def __init__(self, path, room: int = 100):
        self.path, self.room = path, room

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return len(data)


def fill_disk(monkeypatch, name: str) -> None:
    """Writing a checkpoint file called `name` runs out of space part-way."""
    if name == "model.safetensors":  # safetensors writes in Rust: its error names the OS's

        def save_file(tensors, path, *a, **k):
            raise RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")

        monkeypatch.setattr(pretrained, "save_file", save_file)
        return
    real_open = open

    def full(file, mode="r", *a, **k):
        # run-folder files are opened through a descriptor (files.no_follow_fd): name it by /proc
        where = Path(os.readlink(f"/proc/self/fd/{file}")) if isinstance(file, int) else Path(file)
        if where.name.startswith((name, f".{name}")) and "w" in mode:
            if "b" not in mode:  # a small text file: no room at all
                return io.TextIOWrapper(io.BufferedWriter(FullDisk(file, 0)))
            return io.BufferedWriter(FullDisk(file), 64)
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(checkpoint, "open", full, raising=False)
    monkeypatch.setattr(files, "open", full, raising=False)  # the pointer is written by files.write_text_atomic


@pytest.mark.parametrize("name", [STATE, "model.safetensors", "latest"])
def test_a_full_disk_while_checkpointing_leaves_the_run_whole_and_resumable(work, capsys, monkeypatch, name):
    fill_disk(monkeypatch, name)
    code, lines = main(["train", "--out", "run", "--resume", "train.steps=5", "checkpoint.every=1"], capsys)
    one_line(
        code,
        lines,
        2,
        "no space left on device",
        "the run run is whole at step 3",
        "resume with `learntok train --out run --resume`",
    )
    assert load_checkpoint("run").step == 3  # the good checkpoint is untouched
    assert not [p for p in (work / "run" / "checkpoints").iterdir() if ".tmp" in p.name]
    monkeypatch.undo()
    monkeypatch.chdir(work)
    assert main(["train", "--out", "run", "--resume", "train.steps=5"], capsys) == (0, [])
    assert load_checkpoint("run").step == 5


def test_save_torch_keeps_the_os_error(tmp_path, monkeypatch):
    """torch.save reports a failed write as a bare RuntimeError; the checkpoint's writer keeps the errno."""
    monkeypatch.setattr(checkpoint, "open", lambda path, mode: io.BufferedWriter(FullDisk(path, 10)), raising=False)
    with pytest.raises(OSError) as e:
        checkpoint.save_torch({"x": torch.zeros(1000)}, tmp_path / "s.pt")
    assert e.value.errno == errno.ENOSPC


def limit_file_size(n_bytes: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (n_bytes, n_bytes))


def test_a_file_size_limit_during_prepare_leaves_no_folder(work):
    (work / "big.txt").write_text("a line of some text.\n" * 20_000)  # 420 KB: more than the limit
    r = subprocess.run(
        [sys.executable, "-m", "learntok", "prepare", "big.txt", "--out", "new"],
        cwd=work,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit_file_size(100_000),
    )
    lines = r.stderr.splitlines()
    one_line(r.returncode, lines, 2, "file too large", "nothing was left in new")
    assert "Traceback" not in r.stderr and not (work / "new").exists()


def test_a_file_size_limit_at_the_first_checkpoint_then_a_fresh_start(work, capsys):
    args = ["train", "--preset", "tiny", *TINY, "data.source=corpus.txt", "--out", "new"]
    r = subprocess.run(
        [sys.executable, "-m", "learntok", *args],
        cwd=work,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit_file_size(20_000),
    )
    assert "Traceback" not in r.stderr
    one_line(
        r.returncode,
        [line for line in r.stderr.splitlines() if line.startswith("learntok")],
        2,
        "file too large",
        "has no checkpoint yet: start it again with the same command",
    )
    assert main(args, capsys)[0] == 0 and load_checkpoint("new").step == 3


# ---------------------------------------------------------------- signals and pipes


def env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@contextlib.contextmanager
def start(args, cwd, script=None):
    """`learntok ARGS` (or a script that ends by running it) with SIGINT at its default, as a
    terminal gives it (a test runner in the background may have it ignored); killed if the
    test fails before it ends."""
    cmd = [sys.executable, "-c", script, *args] if script else [sys.executable, "-m", "learntok", *args]
    p = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def wait_for(condition, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "the command never got going"
        time.sleep(0.1)


def interrupted(p: subprocess.Popen) -> list[str]:
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    err = err.decode("utf-8", "replace")
    assert p.returncode == cli.SIGINT_EXIT and "Traceback" not in err, err[-3000:]
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("learntok")]
    assert len(lines) == 1 and lines[0].startswith("learntok: interrupted"), err[-3000:]
    return lines


@pytest.mark.parametrize("delay", [0.1, 0.3, 0.6, 0.9])
def test_ctrl_c_while_torch_imports_is_one_line(work, delay):
    """Ctrl-C in the first second, while the command imports torch: held back until the import
    ends (learntok.cli.signals), then the usual one line and exit 130, never torch's
    own error from a half-made import (or an abort in its C++)."""
    args = ["train", "--preset", "tiny", *TINY, "data.source=corpus.txt", "--out", f"early{delay}"]
    with start(args, work, script=AFTER_STARTUP) as p:
        assert p.stderr.readline() == b"started\n"  # the interpreter is up: the delay is learntok's own
        time.sleep(delay)
        interrupted(p)


# `python -m learntok`, once Python's own start-up (site) is done: a Ctrl-C before that is
# Python's ("Failed to import the site module"), which a loaded machine can stretch past 0.1 s
AFTER_STARTUP = (
    "import sys; print('started', file=sys.stderr, flush=True); "
    "from learntok.__main__ import run; sys.argv[0] = 'learntok'; raise SystemExit(run())"
)


def test_ctrl_c_during_train_is_one_line_and_the_run_resumes(work, capsys):
    latest = work / "long" / "checkpoints" / "latest"
    with start(
        [
            "train",
            "--preset",
            "tiny",
            *TINY,
            "train.steps=100000",
            "checkpoint.every=2",
            "data.source=corpus.txt",
            "--out",
            "long",
        ],
        work,
    ) as p:
        wait_for(lambda: latest.is_file() and latest.read_text() != "step_0000000")
        [line] = interrupted(p)
    step = load_checkpoint("long").step
    assert (
        f"the run long is whole at step {step}" in line and "resume with `learntok train --out long --resume`" in line
    )
    assert main(["train", "--out", "long", "--resume", f"train.steps={step + 1}"], capsys)[0] == 0
    assert load_checkpoint("long").step == step + 1


SLOW_PREPARE = r"""
import sys, time
import learntok.data.shards as shards
from learntok.cli import main
add = shards.SplitWriter.add
def slow_add(self, doc):
    print("writing", file=sys.stderr, flush=True)
    time.sleep(0.2)  # long enough that a loaded machine still interrupts it mid-write
    add(self, doc)
shards.SplitWriter.add = slow_add
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("name", ["torch", "numpy.random", "learntok.data.shards", "a_user_module"])
def test_ctrl_c_during_an_import_waits_for_it(monkeypatch, name):
    """SIGINT while any module is being imported is held back (a C extension's initialisation can
    swallow the KeyboardInterrupt: numpy.random's did) and delivered once the import ends; with
    no import under way it is Python's own KeyboardInterrupt, at once."""
    import importlib.machinery
    import types

    spec = importlib.machinery.ModuleSpec(f"{name}_being_imported", None)
    module = types.ModuleType(spec.name)
    module.__spec__ = spec
    spec._initializing = True
    monkeypatch.setitem(sys.modules, spec.name, module)
    waited = []
    monkeypatch.setattr(signals, "_interrupt_after_import", lambda specs, signum: waited.append((specs, signum)))
    assert spec in signals.importing()
    signals._interrupt_unless_importing(signal.SIGINT, None)  # held back: no KeyboardInterrupt here
    wait_for(lambda: waited)
    assert spec in waited[0][0] and waited[0][1] == signal.SIGINT
    spec._initializing = False  # the import ended
    assert spec not in signals.importing()
    with pytest.raises(KeyboardInterrupt):
        signals._interrupt_unless_importing(signal.SIGINT, None)


def test_ctrl_c_during_prepare_is_one_line_and_leaves_no_folder(work):
    """The child writes slowly (a sleep per document), so the signal lands while it writes."""
    with start(["prepare", "corpus.txt", "--out", "new", "--piece-bytes", "64"], work, SLOW_PREPARE) as p:
        wait_for(lambda: (work / "new").is_dir() and any((work / "new").iterdir()))
        [line] = interrupted(p)
    assert "nothing was left in new" in line and not (work / "new").exists()


def test_ctrl_c_during_sample_is_one_line(work):
    with start(["sample", "run", "--prompt", "a", "--max-bytes", "1000000"], work) as p:
        p.stdout.read(8)  # it is generating
        interrupted(p)


@pytest.mark.parametrize(
    "args",
    [
        ["sample", "run", "--prompt", "a line", "--max-bytes", "100000"],
        ["segment", "run", "--file", "big.txt"],
    ],
    ids=["sample", "segment"],
)
def test_a_pipe_closed_early_ends_quietly(work, args):
    """`learntok ... | head -c 5`: no BrokenPipeError, nothing on stderr, the exit status of SIGPIPE."""
    (work / "big.txt").write_text("a line of text. " * 8000)  # 128 KB: more than a pipe holds
    with start(args, work) as p:
        assert p.stdout.read(5)
        p.stdout.close()
        assert p.wait(timeout=300) == cli.SIGPIPE_EXIT
        err = p.stderr.read().decode()
    assert "Error" not in err and "Traceback" not in err, err


# ---------------------------------------------------------------- arguments that are not UTF-8


def copy_as(src: str, name: str) -> str:
    shutil.copytree(src, name) if Path(src).is_dir() else shutil.copy(src, name)
    return name


def write(name: str, text: str) -> str:
    Path(name).write_text(text)
    return name


N = NOT_UTF8
STEP1 = [*TINY[:-2], "train.steps=1", "log.eval_bytes=256"]
# (id, argv (setup runs in the work folder), exit code, the text options it gives a non-UTF-8 value)
TEXT_ROWS = [
    (
        "train-paths",
        lambda: [
            "train",
            "--preset",
            "tiny",
            *STEP1,
            "--config",
            write(f"{N}.toml", "[log]\nlog_every = 1\n"),
            "--out",
            f"{N}-run",
            "--json",
            f"{N}.json",
            "data.source=corpus.txt",
        ],
        0,
        {"train --config", "train --out", "train --json"},
    ),
    ("train-preset", lambda: ["train", "--preset", N, "--out", "r"], 2, {"train --preset"}),
    (
        "train-override",
        lambda: ["train", "--preset", "tiny", *STEP1, f"data.source={N}.txt", "--out", "r"],
        2,
        {"train overrides"},
    ),
    (
        "segment-text",
        lambda: ["segment", copy_as("run", N), f"{N} au lait", "--html", f"{N}.html", "--json", f"{N}.json"],
        0,
        {"segment model", "segment text", "segment --html", "segment --json"},
    ),
    ("segment-file", lambda: ["segment", "run", "--file", copy_as("corpus.txt", N)], 0, {"segment --file"}),
    ("export", lambda: ["export", copy_as("run", N), "--out", f"{N}-exported"], 0, {"export model", "export --out"}),
    (
        "eval",
        lambda: [
            "eval",
            copy_as("run", N),
            "--source",
            copy_as("corpus.txt", f"{N}.txt"),
            "--split",
            "all",
            "--max-bytes",
            "256",
            "--json",
            f"{N}.json",
        ],
        0,
        {"eval model", "eval --source", "eval --json"},
    ),
    (
        "eval-tasks",
        lambda: [
            "eval-tasks",
            copy_as("run", N),
            "--task",
            copy_as("task.jsonl", f"{N}.jsonl"),
            "--delimiter",
            N,
            "--json",
            f"{N}.json",
        ],
        0,
        {"eval-tasks model", "eval-tasks --task", "eval-tasks --delimiter", "eval-tasks --json"},
    ),
    (
        "diagnose",
        lambda: [
            "diagnose",
            copy_as("run", N),
            "--out",
            f"{N}-d",
            "--json",
            f"{N}.json",
            "--batches",
            "1",
            "--samples",
            "2",
            "--batch-size",
            "2",
            "--seq-len",
            "32",
        ],
        0,
        {"diagnose model", "diagnose --out", "diagnose --json"},
    ),
    ("plot", lambda: ["plot", copy_as("run", N), "--out", f"{N}-plots"], 0, {"plot runs", "plot --out"}),
    (
        "sample",
        lambda: ["sample", copy_as("run", N), "--prompt", N, "--max-bytes", "4", "--json", f"{N}.json"],
        0,
        {"sample model", "sample --prompt", "sample --json"},
    ),
    (
        "compare-paths",
        lambda: [
            "compare",
            "--strategies",
            "uniform",
            "--steps",
            "1",
            "--eval-bytes",
            "128",
            "--out",
            f"{N}-c",
            "--json",
            f"{N}.json",
            *TINY[:-2],
        ],
        0,
        {"compare --out", "compare --json"},
    ),
    ("compare-preset", lambda: ["compare", "--preset", N, "--strategies", "uniform"], 2, {"compare --preset"}),
    ("compare-strategies", lambda: ["compare", "--strategies", N], 2, {"compare --strategies"}),
    ("compare-seeds", lambda: ["compare", "--strategies", "uniform", "--seeds", N], 2, {"compare --seeds"}),
    ("compare-rates", lambda: ["compare", "--strategies", "uniform", "--rates", N], 2, {"compare --rates"}),
    (
        "compare-sweep",
        lambda: ["compare", "--strategies", "uniform", "--rates", "0.2", "--sweep", N],
        2,
        {"compare --sweep"},
    ),
    ("compare-override", lambda: ["compare", "--strategies", "uniform", f"data.source={N}"], 2, {"compare overrides"}),
    (
        "prepare",
        lambda: ["prepare", copy_as("corpus.txt", N), "--out", f"{N}-p", "--json", f"{N}.json", "--piece-bytes", "256"],
        0,
        {"prepare sources", "prepare --out", "prepare --json"},
    ),
    (
        "config-file",
        lambda: ["config", "--config", write(f"{N}.toml", "[log]\nlog_every = 1\n")],
        0,
        {"config --config"},
    ),
    ("config-preset", lambda: ["config", "--preset", N], 2, {"config --preset"}),
    ("config-override", lambda: ["config", f"data.source={N}.txt"], 2, {"config overrides"}),
    (
        "eval-boundaries-from",
        lambda: ["eval", "run", "--boundaries-from", copy_as("run", N), "--split", "all", "--max-bytes", "256"],
        0,
        {"eval --boundaries-from"},
    ),
    (
        "compare-runs",
        lambda: ["compare", "--runs", "run", copy_as("run", N), "--eval-bytes", "128"],
        0,
        {"compare --runs"},
    ),
    (
        "prepare-text-field",
        lambda: ["prepare", "task.jsonl", "--out", "p", "--text-field", N],
        2,
        {"prepare --text-field"},
    ),
]


def text_arguments() -> set[str]:
    """Every argument of every command that takes text (not a number, a choice or a flag)."""
    parser = cli.build_parser()
    found = set()
    for command, sub in parser._subparsers._group_actions[0].choices.items():
        for a in sub._actions:
            text = (None, str, text_arg, *INPUT_TYPES, *OUTPUT_TYPES)  # plain text, text for the model, paths
            if a.nargs != 0 and a.choices is None and a.type in text and a.dest != "help":
                found.add(f"{command} {a.option_strings[-1] if a.option_strings else a.dest}")
    return found


def test_every_text_argument_has_a_non_utf8_row():
    assert text_arguments() == set().union(*(row[3] for row in TEXT_ROWS))


@pytest.mark.parametrize("make_args, code", [pytest.param(r[1], r[2], id=r[0]) for r in TEXT_ROWS])
def test_an_argument_that_is_not_utf8_is_its_bytes_or_one_line(work, capsys, make_args, code):
    """Paths are the files of that name, model text is the argument's bytes, a config value is
    refused (a config is saved as text); never a UnicodeEncodeError."""
    got, lines = main(make_args(), capsys)
    assert got == code, lines
    assert len(lines) == (code != 0), lines


def test_a_prompt_that_is_not_utf8_is_its_bytes(work):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "learntok",
            "sample",
            "run",
            "--prompt",
            b"caf\xe9",
            "--max-bytes",
            "3",
            "--temperature",
            "0",
            "--json",
            "s.json",
        ],
        cwd=work,
        env=env(),
        capture_output=True,
        timeout=300,
    )
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stdout.startswith(b"caf")  # 0xe9 is shown alone as \xe9, or with the bytes made after it
    record = json.loads((work / "s.json").read_text())
    assert base64.b64decode(record["prompt_base64"]) == b"caf\xe9"  # the argument's own bytes
    (work / "s.json").unlink()


# ---------------------------------------------------------------- incomplete checkpoints, rotation races


@pytest.mark.parametrize(
    "change",
    [
        *[
            pytest.param(lambda s, k=k: {x: v for x, v in s.items() if x != k}, id=f"without-{k}")
            for k in (*STATE_KEYS, "bytes_seen")
        ],
        pytest.param(lambda s: [s["step"]], id="a-list"),
        pytest.param(lambda s: {}, id="empty"),
    ],
)
def test_a_state_pt_without_its_keys_says_which(work, change):
    path = work / "run" / "checkpoints" / "step_0000003" / STATE
    torch.save(change(torch.load(path, weights_only=True)), path)
    with pytest.raises(CheckpointError, match="is incomplete: it lacks") as e:
        load_checkpoint(work / "run", needs=("bytes_seen",))
    assert "\n" not in str(e.value)


def rotate_during(monkeypatch, reader: str, run: Path) -> None:
    """The first call of pretrained.`reader` finds its checkpoint rotated away: a training run has
    just written step 6, pointed latest at it and deleted step 3."""
    real = getattr(pretrained, reader)
    ckpts = run / "checkpoints"
    shutil.copytree(ckpts / "step_0000003", ckpts / "step_0000006")

    def racing(path, *a, **k):
        if (ckpts / "step_0000003").exists():
            (ckpts / "latest").write_text("step_0000006")
            shutil.rmtree(ckpts / "step_0000003")
        return real(path, *a, **k)

    monkeypatch.setattr(pretrained, reader, racing)


@pytest.mark.parametrize("reader", ["read_json", "read_weights"])
def test_an_eval_that_loses_a_race_with_rotation_reads_the_newer_checkpoint(work, capsys, monkeypatch, reader):
    rotate_during(monkeypatch, reader, work / "run")
    code = cli.main(["eval", "run", "--max-bytes", "256"])
    out = capsys.readouterr()
    assert code == 0 and "corrupt" not in out.err, out.err[-2000:]
    assert "step_0000006" in out.out


def test_a_checkpoint_given_by_name_is_not_swapped_for_another(work, monkeypatch):
    rotate_during(monkeypatch, "read_json", work / "run")
    with pytest.raises(CheckpointError, match="missing"):
        load_run(work / "run" / "checkpoints" / "step_0000003")


# A child that makes one step of the output writer fail (learntok.util.files.OutputFile: the write,
# its flush, the fsync, the close), then runs the command line.
FAILING_WRITER = """
import errno, os, sys
from learntok import cli
from learntok.cli import signals
from learntok.util import files as files

where, code = sys.argv[1], getattr(errno, sys.argv[2])


def fail(*args):
    raise OSError(code, os.strerror(code))


if where == "fsync":
    os.fsync = fail
else:
    opened = files.open_no_follow

    def open_no_follow(path, mode="a"):
        f = opened(path, mode)
        if where == "close":
            real = f.close
            f.close = lambda: (real(), fail())
        else:
            setattr(f, where, fail)
        return f

    files.open_no_follow = open_no_follow
sys.exit(cli.main(sys.argv[3:]))
"""
EVAL = ["eval", "tiny-shakespeare", "--max-bytes", "4096", "--threads", "1"]  # shipped: nothing to train


@pytest.mark.parametrize(
    "how, words",
    [
        pytest.param("--json /dev/full", "cannot write /dev/full: no space left on device", id="json-dev-full"),
        pytest.param("stdout /dev/full", "no space left on device", id="stdout-dev-full"),
        pytest.param("write ENOSPC", "no space left on device", id="write"),
        pytest.param("flush ENOSPC", "no space left on device", id="flush"),
        pytest.param("fsync ENOSPC", "no space left on device", id="fsync"),
        pytest.param("fsync EIO", "input/output error", id="fsync-eio"),
        pytest.param("close EIO", "input/output error", id="close-eio"),
    ],
)
def test_an_output_on_a_full_disk_is_one_line_and_the_old_file_stays(tmp_path, how, words):
    old = tmp_path / "out.json"
    old.write_text('{"old": true}\n')
    where, what = how.split()
    argv, stdout = [sys.executable, "-m", "learntok", *EVAL, "--json", str(old)], subprocess.DEVNULL
    if where == "--json":
        argv[-1] = what
    elif where == "stdout":
        stdout = open(what, "w")
    else:
        (tmp_path / "fail.py").write_text(FAILING_WRITER)
        argv = [sys.executable, str(tmp_path / "fail.py"), where, what, *argv[3:]]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TQDM_DELAY": "1000"}
    r = subprocess.run(argv, env=env, cwd=tmp_path, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120)
    if stdout is not subprocess.DEVNULL:
        stdout.close()
    lines = [line for line in r.stderr.splitlines() if "reference BPE" not in line]
    assert r.returncode != 0 and len(lines) == 1 and words in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert old.read_text() == '{"old": true}\n' and sorted(
        p.name for p in tmp_path.iterdir() if p.name != "fail.py"
    ) == ["out.json"]


def test_ctrl_c_while_the_command_line_imports_is_one_line(monkeypatch, capsys):
    """Both ways in (`python -m learntok` and the `learntok` script, which pyproject points at
    the same `run`): a Ctrl-C before the command line has loaded is the usual line and 130."""
    import builtins
    import tomllib

    import learntok.__main__ as entry

    scripts = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["learntok"] == "learntok.__main__:run"
    real_import = builtins.__import__

    def interrupted(name, *args, **kwargs):
        if name == "learntok.cli":
            raise KeyboardInterrupt
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", interrupted)
    assert entry.run() == cli.SIGINT_EXIT
    assert capsys.readouterr().err == "learntok: interrupted\n"
