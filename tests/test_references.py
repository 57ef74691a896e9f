"""The repository stands alone: no code, test or doc cites a document it does not hold (the
spec outside it, a folder beside it) or an issue number. Each such reference points at a page
in docs/ instead (docs/design.md has the model's design)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = {".py", ".md", ".toml", ".sh", ".txt"}
# Built from pieces, so that this file does not match itself.
FORBIDDEN = {
    "the spec outside the repository": re.compile(r"\b" + "DES" + r"IGN\b"),
    "an issue number": re.compile("iss" + r"ue[ -]?#?\d+|\biss" + r"ue #", re.IGNORECASE),
    "a folder outside the repository": re.compile(r"\bsha" + r"red/"),
}


def text_files() -> list[Path]:
    roots = [ROOT / "learntok", ROOT / "tests", ROOT / "benchmarks", ROOT / "scripts", ROOT / "docs"]
    files = [ROOT / "README.md", ROOT / "pyproject.toml"]
    for root in roots:
        files += [p for p in root.rglob("*") if p.suffix in SUFFIXES and not p.is_relative_to(ROOT / "tests" / "data")]
    return sorted(files)


def citations(text: str) -> list[str]:
    return [f"{what}: {m.group(0)!r}" for what, pattern in FORBIDDEN.items() for m in pattern.finditer(text)]


def test_no_file_cites_what_the_repository_lacks():
    wrong = [
        f"{path.relative_to(ROOT)}:{n}: {c}"
        for path in text_files()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for c in citations(line)
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    "line",
    [
        "see " + "DES" + "IGN §3",
        "(iss" + "ue 13)",
        "the iss" + "ue-9 table",
        "../sha" + "red/evals/piqa.jsonl.gz",
        "Iss" + "ue #4",
    ],
)
def test_the_check_can_fail(line):
    assert citations(line)


def test_the_design_page_exists_and_has_the_cited_sections():
    page = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    cited = {
        m.group(1)
        for path in text_files()
        for m in re.finditer(r"docs/design\.md §(\d+)", path.read_text(encoding="utf-8"))
    }
    sections = set(re.findall(r"^## (\d+)\.", page, re.MULTILINE))
    assert cited and cited <= sections, cited - sections
