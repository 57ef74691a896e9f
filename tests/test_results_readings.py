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
    r"\b(?:is|are|were|was|stays?|stayed|ends?|ended)\s+level\b|(?<!byte )(?<!token )\blevel\s+(?:with\b|at\s+\d)",
    re.IGNORECASE,
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


def readme_tables() -> list[list[list[str]]]:
    """The README's ordering tables, in order (code, then prose): each row's cells."""
    tables, rows = [], None
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("| arm | seeds | test bpb"):
            rows = []
            tables.append(rows)
        elif rows is not None and line.startswith("| ") and not line.startswith("| ---"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif not line.startswith("|"):
            rows = None
    return tables


ARM_LABELS = {"learned (": "learned", "uniform (": "uniform", "hnet (": "hnet", "nawrot (": "nawrot",
              "entropy (": "entropy", "whitespace (": "whitespace", "bpe-causal (": "bpe-causal",
              "frozen (": "frozen"}  # fmt: skip


@pytest.mark.parametrize("index, name", [(0, "ordering-code.json"), (1, "ordering-prose.json")])
def test_the_readmes_ordering_tables_read_as_their_json(index, name):
    """Every figure of the README's two ordering tables is its JSON's, rounded once to three
    places, and each reading is the JSON's (a tie never starts with a direction)."""
    result = json.loads((RESULTS / name).read_text())
    rows = readme_tables()[index]
    assert rows, name
    for cells in rows:
        arm = next(v for k, v in ARM_LABELS.items() if cells[0].startswith(k))
        v = result["arms"][arm]
        assert cells[1] == str(len(v["per_seed"])), (arm, cells[1])
        assert cells[2] == f"{v['test_bpb']:.3f} ({v['se']:.3f})", (arm, cells[2])
        assert cells[3] == f"{v['rate']:.3f}", (arm, cells[3])
        d = v.get("learned_minus")
        if not d:
            continue
        assert cells[4].strip("*") == f"{d['diff']:+.3f} ({d['se']:.3f})".replace("+-", "-"), (arm, cells[4])
        assert cells[5] == f"[{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]", (arm, cells[5])
        if d["reads"] == "tie":
            assert not cells[6].startswith(("**lower", "**higher", "lower", "higher")), (arm, cells[6])
        else:
            assert cells[6].startswith(f"**{d['reads']}**"), (arm, cells[6])


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
    result = json.loads(path.read_text())
    seeds = result["seeds"]
    total = re.compile(r"\b(\d+) of 30 seeds")
    for page in (ROOT / "README.md", RESULTS / "preregistered-prose.md"):
        counts = {int(n) for n in total.findall(page.read_text().replace("\n", " "))}
        assert counts == {len(seeds)}, (page.name, counts, len(seeds))
    status = (RESULTS / "preregistered-prose.md").read_text()
    assert f"({seeds[0]}-{seeds[-1]}, every " in status
    title = status.splitlines()[0]
    if "final" not in result["looks"]:
        assert f"seeds {seeds[0]}-{seeds[-1]} so far" in status
        assert title.endswith("(in progress)"), title
    else:  # finished: no page may still read as a study under way
        assert "so far" not in status and "in progress" not in title, title
        assert f"seeds {seeds[0]}-{seeds[-1]}\n" in status


RULE_LABELS = {"entropy (": "entropy", "whitespace (": "whitespace", "hnet (": "hnet"}


def readme_study_table() -> tuple[str, list[list[str]]]:
    """The README's table of the registered study: its header and each row's cells."""
    header, rows = "", []
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("| learned - rule |"):
            header = line
        elif header and line.startswith("| ") and not line.startswith("| ---"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif header and not line.startswith("|"):
            break
    return header, rows


def test_the_readmes_study_table_reads_as_the_latest_registered_look():
    """The README shows the study's latest registered look (the final one once it is in, the
    interim one before), every figure its JSON's rounded once to three places, and every reading
    the registered one at that look's level."""
    path = RESULTS / "preregistered-prose.json"
    if not path.exists():
        pytest.skip("the registered study has no finished seeds yet")
    result = json.loads(path.read_text())
    name = next((k for k in ("final", "interim") if k in result["looks"]), None)
    if name is None:
        pytest.skip("no registered look yet")
    look = result["looks"][name]
    header, rows = readme_study_table()
    assert header.endswith(f"| reads at {look['alpha']:g} |"), header
    rules = look["sampled"]["rules"]
    named = [next(v for k, v in RULE_LABELS.items() if cells[0].startswith(k)) for cells in rows]
    assert sorted(named) == sorted(rules), named
    for rule, cells in zip(named, rows):
        d = rules[rule]
        assert cells[1] == str(len(look["seeds"])), cells
        assert cells[2].strip("*") == f"{d['diff']:+.3f} ({d['se']:.3f})", cells
        assert cells[3] == f"[{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]", cells
        assert cells[4] == f"{d['p']:.3f} ({d['p_holm']:.3f})", cells
        assert cells[5] == f"{d['p_tost']:.3f} ({d['p_tost_holm']:.3f})", cells
        assert cells[6].strip("*") == d["reads"], cells
