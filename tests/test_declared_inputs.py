"""What each command reads, as the command itself declares it (`reads` beside its function in
learntok/cli: the data its config, its variants or its run names, resolved as the command
resolves it): a bad input path is one line before any work, and no output may replace an input
found so. Each row runs `python -m learntok` in a fresh copy of the shared folder (a tiny run
`run/` on corpus.txt, a task file, a folder `docs/` and its prepared folder `prep/`): exit 2,
one line `learntok: error: ...`, no traceback, no file that was there changed, and nothing new
where the command would have written.
"""

from pathlib import Path

import pytest

from conftest import TINY_RUN as TINY, assert_one_line_error, checksums, run_cli

TRAIN = ["train", "--preset", "tiny", *TINY, "train.steps=1"]
COMPARE = ["compare", "--preset", "tiny", "--steps", "1", "--eval-bytes", "300", *TINY, "data.source=corpus.txt"]


def config_naming(t: Path, source: str) -> str:
    (t / "c.toml").write_text(f'[data]\nsource = "{source}"\n')
    return "c.toml"


# id, setup(folder) -> arguments, words the error holds, the path the command would have written
CASES = [
    ("train-missing-source", lambda t: [*TRAIN, "data.source=missing.txt", "--out", "new"], "missing.txt", "new"),
    ("train-missing-config", lambda t: [*TRAIN, "--config", "missing.toml", "--out", "new"], "missing.toml", "new"),
    (
        "train-out-inside-the-configs-source",
        lambda t: [*TRAIN, "--config", config_naming(t, "docs"), "--out", "docs/new"],
        "inside data.source docs",
        "docs/new",
    ),
    (
        "train-resumed-json-over-its-source",
        lambda t: ["train", "--out", "run", "--resume", "--json", "corpus.txt"],
        "input of this command",
        None,
    ),
    (
        "compare-variant-missing-source",
        lambda t: [*COMPARE, "--strategies", "uniform,uniform+data.source=missing.txt", "--out", "cmp"],
        ("variant 'uniform+data.source=missing.txt'", "missing.txt"),
        "cmp",
    ),
    (
        "compare-jobs-variant-missing-source",
        lambda t: [*COMPARE, "--strategies", "uniform,uniform+data.source=gone/x.txt", "--jobs", "2", "--out", "cmp"],
        "variant 'uniform+data.source=gone/x.txt'",
        "cmp",
    ),
    (
        "compare-out-inside-a-variants-source",
        lambda t: [*COMPARE, "--strategies", "uniform,uniform+data.source=docs", "--out", "docs/cmp"],
        "inside data.source docs",
        "docs/cmp",
    ),
    (
        "compare-json-over-a-variants-source",
        lambda t: [
            *COMPARE,
            "--strategies",
            "uniform+data.source=docs/00.txt",
            "--out",
            "cmp",
            "--json",
            "docs/00.txt",
        ],
        "input of this command",
        "cmp",
    ),
    ("compare-runs-missing-run", lambda t: ["compare", "--runs", "run", "nope"], "nope", None),
    ("eval-missing-run", lambda t: ["eval", "nope", "--json", "e.json"], "nope", "e.json"),
    (
        "eval-missing-source",
        lambda t: ["eval", "run", "--source", "missing.txt", "--json", "e.json"],
        "missing.txt",
        "e.json",
    ),
    ("eval-json-over-the-runs-data", lambda t: ["eval", "run", "--json", "corpus.txt"], "input of this command", None),
    (
        "eval-json-inside-its-source",
        lambda t: ["eval", "run", "--source", "docs", "--json", "docs/e.json"],
        "inside --source docs",
        "docs/e.json",
    ),
    ("eval-tasks-missing-task", lambda t: ["eval-tasks", "run", "--task", "missing.jsonl"], "missing.jsonl", None),
    ("diagnose-out-over-the-runs-data", lambda t: ["diagnose", "run", "--json", "corpus.txt"], "input", None),
    ("segment-missing-file", lambda t: ["segment", "run", "--file", "missing.txt"], "missing.txt", None),
    (
        "segment-html-over-the-runs-data",
        lambda t: ["segment", "run", "--held-out", "--html", "corpus.txt"],
        "input",
        None,
    ),
    ("sample-missing-run", lambda t: ["sample", "nope", "--prompt", "a", "--json", "s.json"], "nope", "s.json"),
    (
        "sample-json-over-the-runs-data",
        lambda t: ["sample", "run", "--prompt", "a", "--json", "corpus.txt"],
        "input",
        None,
    ),
    ("plot-missing-run", lambda t: ["plot", "nope", "--out", "plots"], "nope", "plots"),
    ("export-missing-run", lambda t: ["export", "nope", "--out", "exported"], "nope", "exported"),
    ("prepare-missing-source", lambda t: ["prepare", "missing.txt", "--out", "newprep"], "missing.txt", "newprep"),
]


@pytest.mark.parametrize("setup, words, written", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_a_bad_input_path_is_one_line_before_any_work(workdir, setup, words, written):
    args = setup(workdir)
    before = checksums(workdir)
    r = run_cli(*args, cwd=workdir)
    assert_one_line_error(r.returncode, r.stderr, words, before, checksums(workdir))
    assert written is None or not (workdir / written).exists()
