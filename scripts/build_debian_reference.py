"""Rebuild the `debref-*` built-in corpora (learntok/corpora/debref-NAME.jsonl.gz) from Debian's
debian-reference-* packages: the Debian Reference manual (version 2.100) in its translations.

    apt-get download debian-reference-{de,fr,ja,zh-cn,es,en}
    for deb in debian-reference-*.deb; do dpkg-deb -x "$deb" root/; done
    python scripts/build_debian_reference.py root/usr/share/debian-reference

Every language of LANGUAGES whose pages are in the folder is written; the English edition is only
read to recognise untranslated text. The pages are read in the manual's order (preface, chapters
1-12, appendix; the index page is a table of contents) and every heading (h1-h4) starts a
document: one JSON line per section, {"title": "ch03 3.1.2. Stufe 2: der Bootloader", "text": ...}.

The text is the page as a browser shows it, as plain UTF-8 (html.parser): navigation and tables
of contents left out, the heading first, a blank line between paragraphs, one line per list item
and table row (cells separated by a tab), terminal listings (<pre>) verbatim. Inside a paragraph
a run of white space is one space, or nothing where a source line break falls between two East
Asian wide characters (a browser joins those lines without a space). A paragraph, list item or
table row that the translators have not reached (it reads exactly as in the English edition) is
dropped (`untranslated`); a section left with only its heading opens the next one.
The gzip header carries no time stamp, so the same packages give the same bytes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "learntok" / "corpora"
LANGUAGES = {"de": "de", "fr": "fr", "ja": "ja", "zh-cn": "zh", "es": "es"}  # package suffix -> corpus debref-NAME
PAGE_ORDER = ("pr", "ch", "ap")  # preface, chapters, appendix: the manual's reading order
SKIP_CLASSES = {"navheader", "navfooter", "toc", "list-of-tables"}  # divs that are navigation, not text
SKIP_TAGS = {"head", "script", "style"}
HEADINGS = {"h1", "h2", "h3", "h4"}
PARAGRAPH_TAGS = {
    "p",
    "div",
    "pre",
    "table",
    "blockquote",
    "dl",
    "ul",
    "ol",
    "hr",
} | HEADINGS  # blank line before and after
LINE_TAGS = {"li", "dt", "dd", "tr", "br"}  # a line break before and after
CELL_TAGS = {"td", "th"}
UNTRANSLATED_WORDS = 8  # a block this long that reads as in English is untranslated, not a name or a number
_CELL = "\x1f"  # marks a cell boundary inside a row until the row's white space is normalised
_SPACE = re.compile(r"\s+")


def _wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in "WF"


def normalise(text: str) -> str:
    """Inline text as a browser lays it out: each run of white space one space, or nothing where
    it holds a line break between two wide (CJK) characters; stripped."""

    def space(m: re.Match) -> str:
        before, after = m.string[m.start() - 1 : m.start()], m.string[m.end() : m.end() + 1]
        joined = "\n" in m.group() and before and after and _wide(before) and _wide(after)
        return "" if joined else " "

    return _SPACE.sub(space, text).strip()


@dataclass(frozen=True)
class Block:
    gap: str  # the break before it: "\n" (a line: list item, table row) or "\n\n" (a paragraph)
    text: str  # its text, normalised (verbatim for a listing)
    verbatim: bool  # a terminal listing (<pre>)


class _Page(HTMLParser):
    """One page of the manual -> `sections`: (heading, its blocks) per section, in page order."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.sections: list[tuple[str, list[Block]]] = [("", [])]  # (heading, its blocks)
        self.stack: list[tuple[str, bool]] = []  # open tags and whether each one is skipped
        self.inline: list[str] = []  # text of the block being read
        self.gap = ""  # the break ("\n" or "\n\n") owed before the next block
        self.heading: list[str] | None = None  # text of the heading being read

    @property
    def skipping(self) -> bool:
        return bool(self.stack) and self.stack[-1][1]

    def handle_starttag(self, tag, attrs):
        classes = set((dict(attrs).get("class") or "").split())
        skip = self.skipping or tag in SKIP_TAGS or (tag == "div" and bool(classes & SKIP_CLASSES))
        if not skip and tag in HEADINGS:
            self.flush("\n\n")
            self.heading = []
        elif not skip and tag in CELL_TAGS:
            self.inline.append(_CELL)
        elif not skip and (tag in PARAGRAPH_TAGS or tag in LINE_TAGS):
            self.flush(self.gap_of(tag))
        self.stack.append((tag, skip))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1][0] != tag:  # the pages are XHTML: every tag is closed in order
            raise ValueError(
                f"</{tag}> at line {self.getpos()[0]} does not close <{self.stack[-1][0] if self.stack else ''}>"
            )
        _, skip = self.stack.pop()
        if skip:
            return
        if tag in HEADINGS:
            title = normalise("".join(self.heading))
            self.heading = None
            self.sections.append((title, []))
            self.inline = [title]
            self.flush("\n\n")
        elif tag in PARAGRAPH_TAGS or tag in LINE_TAGS:
            self.flush(self.gap_of(tag), verbatim=tag == "pre")

    def gap_of(self, tag: str) -> str:
        """The break around a block `tag` opened or closed inside the open tags: a line for a list
        item or table row and for a paragraph inside a list item, else a blank line."""
        in_item = bool(self.stack) and self.stack[-1][0] in ("li", "dd")
        return "\n" if tag in LINE_TAGS or (tag == "p" and in_item) else "\n\n"

    def handle_data(self, data):
        if not self.skipping:
            (self.inline if self.heading is None else self.heading).append(data)

    def flush(self, gap: str, verbatim: bool = False) -> None:
        """End the block being read: append its text, after the break owed, to the current
        section, and owe at least `gap` before the next block."""
        raw, self.inline = "".join(self.inline), []
        if verbatim:
            text = "\n".join(line.rstrip() for line in raw.strip("\n").splitlines())
        else:
            text = "\t".join(normalise(cell) for cell in raw.strip(_CELL + " \t\n").split(_CELL))
        if text.strip():
            self.sections[-1][1].append(Block(self.gap, text, verbatim))
            self.gap = ""
        if len(gap) > len(self.gap):
            self.gap = gap


def page_blocks(html: str) -> list[tuple[str, list[Block]]]:
    """(heading, its blocks, the heading first) of each section of one page, in page order."""
    page = _Page()
    page.feed(html)
    page.close()
    page.flush("")
    return page.sections


def untranslated(block: Block, english: Collection[str]) -> bool:
    """A paragraph, list item or table row of at least UNTRANSLATED_WORDS words that reads exactly
    as in the English edition: prose the translators have not reached yet (a listing is the same in
    every language and stays)."""
    return not block.verbatim and len(block.text.split()) >= UNTRANSLATED_WORDS and block.text in english


def page_sections(html: str, english: Collection[str] = ()) -> list[tuple[str, str]]:
    """(heading, text) of each section of one page, in page order, `untranslated` blocks dropped.
    A section left with only its heading (a chapter title right before its first section, or a
    section not translated at all) opens the next section's text."""
    sections, carried = [], []
    for title, blocks in page_blocks(html):
        blocks = [b for b in blocks if not untranslated(b, english)]
        if blocks and not (len(blocks) == 1 and title and blocks[0].text == title):
            sections.append((title, carried + blocks))
            carried = []
        else:
            carried += blocks
    if carried:
        sections.append(("", carried))
    return [(title, "".join((b.gap if i else "") + b.text for i, b in enumerate(blocks))) for title, blocks in sections]


def english_blocks(folder: Path) -> set[str]:
    """The text of every non-listing block of the English edition (debian-reference-en)."""
    pages = manual_pages(folder, "en")
    if not pages:
        sys.exit(f"build_debian_reference: no English pages (*.en.html, package debian-reference-en) under {folder}")
    return {
        b.text
        for page in pages
        for _, blocks in page_blocks(page.read_text(encoding="utf-8"))
        for b in blocks
        if not b.verbatim
    }


def manual_pages(folder: Path, suffix: str) -> list[Path]:
    """The manual's pages in one language, in reading order (preface, chapters, appendix)."""
    pages = [p for p in folder.glob(f"*.{suffix}.html") if p.name[:2] in PAGE_ORDER]
    return sorted(pages, key=lambda p: (PAGE_ORDER.index(p.name[:2]), p.name))


def build(folder: Path, suffix: str, out: Path, english: Collection[str]) -> tuple[int, int]:
    """Write one language's corpus to `out`, untranslated blocks dropped; (documents, bytes of text)."""
    docs, size = 0, 0
    with gzip.GzipFile(out, "wb", compresslevel=9, mtime=0) as f:
        for page in manual_pages(folder, suffix):
            stem = page.name.split(".")[0]
            for title, text in page_sections(page.read_text(encoding="utf-8"), english):
                record = {"title": f"{stem} {title}".strip(), "text": text}
                f.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
                docs, size = docs + 1, size + len(text.encode("utf-8"))
    return docs, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="usr/share/debian-reference of the extracted packages")
    parser.add_argument(
        "--out", type=Path, default=OUT, help="folder for debref-NAME.jsonl.gz (default: the package's corpora)"
    )
    args = parser.parse_args()
    found = [s for s in LANGUAGES if manual_pages(args.folder, s)]
    if not found:
        sys.exit(f"build_debian_reference: no pages of {', '.join(LANGUAGES)} under {args.folder}")
    english = english_blocks(args.folder)
    for suffix in found:
        out = args.out / f"debref-{LANGUAGES[suffix]}.jsonl.gz"
        docs, size = build(args.folder, suffix, out, english)
        print(f"{out}: {docs} sections, {size:,} bytes of text, {out.stat().st_size:,} bytes compressed")


if __name__ == "__main__":
    main()
