"""`segment --html`: the page opens with the command's own decisions (rule, seed, rate) and says
which; its script re-decides at any slider offset as the Python reference does, with the same
rule, and draws every chunk as `display_chunks` does (a character cut by a boundary shown once),
checked by running the page's own script under node (and in headless Chromium when installed)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess

import pytest

from learntok.cli import main
from learntok.text.display import display_chunks
from learntok.text.page import PageCollector, chunk_starts, decide_from_terms, render_html
from learntok.text.windows import decide, text_rows
from tests.test_display import SCRIPTS
from tests.test_rate import tiny
from tests.test_strategies import shakespeare

PAGE_TEXT = shakespeare(500, skip=40_000).decode("utf-8", errors="replace") + " " + " ".join(SCRIPTS.values())


def page_view(model, text: str, window: int = 200, greedy: bool = True, seed: int = 0, limit: int = 1 << 16):
    collector = PageCollector("greedy" if greedy else "sampled", limit)
    for batch in decide(model, text_rows([text.encode()], window), greedy, seed, terms=limit):
        collector.add(batch)
    return collector.page()


def strong_policy(w: int = 8):
    model = tiny("learned", w=w)
    model.strategy.proj.weight.data.mul_(100)  # mixing weights that matter
    return model


@pytest.mark.parametrize("greedy", [True, False])
def test_page_terms_reproduce_the_models_decisions(greedy):
    view = page_view(strong_policy(), PAGE_TEXT, greedy=greedy)  # windows: the mixing restarts after each BOS
    assert view.base is not None and len(view.mix[0]) == 7 and len(view.threshold) == len(view.data)
    assert decide_from_terms(view, 0.0) == view.decisions  # sampled: against the replayed draws
    counts = [sum(decide_from_terms(view, d)) for d in (-6.0, -2.0, 0.0, 2.0, 6.0)]
    assert counts == sorted(counts) and counts[0] < counts[-1]


def test_the_page_is_bounded_and_says_what_it_shows():
    view = page_view(tiny("learned"), "abc " * 300, window=101, limit=250)
    assert view.data == ("abc " * 300).encode()[:200]  # whole windows: two of 100 bytes
    assert len(view.decisions) == len(view.base) == len(view.piece_pos) == 200


def node_render(page, offset: float) -> dict:
    """Run the page's script under node with a minimal DOM; the chunks it draws (their text) and
    its stats line."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    harness = r"""
const fs = require('fs'), html = fs.readFileSync(process.argv[1], 'utf8');
const data = /<script type="application\/json" id="data">([\s\S]*?)<\/script>/.exec(html)[1];
const script = /<script>([\s\S]*?)<\/script>/.exec(html)[1];
const el = () => ({children: [], style: {}, dataset: {}, textContent: '', value: '0',
                   appendChild(c) { this.children.push(c); }, addEventListener() {}});
const nodes = {data: {textContent: data}, text: el(), stats: el(), offset: html.includes('id="offset"') ? el() : null};
global.document = {getElementById: id => nodes[id], createElement: el};
global.location = {hash: '#offset=' + process.argv[2], search: ''};
new Function(script)();
console.log(JSON.stringify({chunks: nodes.text.children.map(c => c.children.map(p => p.textContent).join('')),
                            n: nodes.text.dataset.chunks, stats: nodes.stats.textContent}));
"""
    r = subprocess.run([node, "-e", harness, str(page), str(offset)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("greedy", [True, False])
def test_the_page_script_redraws_what_python_computes(tmp_path, greedy):
    view = page_view(strong_policy(), PAGE_TEXT, greedy=greedy)
    page = render_html(view, tmp_path / "p.html")
    for delta in (-3.0, 0.0, 3.0):
        drawn = node_render(page, delta)
        expected = display_chunks(view.data, chunk_starts(view, decide_from_terms(view, delta)))
        assert drawn["chunks"] == [c.text for c in expected] and int(drawn["n"]) == len(expected)
        assert ("sampled" if not greedy else "greedy") in drawn["stats"]
    assert any(c.starts_mid for c in display_chunks(view.data, chunk_starts(view, decide_from_terms(view, 3.0))))


@pytest.mark.parametrize("boundary", ["fixed", "whitespace"])
def test_a_page_without_a_policy_has_no_slider_and_loses_nothing(tmp_path, boundary):
    model = tiny(boundary, rate=0.5)  # fixed at 0.5 cuts inside characters
    view = page_view(model, PAGE_TEXT)
    page = render_html(view, tmp_path / "p.html")
    text = page.read_text()
    assert 'id="offset"' not in text and "http" not in text.split("<script")[1]
    payload = json.loads(re.search(r'id="data">(.*?)</script>', text, re.S).group(1))
    assert base64.b64decode(payload["bytes"]) == PAGE_TEXT.encode()
    assert node_render(page, 0.0)["chunks"] == [
        c.text for c in display_chunks(view.data, chunk_starts(view, view.decisions))
    ]


def test_the_page_escapes_the_text(tmp_path):
    view = page_view(tiny("fixed"), "<b>bold</b> </script><script>alert(1)</script>")
    text = render_html(view, tmp_path / "p.html").read_text()
    assert "&lt;b&gt;" in text and text.count("</script>") == 2 and "<script>alert" not in text


@pytest.mark.parametrize("greedy", [False, True])
def test_the_page_opens_with_the_commands_decisions_and_says_which(tmp_path, capsys, greedy):
    strong_policy().save_pretrained(tmp_path / "m")
    args = [
        "segment",
        str(tmp_path / "m"),
        PAGE_TEXT,
        "--window",
        "200",
        "--seed",
        "3",
        "--html",
        str(tmp_path / "p.html"),
        "--json",
        str(tmp_path / "s.json"),
    ] + (["--greedy"] if greedy else ["--sampled"])
    assert main(args) == 0
    terminal = capsys.readouterr().out
    seg = json.loads((tmp_path / "s.json").read_text())
    page = (tmp_path / "p.html").read_text()
    payload = json.loads(re.search(r'id="data">(.*?)</script>', page, re.S).group(1))
    assert payload["rule"] == seg["rule"] == ("greedy" if greedy else "sampled")
    note = re.search(r'id="note"[^>]*>(.*?)</p>', page).group(1)
    assert ("greedy boundaries" if greedy else "sampled boundaries (seed 3)") in note
    assert f"boundary rate {seg['boundary_rate']:.3f}" in note
    drawn = node_render(tmp_path / "p.html", 0.0)
    assert drawn["chunks"] == [c["text"] for c in seg["chunks"]]  # the terminal's and the JSON's chunks
    assert terminal.rstrip("\n").split("|")[:5] == [c["text"] for c in seg["chunks"]][:5]


def chromium() -> str | None:
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser")) if p), None)


def test_page_slider_recuts_in_headless_chromium(tmp_path):
    """A real browser runs the script at slider offsets preset by #offset=D, as the reference does."""
    browser = chromium()
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium; scripts/test.sh tries)")
    view = page_view(strong_policy(), PAGE_TEXT, greedy=False)
    page = render_html(view, tmp_path / "page.html")
    for delta in (-3.0, 0.0, 3.0):
        r = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                f"--user-data-dir={tmp_path / str(delta)}",
                "--dump-dom",
                f"{page.as_uri()}#offset={delta}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        found = re.search(r'id="text" data-chunks="(\d+)"', r.stdout)
        assert found, r.stdout[-2000:]
        assert int(found.group(1)) == len(chunk_starts(view, decide_from_terms(view, delta)))
