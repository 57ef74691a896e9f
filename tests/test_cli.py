"""The command line end to end (subprocess), and its one-line errors."""

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from learntok.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "learntok", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_train_then_segment_from_the_command_line(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join(f"a line of text number {i}." for i in range(300)))
    out = tmp_path / "run"
    r = run(
        "train",
        "--preset",
        "tiny",
        "train.steps=3",
        "model.d_model=32",
        "model.n_heads=2",
        "train.seq_len=64",
        "train.batch_size=4",
        "log.eval_bytes=1024",
        f"data.source={corpus}",
        "--out",
        out,
        "--json",
        tmp_path / "summary.json",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["step"] == 3 == json.loads((tmp_path / "summary.json").read_text())["step"]

    text = "some text, to cut into tokens"
    r = run("segment", out, text, "--json", tmp_path / "seg.json", "--html", tmp_path / "seg.html", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip("\n").replace("|", "") == text  # no colour: stdout is not a tty
    seg = json.loads((tmp_path / "seg.json").read_text())
    assert "".join(c["text"] for c in seg["chunks"]) == text and 0 <= seg["boundary_rate"] <= 1
    assert b"".join(base64.b64decode(c["bytes"]) for c in seg["chunks"]) == text.encode()
    assert "<span" in (tmp_path / "seg.html").read_text()
    assert f"wrote {tmp_path / 'seg.html'}\n" in r.stderr  # says where the page went

    r = run("segment", out, "--held-out", cwd=tmp_path)  # the README demo's last step
    assert r.returncode == 0, r.stderr
    assert "line of text" in r.stdout.replace("|", "")
    assert "validation bits per byte" in r.stdout and "whitespace rate" in r.stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (["train", "train.bogus=1"], "train.bogus"),
        (["train", "--preset", "huge"], "huge"),
        (["segment", "no/such/run", "text"], "does not exist"),
    ],
)
def test_expected_mistakes_exit_2_with_one_line(tmp_path, args, words):
    r = run(*args, cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("learntok: error:") and words in r.stderr
    assert "Traceback" not in r.stderr


def test_in_process_errors(tmp_path, capsys):
    assert main(["train", "--resume"]) == 2
    assert main(["train", "data.source=" + str(tmp_path / "missing.txt"), "--out", str(tmp_path / "r")]) == 2
    assert main(["segment", str(tmp_path), "--file", str(tmp_path / "nope.txt")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("learntok: error: ") for line in err)


@pytest.mark.parametrize(
    "message",
    [
        "variant uniform failed (exit 2): learntok: error: data source nope does not exist",  # a child's line, quoted
        "unknown preset 'huge'",
    ],
)
def test_an_error_line_has_one_prefix(monkeypatch, capsys, message):
    from learntok.cli import evaluation
    from learntok.util.errors import ConfigError

    def fail(args):
        raise ConfigError(message)

    monkeypatch.setattr(evaluation, "cmd_plot", fail)
    assert main(["plot", "run"]) == 2
    err = capsys.readouterr().err
    assert err.count("learntok: error: ") == 1 and err.startswith("learntok: error: ") and err.count("\n") == 1


def test_segment_helpers():
    from learntok.text.display import display_chunks, render_terminal
    from learntok.model.aunet import AUNet
    from learntok.model.config import ModelConfig
    from learntok.text.windows import segment_text

    assert [c.data for c in display_chunks(b"ab cd!", [0, 2, 4, 5])] == [b"ab", b" c", b"d", b"!"]
    assert (
        render_terminal(display_chunks("ab\u20ac".encode(), [0, 2, 4]), color=False) == "ab|\u20ac\u25b8|\u25c2"
    )  # a euro sign cut
    assert render_terminal(display_chunks(b"ab", [0, 1]), color=True).count("\x1b[0m") == 2

    model = AUNet(ModelConfig(d_model=32, n_heads=2, n_mid=1))
    text = "a text long enough to be read in several pieces " * 3
    chunks, stats = segment_text(model, text, window=20)
    assert b"".join(c.data for c in chunks) == text.encode() and stats["n_chunks"] == len(chunks)
    assert set(range(0, len(text), 19)) <= {c.start for c in chunks}  # every window's first byte starts a chunk
    assert segment_text(model, text, seed=3) == segment_text(model, text, seed=3)  # seeded


@pytest.mark.parametrize("run", [{}, {"step": 3}, {"step": 3, "val_bpb": 2.5}], ids=["model-folder", "no-val", "val"])
def test_segment_held_out_says_nan_never(run):
    """`segment --held-out` beside the run's validation figures: the ones its log records, or that
    none are (a model folder, a run not validated yet); never `nan` (docs/reliability.md)."""
    from learntok.text.segment import held_out_line

    line = held_out_line({"boundary_rate": 0.2, "whitespace_rate": 0.1}, run)
    assert "nan" not in line and ("bits per byte 2.500" in line) == ("val_bpb" in run), line


def test_an_argument_error_is_refused_before_torch_loads(tmp_path):
    # parsing, an option's value and a missing run are checked before the library (torch) is imported
    code = (
        "import sys\n"
        "from learntok.cli import main\n"
        "import learntok\n"
        f"missing = {str(tmp_path / 'missing')!r}\n"
        "for argv in (['eval', missing], ['sample', missing, '--prompt', 'a'], ['segment', 'x', '--rate', '7']):\n"
        "    assert main(argv) == 2, argv\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert learntok.__all__ and 'torch' not in sys.modules\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("learntok: error: ") == 3 and "does not exist" in p.stderr


def test_the_package_exports_lazily():
    import learntok
    from learntok import AUNet, Encoding, ModelConfig, ModelOutput, ObjectiveConfig, Tokenizer  # noqa: F401

    assert set(learntok.__all__) <= set(dir(learntok))
    with pytest.raises(AttributeError):
        learntok.Nothing


OUTPUT_WORDS = ("--json", "--html", "--out", "--output", "--save", "--png")


def undeclared_outputs(parser) -> list[str]:
    """Options of every subcommand that name or describe a file written (by their flag, or a help
    that starts "write" / "also write" / "output") without an output type (learntok.util.files:
    output_file, output_folder): such an option would skip the check of every output path."""
    import argparse

    from learntok.util.files import OUTPUT_TYPES

    wrong = []
    for sub in (a for a in parser._actions if isinstance(a, argparse._SubParsersAction)):
        for name, command in sub.choices.items():
            for a in command._actions:
                says = (a.help or "").lower().startswith(("write", "also write", "output"))
                if (says or set(a.option_strings) & set(OUTPUT_WORDS)) and a.type not in OUTPUT_TYPES:
                    wrong.append(f"{name} {'/'.join(a.option_strings) or a.dest}")
    return wrong


def test_every_output_option_is_declared_as_one():
    from learntok.cli import build_parser

    assert undeclared_outputs(build_parser()) == []


def test_an_output_option_typed_as_text_is_caught():
    from learntok.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    sub.choices["eval"].add_argument("--png", type=str, help="a chart")
    sub.choices["plot"].add_argument("--table", type=str, help="write the table to this file")
    assert undeclared_outputs(parser) == ["eval --png", "plot --table"]


def test_every_command_builds_its_request_one_way():
    """The library's request from a command line: each field from the option of its dest, a value
    the command derives given, a field no option names left at its default."""
    import argparse
    from dataclasses import dataclass, field

    from learntok.cli.options import request

    @dataclass
    class Asked:
        seed: int
        rate: float | None = None
        json_path: str | None = None
        extra: dict = field(default_factory=dict)

    args = argparse.Namespace(seed=3, rate=0.2, json="out.json", unrelated=1)
    assert request(Asked, args, json_path=args.json) == Asked(3, 0.2, "out.json", {})
