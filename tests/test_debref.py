"""The Debian Reference built-ins (debref-*): each loads through the data path as UTF-8 text of its
own language and script, with useful splits; and the HTML-to-text rules of the script that builds
them (scripts/build_debian_reference.py). Fast, CPU only."""

import importlib.util
import sys
from pathlib import Path

import pytest

from learntok.data import ByteData, DataConfig, load_documents
from learntok.data.corpora import BUILTINS, DEBIAN_REFERENCE

ROOT = Path(__file__).resolve().parents[1]
# Letters only one language of the table uses, and the kana and Han blocks.
SCRIPTS = {
    "de": set("äöüßÄÖÜ"),
    "fr": set("èàêçùôîœÈÀÇ"),
    "es": set("ñóáíúÑÓÁÍÚ"),
    "kana": {chr(c) for c in range(0x3040, 0x3100)},
    "han": {chr(c) for c in range(0x4E00, 0xA000)},
}
# corpus, {script: least share of its letters}, scripts it must not hold (under 0.1% of letters)
LANGUAGE = [
    ("debref-de", {"de": 0.005}, ("fr", "es", "kana", "han")),
    ("debref-fr", {"fr": 0.004}, ("de", "es", "kana", "han")),
    ("debref-es", {"es": 0.005}, ("de", "fr", "kana", "han")),
    ("debref-ja", {"kana": 0.2, "han": 0.05}, ("de", "fr", "es")),
    ("debref-zh", {"han": 0.3}, ("de", "fr", "es", "kana")),
]


def test_the_table_covers_every_debian_reference_builtin():
    assert sorted(name for name, _, _ in LANGUAGE) == sorted(DEBIAN_REFERENCE)
    assert set(DEBIAN_REFERENCE) <= set(BUILTINS)


@pytest.mark.parametrize("name, present, absent", LANGUAGE)
def test_text_is_utf8_of_its_language(name, present, absent):
    docs = load_documents(name)
    letters = [c for c in "".join(d.decode("utf-8") for d in docs) if c.isalpha()]
    share = {script: sum(c in SCRIPTS[script] for c in letters) / len(letters) for script in SCRIPTS}
    assert all(share[s] >= least for s, least in present.items()), share
    assert all(share[s] < 0.001 for s in absent), share
    assert not any(b"\x1f" in d or b"</p>" in d or b'class="' in d for d in docs)  # no markup left


@pytest.mark.parametrize("name", DEBIAN_REFERENCE)
def test_splits_are_disjoint_and_big_enough(name):
    data = ByteData.from_config(DataConfig(source=name))
    docs = load_documents(name)
    splits = {split: list(data.documents(split)) for split in ("train", "val", "test")}
    assert sum(map(len, splits.values())) == len(docs) == len(set(docs))  # every section once
    assert set(splits["train"]).isdisjoint(splits["val"]) and set(splits["train"]).isdisjoint(splits["test"])
    assert set(splits["val"]).isdisjoint(splits["test"])
    for split in ("val", "test"):
        assert len(splits[split]) >= 10 and sum(map(len, splits[split])) >= 15_000, (split, len(splits[split]))


# --- the build script ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def script():
    """scripts/build_debian_reference.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "build_debian_reference", ROOT / "scripts" / "build_debian_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves annotations through sys.modules
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


PAGE = """<?xml version="1.0" encoding="UTF-8"?>
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Kapitel 1</title></head><body>
<div class="navheader"><a href="pr01.de.html"><img src="prev.png" alt="Zur&#252;ck"/></a></div>
<div class="chapter"><div class="titlepage"><h1 class="title"><a id="c1"/>Kapitel 1. Titel</h1></div>
<div class="toc"><p><strong>Inhaltsverzeichnis</strong></p></div>
<div class="section"><div class="titlepage"><h2 class="title"><a id="s1"/>1.1. Erster</h2></div>
<p>Ein Absatz &amp; ein
<code class="literal">Befehl</code>   &#252;ber zwei Zeilen.</p>
<p>これは
日本語です。 Debian
は良い。</p>
<pre class="screen">$ ls  -l
  total 0   </pre>
<div class="table"><table><tr><th> Paket </th><th>Gr&#246;&#223;e</th></tr>
<tr><td><a href="p">mc</a></td><td>1482</td></tr></table></div>
<ul><li><p>eins</p></li><li>zwei</li></ul>
<p>This paragraph has not been translated into German yet.</p>
</div>
<div class="section"><h2 class="title">1.2. Zweiter</h2><p>This one is not translated at all, nothing else.</p></div>
<div class="section"><h2 class="title">1.3. Dritter</h2><p>Kurz.</p></div>
</div><div class="navfooter"><p>Weiter</p></div></body></html>"""
UNTRANSLATED = {
    "This paragraph has not been translated into German yet.",
    "This one is not translated at all, nothing else.",
}


def test_page_to_sections_plain_text(script):
    sections = script.page_sections(PAGE)
    assert [title for title, _ in sections] == ["1.1. Erster", "1.2. Zweiter", "1.3. Dritter"]
    assert sections[0][1] == (
        "Kapitel 1. Titel\n\n1.1. Erster\n\n"
        "Ein Absatz & ein Befehl über zwei Zeilen.\n\n"  # Latin line break: a space
        "これは日本語です。 Debian は良い。\n\n"  # between wide characters: nothing
        "$ ls  -l\n  total 0\n\n"  # listing verbatim, trailing spaces cut
        "Paket\tGröße\nmc\t1482\n\n"  # a row a line, a tab between cells
        "eins\nzwei\n\n"  # a list item a line
        "This paragraph has not been translated into German yet."
    )
    assert sections[2][1] == "1.3. Dritter\n\nKurz."


def test_untranslated_blocks_are_dropped_and_an_emptied_section_opens_the_next(script):
    sections = script.page_sections(PAGE, UNTRANSLATED)
    assert [title for title, _ in sections] == ["1.1. Erster", "1.3. Dritter"]
    assert sections[0][1].endswith("eins\nzwei")
    assert sections[1][1] == "1.2. Zweiter\n\n1.3. Dritter\n\nKurz."
    short = {"Kurz."}  # under UNTRANSLATED_WORDS words: a name or a number, the same in every language
    assert script.page_sections(PAGE, short) == script.page_sections(PAGE)
