"""Every reading a results page or the README gives of a ranking is the one its JSON's p-value and
interval give: "lower" / "higher" only below 0.05 (corrected as the page says) with an interval
that excludes 0; "equivalent" only where an equivalence test (TOST) says so; and no page words a
tie (not resolved) as "level"."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "benchmarks.md",
    ROOT / "docs" / "results.md",
    *sorted(RESULTS.glob("*.md")),
]
ORDERINGS = sorted(p for p in RESULTS.glob("ordering-*.json"))
LEVEL = re.compile(
    r"\b(?:is|are|were|was|stays?|stayed|ends?|ended)\s+level\b|(?<!byte )(?<!token )\blevel\s+with\b", re.IGNORECASE
)


def reading(d: dict, alpha: float = 0.05) -> str:
    """The reading a learned - arm difference's corrected p and interval give."""
    lo, hi = d["ci95"]
    if d["p_holm"] is not None and d["p_holm"] < alpha and (hi < 0 or lo > 0):
        return "lower" if d["diff"] < 0 else "higher"
    return "tie"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_words_an_unresolved_difference_as_level(page):
    text = page.read_text(encoding="utf-8")
    found = [m.group(0) for m in LEVEL.finditer(text)]
    assert not found, f"{page.name}: {found} (a tie is 'not resolved'; 'level' needs an equivalence test)"


@pytest.mark.parametrize("path", ORDERINGS, ids=lambda p: p.name)
def test_each_ordering_reading_is_what_its_p_value_and_interval_give(path):
    result = json.loads(path.read_text())
    table = path.with_name(path.stem + "-table.md")
    rows = {line.split("|")[1].strip(): line for line in table.read_text().splitlines() if line.startswith("| ")}
    for arm, v in result["arms"].items():
        d = v.get("learned_minus")
        if not d:
            continue
        assert d["reads"] == reading(d), (path.name, arm, d["reads"], reading(d))
        cell = rows[arm].split("|")[9].strip().strip("*")
        assert cell == d["reads"], (path.name, arm, cell)


def test_the_readmes_code_table_reads_as_its_json():
    result = json.loads((RESULTS / "ordering-code.json").read_text())
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    names = {"uniform": "uniform (random", "hnet": "hnet (H-Net", "nawrot": "nawrot (dynamic", "entropy": "entropy (BLT)",
             "whitespace": "whitespace (SpaceByte)", "bpe-causal": "bpe-causal (a BPE"}  # fmt: skip
    for arm, label in names.items():
        row = next(line for line in readme.splitlines() if line.startswith(f"| {label}"))
        reads = row.rstrip(" |").split("|")[-1].strip()
        want = result["arms"][arm]["learned_minus"]["reads"]
        if want == "tie":
            assert not reads.startswith(("**lower", "**higher", "lower", "higher")), (arm, reads)
        else:
            assert reads.startswith(f"**{want}**"), (arm, reads)


def registered_reading(d: dict, alpha: float, margin: float) -> str:
    direction = ("lower" if d["diff"] < 0 else "higher") if d["p_holm"] < alpha else None
    equivalent = d["p_tost_holm"] < alpha
    assert not equivalent or (-margin < d["ci90"][0] and d["ci90"][1] < margin) or alpha < 0.05
    if direction and equivalent:
        return f"{direction}, and equivalent within +-{margin}"
    return direction or (f"equivalent within +-{margin}" if equivalent else "not resolved")


def test_the_registered_study_reads_as_its_registered_tests():
    path = RESULTS / "preregistered-prose.json"
    if not path.exists():
        pytest.skip("the registered study has no finished seeds yet")
    result = json.loads(path.read_text())
    table = path.with_name(path.stem + "-table.md").read_text()
    for look in result["looks"].values():
        for scoring in ("sampled", "greedy"):
            r = look[scoring]
            assert r["primary"]["p"] == max(d["p_lower"] for d in r["rules"].values())
            assert r["primary"]["learned_below_every_rule"] == (r["primary"]["p"] < look["alpha"])
            for rule, d in r["rules"].items():
                assert d["reads"] == registered_reading(d, look["alpha"], result["margin"]), (rule, d["reads"])
                assert f"| {d['reads']} |" in table


def test_the_study_pages_count_the_seeds_its_json_has():
    """The README and the study's page say how many seeds have finished: the JSON's count, and the
    page's range is the JSON's first and last seed."""
    path = RESULTS / "preregistered-prose.json"
    if not path.exists():
        pytest.skip("the registered study has no finished seeds yet")
    seeds = json.loads(path.read_text())["seeds"]
    total = re.compile(r"\b(\d+) of 30 seeds")
    for page in (ROOT / "README.md", RESULTS / "preregistered-prose.md"):
        counts = {int(n) for n in total.findall(page.read_text().replace("\n", " "))}
        assert counts == {len(seeds)}, (page.name, counts, len(seeds))
    status = (RESULTS / "preregistered-prose.md").read_text()
    assert f"({seeds[0]}-{seeds[-1]}, every arm)" in status
    assert f"seeds {seeds[0]}-{seeds[-1]} so far" in status
