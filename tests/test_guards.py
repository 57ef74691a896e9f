"""Guards by kind, tested by kind (docs/reliability.md): tables over every output option and every
input option of the command line, enumerated from the argparse parsers, so that an option added
later joins the tables at once (and a command without a base command line here fails
`test_every_option_is_in_the_tables`).

Rows run in process through learntok.cli.main (what `python -m learntok` runs, without starting
an interpreter, so that a few hundred rows take seconds) in a fresh copy of a trained tiny run
(conftest.workdir), and assert what the subprocess matrix of test_bad_input.py asserts: exit 2,
one `learntok: error:` line, no traceback (an exception main lets through fails the row), and
every file that was there unchanged. test_bad_input.py runs one row of each kind as its own process.
"""

import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT, TINY_RUN, assert_one_line_error, checksums, cli_in_process
from learntok.cli import build_parser
from learntok.cli.options import device_arg
from learntok.util.errors import DataError
from learntok.util.files import INPUT_TYPES, OUTPUT_TYPES, output_folder

TRAIN = ["train", *TINY_RUN, "train.steps=1"]


def commands() -> dict:
    """Subcommand name -> its parser."""
    return build_parser()._subparsers._group_actions[0].choices


def typed_options(types) -> list[tuple[str, object]]:
    return [(name, a) for name, p in commands().items() for a in p._actions if a.type in types]


def flag(action) -> str:
    return action.option_strings[0] if action.option_strings else action.dest


def with_value(argv: list[str], option: str, value: str) -> list[str]:
    """argv with `option` set to `value` (replaced where it is given, else added)."""
    if option in argv:
        i = argv.index(option)
        return argv[: i + 1] + [value] + argv[i + 2 :]
    return argv + [option, value]


# A command line of each command that runs (in a copy of conftest.base), and what it reads: a
# file and a folder among its inputs (the run's data.source is corpus.txt).
BASE = {
    "train": [*TRAIN, "data.source=docs", "--out", "new"],
    "segment": ["segment", "run", "some text"],
    "eval": ["eval", "run", "--max-bytes", "300", "--bpe-vocab", "260"],
    "eval-tasks": ["eval-tasks", "run", "--task", "task.jsonl"],
    "diagnose": ["diagnose", "run", "--batches", "1", "--samples", "2"],
    "plot": ["plot", "run"],
    "sample": ["sample", "run", "--prompt", "a", "--max-bytes", "4"],
    "compare": [
        "compare",
        "--strategies",
        "uniform",
        "--steps",
        "1",
        "--eval-bytes",
        "300",
        *TINY_RUN,
        "data.source=docs",
        "--out",
        "cmp",
    ],
    "prepare": ["prepare", "docs", "--out", "newprep"],
    "config": ["config", "--preset", "tiny"],
    "export": ["export", "run", "--out", "exported"],
}
INPUT_OF = {
    "train": ("docs/00.txt", "docs"),
    "compare": ("docs/00.txt", "docs"),
    "prepare": ("docs/00.txt", "docs"),
    "segment": ("corpus.txt", None),
    "eval": ("corpus.txt", None),
    "sample": ("corpus.txt", None),
    "eval-tasks": ("task.jsonl", None),
    "diagnose": ("corpus.txt", "run"),
    "plot": (None, "run"),
    "config": (None, None),
    "export": (None, None),
}


# ---------------------------------------------------------------- outputs


def readonly(t: Path, monkeypatch) -> Path:
    """A folder this user cannot write. As root, permission bits do not stop a write, so os.access
    (what the guard asks) is made to answer as it would for another user; otherwise chmod 0555."""
    ro = t / "ro"
    ro.mkdir()
    if os.geteuid() == 0:
        real = os.access
        monkeypatch.setattr(
            os,
            "access",
            lambda p, mode, **kw: (
                False if Path(p).resolve() == ro.resolve() and mode & os.W_OK else real(p, mode, **kw)
            ),
        )
    else:
        ro.chmod(0o555)
    return ro


def dangling(t: Path) -> Path:
    (t / "dangling").symlink_to(t / "missing" / "x")
    return t / "dangling"


# target id -> (setup(tmp, command, monkeypatch) -> path for a file output, the same for a folder
# output (None: no such row), words one of which the error holds)
TARGETS = {
    "an-input": (lambda t, c, m: INPUT_OF[c][0], lambda t, c, m: INPUT_OF[c][1], ("input of this command", "reads")),
    "run-config": (lambda t, c, m: "run/config.toml", None, "of run folder"),
    "run-metrics": (lambda t, c, m: "run/metrics.jsonl", None, "of run folder"),
    "run-latest": (lambda t, c, m: "run/checkpoints/latest", lambda t, c, m: "run/checkpoints", "checkpoints of a run"),
    "run-weights": (
        lambda t, c, m: "run/checkpoints/step_0000003/model.safetensors",
        lambda t, c, m: "run/checkpoints/step_0000003",
        "model or checkpoint folder",
    ),
    "prepared-index": (lambda t, c, m: "prep/index.json", lambda t, c, m: "prep", "prepared data folder"),
    "prepared-new-file": (lambda t, c, m: "prep/new.json", lambda t, c, m: "prep/sub", "prepared data folder"),
    "read-only-folder": (
        lambda t, c, m: readonly(t, m) / "x.json",
        lambda t, c, m: readonly(t, m) / "sub",
        "not writable",
    ),
    "under-a-file": (lambda t, c, m: "corpus.txt/sub", lambda t, c, m: "corpus.txt/sub", "is a file, not a folder"),
    "dangling-symlink": (lambda t, c, m: dangling(t), lambda t, c, m: dangling(t), "symlink"),
    "empty": (lambda t, c, m: "", lambda t, c, m: "", "is empty"),
    "wrong-kind": (
        lambda t, c, m: (t / "adir").mkdir() or "adir",
        lambda t, c, m: (t / "a.txt").write_text("x") and "a.txt",
        ("is a folder", "is an existing file"),
    ),
}
OUTPUT_ROWS = [
    pytest.param(cmd, flag(a), target, id=f"{cmd}{flag(a)}-{target}")
    for cmd, a in typed_options(OUTPUT_TYPES)
    for target, (f, d, _) in TARGETS.items()
    if (d if a.type is output_folder else f) is not None
    and (a.type is not output_folder or target != "an-input" or INPUT_OF[cmd][1])
]


@pytest.mark.parametrize("cmd, option, target", OUTPUT_ROWS)
def test_an_output_that_must_not_be_written_is_refused_before_any_work(
    workdir, capsys, monkeypatch, cmd, option, target
):
    make_file, make_folder, words = TARGETS[target]
    folder = next(a for c, a in typed_options(OUTPUT_TYPES) if c == cmd and flag(a) == option).type is output_folder
    path = str((make_folder if folder else make_file)(workdir, cmd, monkeypatch))
    before = checksums(workdir)
    code, err = cli_in_process(with_value(BASE[cmd], option, path), capsys)
    assert_one_line_error(code, err, words, before, checksums(workdir))


FILE_OUTPUTS = [
    pytest.param(cmd, flag(a), id=f"{cmd}{flag(a)}")
    for cmd, a in typed_options(OUTPUT_TYPES)
    if a.type is not output_folder
]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("cmd, option", FILE_OUTPUTS)
def test_an_output_on_a_full_device_fails_without_a_traceback(workdir, capsys, cmd, option):
    """What the message says about a full disk is the disk-full guard's; here: no traceback, no
    exit 0, nothing that was there changed."""
    before = checksums(workdir)
    code, err = cli_in_process(with_value(BASE[cmd], option, "/dev/full"), capsys)
    assert code != 0 and "Traceback" not in err
    assert {k: checksums(workdir).get(k) for k in before} == before


@pytest.mark.parametrize("cmd", sorted(BASE))
def test_every_output_is_written_where_it_is_named_and_nothing_else_changes(workdir, capsys, cmd):
    """Each base command line, every output option of its command given a fresh path: exit 0,
    each output there, every file that was there unchanged (the guard lets the right case through)."""
    argv, named = BASE[cmd], []
    for c, a in typed_options(OUTPUT_TYPES):
        if c == cmd:
            named.append(f"out-{a.dest}{'' if a.type is output_folder else '.' + a.dest}")
            argv = with_value(argv, flag(a), named[-1])
    before = checksums(workdir)
    code, err = cli_in_process(argv, capsys, seconds=300)
    assert code == 0, err[-2000:]
    assert all((workdir / n).exists() for n in named), named
    assert {k: checksums(workdir).get(k) for k in before} == before


# ---------------------------------------------------------------- inputs

# (command, option dest) -> the command line reading VALUE there; data.source is the config key
INPUT_LINE = {
    ("train", "config"): lambda v: [
        "train",
        "--config",
        v,
        *TINY_RUN,
        "train.steps=1",
        "data.source=corpus.txt",
        "--out",
        "new",
    ],
    ("train", "data.source"): lambda v: [*TRAIN, f"data.source={v}", "--out", "new"],
    ("segment", "model"): lambda v: ["segment", v, "text"],
    ("segment", "file"): lambda v: ["segment", "run", "--file", v],
    ("eval", "model"): lambda v: ["eval", v],
    ("eval", "source"): lambda v: ["eval", "run", "--source", v, "--bpe-vocab", "260"],
    ("eval", "boundaries_from"): lambda v: ["eval", "run", "--boundaries-from", v, "--max-bytes", "300"],
    ("compare", "runs"): lambda v: ["compare", "--runs", "run", v, "--eval-bytes", "300"],
    ("config", "config"): lambda v: ["config", "--config", v],
    ("eval-tasks", "model"): lambda v: ["eval-tasks", v, "--task", "task.jsonl"],
    ("eval-tasks", "task"): lambda v: ["eval-tasks", "run", "--task", v],
    ("diagnose", "model"): lambda v: ["diagnose", v, "--batches", "1", "--samples", "2"],
    ("plot", "runs"): lambda v: ["plot", v, "--out", "pl"],
    ("sample", "model"): lambda v: ["sample", v, "--prompt", "a", "--max-bytes", "4"],
    ("prepare", "sources"): lambda v: ["prepare", v, "--out", "newprep", "--piece-bytes", "64"],
    ("export", "model"): lambda v: ["export", v, "--out", "exported"],
}
SUFFIX = {
    ("train", "config"): ".toml",
    ("config", "config"): ".toml",
    ("eval-tasks", "task"): ".jsonl",
}  # others: text (.txt)
TEXT = "a line of text, and another one.\n" * 40


def truncated_gz(t: Path, ext: str) -> str:
    line = (
        json.dumps({"text": TEXT, "context": "a line", "continuation": " of text"}) + "\n" if ext == ".jsonl" else TEXT
    )
    data = gzip.compress(line.encode() * 20)
    (t / f"cut{ext}.gz").write_bytes(data[: len(data) // 2])
    return f"cut{ext}.gz"


def bad_utf8(t: Path, ext: str) -> str:
    body = b'{"context": "caf\xe9", "continuation": "x"}\n' if ext == ".jsonl" else b"caf\xe9 \xff\xfe text\n" * 400
    (t / f"latin{ext}").write_bytes(b"[train]\nsteps = 1 # caf\xe9\n" if ext == ".toml" else body)
    return f"latin{ext}"


def nested(t: Path, ext: str) -> str:
    deep = "[" * 100_000
    (t / f"deep{ext}").write_text(deep if ext == ".json" else '{"text": ' + deep + "\n")
    return f"deep{ext}"


# kind -> (setup(tmp, suffix) -> value, which inputs may also run fine: a set of (command, dest))
KINDS = {
    "device": (lambda t, e: "/dev/zero", set()),
    "fifo": (lambda t, e: os.mkfifo(t / f"pipe{e}") or f"pipe{e}", set()),
    "folder": (lambda t, e: (t / "emptydir").mkdir() or "emptydir", set()),
    "empty-file": (
        lambda t, e: (t / f"empty{e}").write_bytes(b"") or f"empty{e}",
        {("train", "config"), ("config", "config"), ("segment", "file")},
    ),
    "invalid-utf8": (
        bad_utf8,
        {("train", "data.source"), ("eval", "source"), ("segment", "file"), ("prepare", "sources")},
    ),
    "truncated-gz": (truncated_gz, set()),
}
DATA_INPUTS = {("train", "data.source"), ("eval", "source"), ("prepare", "sources")}
FILE_INPUTS = {("train", "config"), ("config", "config"), ("segment", "file"), ("eval-tasks", "task")}


def words_for(key, kind):
    """What the one line must say: the kind named (a run or model folder argument: any one line)."""
    if key not in DATA_INPUTS | FILE_INPUTS:
        return ("learntok: error:",)
    return {
        "device": "a device",
        "fifo": "FIFO",
        "truncated-gz": "gzip",
        "invalid-utf8": "UTF-8",
        "folder": "is a folder, not a file" if key in FILE_INPUTS else ("holds no", "no files"),
        "empty-file": ("is empty", "no examples", "no training documents"),
        "nested": "nested too deeply",
    }[kind]


INPUT_ROWS = [pytest.param(key, kind, id=f"{key[0]}-{key[1]}-{kind}") for key in INPUT_LINE for kind in KINDS] + [
    pytest.param(key, "nested", id=f"{key[0]}-{key[1]}-nested")
    for key in [("train", "config"), ("eval-tasks", "task"), *sorted(DATA_INPUTS)]
]


@pytest.mark.parametrize("key, kind", INPUT_ROWS)
def test_every_input_of_a_bad_kind_is_one_line_or_a_valid_run(workdir, capsys, key, kind):
    """Devices, FIFOs (a blocked read fails the row after 20 s), folders where a file is wanted,
    empty files, invalid UTF-8, a cut gzip and deep nesting: a one-line error, or (where the
    input is fine as it is: bytes are bytes) a run that ends well; never a traceback or a hang."""
    ext = (
        ".json"
        if key == ("train", "config") and kind == "nested"
        else SUFFIX.get(key, ".jsonl" if kind == "nested" else ".txt")
    )
    value = (nested if kind == "nested" else KINDS[kind][0])(workdir, ext)
    before = checksums(workdir)
    code, err = cli_in_process(INPUT_LINE[key](value), capsys, seconds=20 if kind == "fifo" else 120)
    if code == 0 and (kind == "nested" or key in KINDS.get(kind, (None, set()))[1]):
        assert "Traceback" not in err and {k: checksums(workdir).get(k) for k in before} == before
    else:
        assert_one_line_error(code, err, words_for(key, kind), before, checksums(workdir))


def test_every_option_is_in_the_tables():
    """Every path option is typed (learntok.cli: input_* or output_*; plain text says type=str),
    and every command and input option has its command line here."""
    untyped = [
        f"{name} {flag(a)}"
        for name, p in commands().items()
        for a in p._actions
        if a.nargs != 0 and a.type is None and not a.choices and a.dest != "help"
    ]
    assert not untyped, f"give these a type (a path read or written, or type=str): {untyped}"
    assert set(commands()) == set(BASE) == set(INPUT_OF)
    assert {(c, a.dest) for c, a in typed_options(INPUT_TYPES)} <= set(INPUT_LINE)


def test_plain_gzip_text_is_read_as_text(workdir):
    """x.txt.gz trains on the text, not on the compressed bytes: the same data as x.txt."""
    from learntok.data import DataConfig, ByteData

    (workdir / "c.txt.gz").write_bytes(gzip.compress((workdir / "corpus.txt").read_bytes()))
    plain, packed = (ByteData.from_config(DataConfig(source=s)) for s in ("corpus.txt", "c.txt.gz"))
    assert all(list(plain.documents(s)) == list(packed.documents(s)) for s in ("train", "val", "test"))


# ---------------------------------------------------------------- memory under a cap

CAP = 2 << 30  # address space of the child (torch and learntok need about 0.7 GB of it)


def bomb(t: Path) -> str:
    """A valid gzip that decompresses to 1 GB of text (1000 members of 1 MiB of "a"): 4.6 MB on disk."""
    (t / "bomb.txt.gz").write_bytes(gzip.compress(b"a" * (1 << 20), 1) * 1000)
    return "bomb.txt.gz"


def sparse(t: Path) -> str:
    """A 50 GB regular file that takes no disk (a hole): its size alone says it cannot be read."""
    with open(t / "huge.txt", "wb") as f:
        f.truncate(50 << 30)
    return "huge.txt"


@pytest.mark.parametrize("make", [bomb, sparse])
@pytest.mark.parametrize(
    "line",
    [lambda s: [*TRAIN, f"data.source={s}", "--out", "new"], lambda s: ["eval", "run", "--source", s]],
    ids=["train", "eval"],
)
def test_a_source_too_large_for_memory_is_refused_under_a_memory_cap(workdir, make, line):
    """In a child process whose address space is capped (ulimit -v 2 GB), a source larger than
    what may be read into memory is one line naming `learntok prepare`, not a MemoryError or a
    kill; /dev/zero itself is refused by kind (the input table)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cap = lambda: resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))  # noqa: E731
    before = checksums(workdir)
    source = make(workdir)
    r = subprocess.run(
        [sys.executable, "-m", "learntok", *line(source)],
        cwd=workdir,
        env=env,
        preexec_fn=cap,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (workdir / source).unlink()  # not hashed: 50 GB of zeros
    assert_one_line_error(r.returncode, r.stderr, "learntok prepare", before, checksums(workdir))


# ---------------------------------------------------------------- sizes that cannot fit

SIZE_ROWS = {
    "eval-window-beyond-memory": (["eval", "run", "--seq-len", "100000000"], "needs at least"),
    "diagnose-window-beyond-the-split": (["diagnose", "run", "--seq-len", "100000000"], "fewer than one sequence"),
    "train-window-beyond-the-data": (
        [*TRAIN, "data.source=corpus.txt", "train.seq_len=9000", "--out", "new"],
        "fewer than one sequence",
    ),
    "train-batch-beyond-memory": (
        [*TRAIN, "data.source=corpus.txt", "train.batch_size=100000000", "--out", "new"],
        "rows: give smaller sizes",
    ),
}


@pytest.mark.parametrize("argv, words", SIZE_ROWS.values(), ids=SIZE_ROWS.keys())
def test_a_size_that_cannot_fit_is_refused_before_allocating(workdir, capsys, argv, words):
    before = checksums(workdir)
    code, err = cli_in_process(argv, capsys)
    assert_one_line_error(code, err, words, before, checksums(workdir))
    assert not (workdir / "new").exists() or [p.name for p in (workdir / "new").iterdir()] == [".lock"]


def test_a_corrected_rerun_after_a_window_too_long_trains(workdir, capsys):
    """train.seq_len larger than the data fails before the run folder holds anything, so the
    corrected command line is not refused as "already has checkpoints"."""
    argv = [*TRAIN, "data.source=corpus.txt", "--out", "new"]
    assert cli_in_process([*argv, "train.seq_len=9000"], capsys)[0] == 2
    code, err = cli_in_process(argv, capsys)
    assert code == 0, err[-2000:]


# ---------------------------------------------------------------- a run reads only inside itself


def outside(t: Path) -> Path:
    shutil.copytree(t / "run" / "checkpoints" / "step_0000003", t / "elsewhere" / "step_0000003")
    return t / "elsewhere" / "step_0000003"


POINTERS = {
    "relative-path": lambda t: (t / "run/checkpoints/latest").write_text(f"../../{outside(t).relative_to(t)}\n"),
    "absolute-path": lambda t: (t / "run/checkpoints/latest").write_text(f"{outside(t)}\n"),
    "symlinked-folder": lambda t: (
        elsewhere := outside(t),
        shutil.rmtree(t / "run/checkpoints/step_0000003"),
        (t / "run/checkpoints/step_0000003").symlink_to(elsewhere),
    ),
    "symlinked-checkpoints": lambda t: (
        outside(t),
        shutil.move(t / "run/checkpoints", t / "elsewhere/ckpts"),
        (t / "run/checkpoints").symlink_to(t / "elsewhere/ckpts"),
    ),
    "empty-name": lambda t: (t / "run/checkpoints/latest").write_text("\n"),
}


@pytest.mark.parametrize(
    "command", [["eval", "run"], ["train", "--out", "run", "--resume", "train.steps=5"]], ids=["eval", "resume"]
)
@pytest.mark.parametrize("pointer", POINTERS.values(), ids=POINTERS.keys())
def test_latest_naming_a_folder_outside_the_run_is_refused(workdir, capsys, pointer, command):
    pointer(workdir)
    before = checksums(workdir)
    code, err = cli_in_process(command, capsys)
    # train refuses a linked checkpoints folder before it reads a pointer (runfolder._check_kinds)
    assert_one_line_error(code, err, ("only its own checkpoints", "symbolic link"), before, checksums(workdir))


# ---------------------------------------------------------------- a run folder's own names


def broken(t: Path, name: str, fresh: bool) -> Path:
    run = t / ("new" if fresh else "run")
    run.mkdir(exist_ok=True)
    target = run / name
    if target.is_dir():
        shutil.rmtree(target)
    target.unlink(missing_ok=True)
    target.write_text("x") if name == "checkpoints" else target.mkdir()
    return run


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "resume"])
@pytest.mark.parametrize("name", [".lock", "metrics.jsonl", "segments.txt", "config.toml", "checkpoints"])
def test_a_run_file_of_the_wrong_kind_is_one_line(workdir, capsys, name, fresh):
    run = broken(workdir, name, fresh)
    before = checksums(workdir)
    argv = (
        [*TRAIN, "data.source=corpus.txt", "--out", run.name]
        if fresh
        else ["train", "--out", "run", "--resume", "train.steps=5"]
    )
    code, err = cli_in_process(argv, capsys)
    assert_one_line_error(code, err, f"{name} is", before, checksums(workdir))


# ---------------------------------------------------------------- devices

DEVICE_ROWS = [
    pytest.param(cmd, device, id=f"{cmd}-{device}")
    for cmd, a in typed_options((device_arg,))
    for device in ("meta", "nosuch", "cuda:99", "cpu:1") + (() if torch.backends.mps.is_available() else ("mps",))
]


@pytest.mark.parametrize("cmd, device", DEVICE_ROWS)
def test_an_unsupported_or_absent_device_is_refused_at_start_up(workdir, capsys, cmd, device):
    before = checksums(workdir)
    code, err = cli_in_process(with_value(BASE[cmd], "--device", device), capsys)
    assert_one_line_error(code, err, "device", before, checksums(workdir))
    assert "checkpoint" not in err


@pytest.mark.parametrize("cmd", sorted({cmd for cmd, _ in typed_options((device_arg,))}))
def test_cpu_0_is_the_cpu(workdir, capsys, cmd):
    """`cpu:0` names the CPU, as torch does: each command with --device runs on it (the device is
    passed on as resolve_device names it, `cpu`, which every reader of weights takes)."""
    code, err = cli_in_process(with_value(BASE[cmd], "--device", "cpu:0"), capsys)
    assert code == 0, err[-2000:]


# ---------------------------------------------------------------- one reader of metrics.jsonl


def test_plot_reads_the_metrics_as_the_trainer_does_wherever_a_kill_cuts_them(workdir):
    """Cut RUN/metrics.jsonl at every byte (what kill -9 mid-write may leave): the one reader
    (learntok.run.metrics_log, which resume, `plot`, `segment` and `compare` share) returns exactly
    the rows of the whole lines, and `plot` draws the run."""
    from learntok.run import metrics_log
    from learntok.run.plots import plot_runs

    path = workdir / "run" / "metrics.jsonl"
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    for cut in range(len(data) + 1):
        path.write_bytes(data[:cut])
        ends = [len(b"".join(lines[: i + 1])) for i in range(len(lines))]
        whole = sum(end <= cut or end - 1 == cut for end in ends)  # a line cut just before its newline is whole
        expected = [json.loads(line) for line in lines[:whole]]
        assert metrics_log.read(path) == expected, cut
        train, val = metrics_log.split(metrics_log.read(workdir / "run"))
        assert sorted(map(str, train + val)) == sorted(map(str, expected))
        if not expected:
            with pytest.raises(DataError, match="no metrics rows"):
                plot_runs([workdir / "run"], workdir / "plots")
    path.write_bytes(data[: len(data) - 3])
    assert len(plot_runs([workdir / "run"], workdir / "plots")) == 3


def test_a_bad_metrics_line_before_the_last_is_an_error_naming_it(workdir, capsys):
    path = workdir / "run" / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 2, "bp\n{"step": 3}\n')
    before = checksums(workdir)
    code, err = cli_in_process(["plot", "run", "--out", "pl"], capsys)
    assert_one_line_error(code, err, "line 2", before, checksums(workdir))


# ---------------------------------------------------------------- writes whole or not at all


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    from learntok.util.errors import OutputError
    from learntok.util.files import write_output

    target = tmp_path / "report.json"
    target.write_text("old")
    (tmp_path / "link.json").symlink_to(target)
    write_output(tmp_path / "link.json", "new")  # through a link: the file it names, the link kept
    assert target.read_text() == "new" and (tmp_path / "link.json").is_symlink()

    def fail(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OutputError, match="no space left on device"):
        write_output(target, "newer")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "report.json"]
