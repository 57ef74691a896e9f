"""The result pages hold to the code: every result file in docs/results says which command, commit
and seeds made it, and every `learntok` command quoted in docs/results, docs/usage.md and the
README names a subcommand and options that exist (so a renamed command or option fails here, not
in a reader's shell)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from learntok.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
RESULT_FILES = sorted([*RESULTS.glob("*.md"), *RESULTS.glob("*.json")])
COMMAND_PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "usage.md",
    ROOT / "docs" / "results.md",
    *sorted(RESULTS.glob("*.md")),
]

HASH = r"[0-9a-f]{7,40}"
NOT_RECORDED = "not recorded"
# A Markdown result page's provenance line: `Made by: COMMAND; commit HASH ...; seeds N, ...`,
# where any of the three may say plainly that it was not recorded.
MADE_BY = re.compile(
    rf"^Made by: (?P<command>.+?); commit (?P<commit>{HASH}\b|{NOT_RECORDED}).*?; (?P<seeds>seeds? .+)$"
)


# ---------------------------------------------------------------- provenance


def md_provenance(text: str) -> dict:
    """The provenance a Markdown page records, from its `Made by:` line; ValueError when it has
    none or the line lacks a command, a commit or seeds."""
    lines = [line for line in text.splitlines() if line.startswith("Made by:")]
    if not lines:
        raise ValueError("no line starting 'Made by:' (command; commit HASH; seeds N)")
    m = MADE_BY.match(lines[0])
    if m is None:
        raise ValueError(f"the 'Made by:' line is not 'COMMAND; commit HASH; seeds N': {lines[0][:80]!r}")
    if "`" not in m["command"] and NOT_RECORDED not in m["command"]:
        raise ValueError("the 'Made by:' line quotes no `command` and does not say it is not recorded")
    seeds = m["seeds"]
    if not re.match(rf"seeds? (\d|{NOT_RECORDED})", seeds):
        raise ValueError(f"the 'Made by:' line gives no seed numbers and does not say they are not recorded: {seeds!r}")
    clause = lines[0][m.start("commit") : m.start("seeds")]
    return {"command": m["command"], "commits": re.findall(rf"\b{HASH}\b", clause), "seeds": seeds}


def json_provenance(record) -> dict:
    """The provenance a JSON result file records in its top-level `command`, `commit` and `seeds`
    fields; ValueError when one is missing or malformed."""
    if not isinstance(record, dict):
        raise ValueError("a JSON result file is an object with command, commit and seeds fields")
    command, commit, seeds = (record.get(k) for k in ("command", "commit", "seeds"))
    if not isinstance(command, str) or not command.strip():
        raise ValueError("field 'command': the command line that made the file (or 'not recorded ...')")
    if not isinstance(commit, str) or not re.fullmatch(rf"{HASH}|{NOT_RECORDED}.*", commit):
        raise ValueError("field 'commit': a commit hash (or 'not recorded ...')")
    ok_seeds = (isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds)) or (
        isinstance(seeds, str) and seeds.startswith(NOT_RECORDED)
    )
    if not ok_seeds:
        raise ValueError("field 'seeds': a list of integer seeds (or 'not recorded ...')")
    return {"command": command, "commits": re.findall(rf"^{HASH}$", commit), "seeds": seeds}


def provenance(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    return md_provenance(text) if path.suffix == ".md" else json_provenance(json.loads(text))


def in_history(commit: str) -> bool | None:
    """Whether `commit` names a commit of this repository; None without git or a history."""
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode and not (ROOT / ".git").exists():
        return None
    return done.returncode == 0


def test_results_folder_has_files():
    assert any(p.suffix == ".md" for p in RESULT_FILES) and any(p.suffix == ".json" for p in RESULT_FILES)


@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda p: p.name)
def test_result_file_records_command_commit_and_seeds(path):
    found = provenance(path)
    for commit in found["commits"]:
        known = in_history(commit)
        if known is None:
            pytest.skip("no git history to check the commit against")
        assert known, f"{path.name}: commit {commit} is not in this repository's history"


GOOD = "Made by: `learntok compare --preset tiny`; commit 9e74579; seeds 0, 1, 2."


@pytest.mark.parametrize(
    "text, field",
    [
        ("# A page\n\nno provenance here\n", "Made by"),
        ("Made by: `learntok compare`; seeds 0\n", "COMMAND; commit"),
        ("Made by: `learntok compare`; commit 9e74579\n", "COMMAND; commit"),
        ("Made by: learntok compare; commit 9e74579; seeds 0\n", "quotes no `command`"),
        ("Made by: `learntok compare`; commit 9e74579; seeds zero\n", "seed numbers"),
        ("Made by: `learntok compare`; commit abc; seeds 0\n", "COMMAND; commit"),
    ],
)
def test_md_provenance_refuses_a_missing_field(text, field):
    with pytest.raises(ValueError, match=re.escape(field)):
        md_provenance(text)


@pytest.mark.parametrize(
    "line, commits",
    [
        (GOOD, ["9e74579"]),
        ("Made by: command not recorded; commit not recorded; seeds not recorded.", []),
        (
            "Made by: the `compare` commands; commit fa9c9cb (most) and 7bdaefb (learned); seeds 0, 1",
            ["fa9c9cb", "7bdaefb"],
        ),
    ],
)
def test_md_provenance_reads_commits(line, commits):
    assert md_provenance(f"# Page\n\n{line}\n")["commits"] == commits


@pytest.mark.parametrize(
    "record, field",
    [
        ([], "an object"),
        ({"commit": "9e74579", "seeds": [0]}, "'command'"),
        ({"command": "learntok eval RUN", "seeds": [0]}, "'commit'"),
        ({"command": "learntok eval RUN", "commit": "HEAD", "seeds": [0]}, "'commit'"),
        ({"command": "learntok eval RUN", "commit": "9e74579"}, "'seeds'"),
        ({"command": "learntok eval RUN", "commit": "9e74579", "seeds": []}, "'seeds'"),
        ({"command": "learntok eval RUN", "commit": "9e74579", "seeds": ["0"]}, "'seeds'"),
    ],
)
def test_json_provenance_refuses_a_missing_field(record, field):
    with pytest.raises(ValueError, match=re.escape(field)):
        json_provenance(record)


# ---------------------------------------------------------------- quoted commands


def code_spans(text: str) -> list[str]:
    """The code a Markdown page quotes: fenced blocks, indented blocks (one command a line, with
    backslash continuations joined) and `inline` spans."""
    spans, fenced = [], False
    lines = text.replace("\\\n", " ").splitlines()
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            spans.append(line.split(" # ")[0])
        else:
            spans.extend(re.findall(r"`([^`]+)`", line))
    return spans


# `learntok SUB` where a shell runs it: first on the line (after VAR=value assignments), after
# `python -m` / `torchrun ... -m`, or after a shell separator; not `from learntok import ...`.
COMMAND = re.compile(r"(?:^\s*(?:\w+=\S+\s+)*|-m\s+|[;&|(]\s*)learntok +(?P<sub>[a-z][a-z-]*)(?P<rest>[^;|&]*)")


def quoted_commands(text: str) -> list[tuple[str, list[str]]]:
    """(subcommand, its --options) of every `learntok SUBCOMMAND ...` in the page's code."""
    found = []
    for span in code_spans(text):
        for m in re.finditer(COMMAND, span):
            options = [o.split("=")[0] for o in re.findall(r"(?<![\w-])--[a-z][a-z-]*(?:=\S*)?", m["rest"])]
            found.append((m["sub"], options))
    return found


def commands_of_pages() -> list[tuple[str, str, list[str]]]:
    rows = []
    for page in COMMAND_PAGES:
        for sub, options in quoted_commands(page.read_text(encoding="utf-8")):
            rows.append((page.name, sub, options))
    return rows


QUOTED = commands_of_pages()
SUBPARSERS = build_parser()._subparsers._group_actions[0].choices


def test_pages_quote_commands():
    assert {sub for _, sub, _ in QUOTED} >= {"train", "eval", "compare"}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("    learntok eval runs/a --split test --rate 0.2\n", [("eval", ["--split", "--rate"])]),
        (
            "    learntok compare --preset tiny \\\n      --out runs/x --jobs=2\n",
            [("compare", ["--preset", "--out", "--jobs"])],
        ),
        ("prose with `learntok segment` and `learntok.Tokenizer`\n", [("segment", [])]),
        ("```\nOUT=x learntok train --out $OUT   # a --comment\n```\n", [("train", ["--out"])]),
        ("plain prose: learntok eval is not quoted\n", []),
        (
            "    from learntok import Tokenizer\n    torchrun --nproc-per-node 2 -m learntok train --out a\n",
            [("train", ["--out"])],
        ),
    ],
)
def test_quoted_commands_reads_subcommand_and_options(text, expected):
    assert quoted_commands(text) == expected


@pytest.mark.parametrize("page, sub, options", QUOTED, ids=[f"{p}:{s}:{i}" for i, (p, s, _) in enumerate(QUOTED)])
def test_quoted_command_names_real_options(page, sub, options):
    assert sub in SUBPARSERS, f"{page} quotes `learntok {sub}`, which is not a subcommand"
    known = SUBPARSERS[sub]._option_string_actions
    unknown = [o for o in options if o not in known]
    assert not unknown, f"{page}: `learntok {sub}` has no option {', '.join(unknown)}"


@pytest.mark.parametrize("sub", sorted({s for _, s, _ in QUOTED if s in SUBPARSERS}))
def test_quoted_subcommand_help_exits_zero(sub, capsys):
    assert main([sub, "--help"]) == 0
    assert f"learntok {sub}" in capsys.readouterr().out


def test_usage_lists_every_environment_variable():
    from learntok.util.environment import VARIABLES

    usage = (ROOT / "docs" / "usage.md").read_text()
    assert [name for name in VARIABLES if f"| `{name}` |" not in usage] == []


def test_the_readme_is_a_landing_page():
    """What it is, the two commands, the answers and links: at most 250 lines; the rest in docs/."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines"
