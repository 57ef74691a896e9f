"""Chunks shown as text lose nothing: every byte is in exactly one chunk, every character is
shown exactly once (a character cut by a boundary once, marked), the stream gives what the whole
text gives, and terminal output never carries the text's control characters raw."""

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learntok.text.display import (
    SPLIT_END,
    SPLIT_START,
    ChunkStream,
    TextStream,
    char_spans,
    display_chunks,
    escape_controls,
    render_terminal,
)

SCRIPTS = {
    "accents": "Déjà vu, l'été à Noël: où est la fenêtre? Ça va.",
    "cjk": "漢字と仮名の混じった文章。中文分词很难。",
    "cyrillic": "Съешь же ещё этих мягких французских булок.",
    "emoji": "ok 😀👍🏽 family 👨‍👩‍👧 flag 🇫🇷!",
    "combining": "e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 Z\u0351\u0352\u0353",
    "mixed": "naïve café — 東京 Москва 🎉\tend\n",
}


def cuts(data: bytes, how: str, seed: int = 0) -> list[int]:
    """Chunk starts: every byte (a boundary inside every character), random, or none."""
    if how == "every":
        return list(range(len(data)))
    if how == "none":
        return [0] if data else []
    rng = random.Random(seed)
    return [0] + sorted(i for i in range(1, len(data)) if rng.random() < 0.4) if data else []


def shown_once(chunks) -> str:
    return "".join(c.text for c in chunks).replace(SPLIT_START, "").replace(SPLIT_END, "")


@pytest.mark.parametrize("how", ["every", "random", "none"])
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_script_round_trips_with_cuts_inside_characters(name, how):
    data = SCRIPTS[name].encode()
    chunks = display_chunks(data, cuts(data, how))
    assert b"".join(c.data for c in chunks) == data
    assert [c.data for c in chunks] == [data[c.start : c.end] for c in chunks]
    assert shown_once(chunks) == SCRIPTS[name]  # each character once, none replaced
    assert "\ufffd" not in "".join(c.text for c in chunks)
    if how == "every" and name != "accents":
        assert any(c.starts_mid for c in chunks) and any(c.ends_mid for c in chunks)


def test_a_cut_character_is_shown_once_and_marked():
    data = "déjà".encode()  # é = c3 a9, à = c3 a0
    chunks = display_chunks(data, [0, 2, 5])
    assert [c.text for c in chunks] == ["d\u00e9" + SPLIT_END, SPLIT_START + "j\u00e0" + SPLIT_END, SPLIT_START]
    assert [(c.starts_mid, c.ends_mid) for c in chunks] == [(False, True), (True, True), (True, False)]
    emoji = "😀".encode()  # 4 bytes in 4 chunks
    assert [c.text for c in display_chunks(emoji, [0, 1, 2, 3])] == [
        "😀" + SPLIT_END,
        SPLIT_START + SPLIT_END,
        SPLIT_START + SPLIT_END,
        SPLIT_START,
    ]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60), st.randoms(use_true_random=False))
def test_any_bytes_and_any_cuts_lose_nothing(data, rnd):
    starts = [0] + sorted(i for i in range(1, len(data)) if rnd.random() < 0.5) if data else []
    chunks = display_chunks(data, starts)
    assert b"".join(c.data for c in chunks) == data
    if SPLIT_START.encode() not in data and SPLIT_END.encode() not in data:
        assert shown_once(chunks) == data.decode("utf-8", "backslashreplace")
    lead, end = char_spans(data)
    assert all(lead[i] <= i < end[i] for i in range(len(data)))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40).map(str.encode) | st.binary(max_size=40), st.randoms(use_true_random=False))
def test_the_stream_gives_what_the_whole_text_gives(data, rnd):
    """Fed in pieces of any size (one byte, as `sample` does, or windows, as `segment --file`)."""
    starts = [0] + sorted(i for i in range(1, len(data)) if rnd.random() < 0.3) if data else []
    stream, got, i = ChunkStream(), [], 0
    while i < len(data):
        n = rnd.randint(1, 7)
        got += stream.feed(data[i : i + n], [s for s in starts if i <= s < i + n])
        i += n
    got += stream.close()
    assert got == display_chunks(data, starts)


def test_the_stream_holds_the_open_chunk_and_its_context_only():
    stream = ChunkStream()
    for i in range(10_000):
        stream.feed(b"abcd", [4 * i, 4 * i + 2])
    assert len(stream.buf) <= 2 + 3 + 4


CONTROLS = [
    ("\x1b[31m", "\u241b[31m"),
    ("\x00", "\u2400"),
    ("\x07", "\u2407"),
    ("\r", "\u240d"),
    ("\x7f", "\u2421"),
    ("\x9b", "\\u009b"),
    ("\x85", "\\u0085"),
    ("a\tb\nc", "a\tb\nc"),
    ("é", "é"),
]


@pytest.mark.parametrize("raw, shown", CONTROLS)
def test_control_characters_are_shown_not_obeyed(raw, shown):
    assert escape_controls(raw) == shown


@pytest.mark.parametrize("color", [False, True])
def test_terminal_output_carries_no_escape_from_the_text(color):
    data = "red \x1b[31mALERT\x1b[0m \x1b]0;title\x07 \x9b2J done".encode()
    out = render_terminal(display_chunks(data, cuts(data, "random")), color=color)
    text = re.sub(r"\x1b\[48;5;\d+m|\x1b\[0m", "", out) if color else out.replace("|", "")  # our own codes out
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    assert text == escape_controls(data.decode())
    stream = TextStream()
    text = "".join(stream.feed(data[i : i + 1]) for i in range(len(data))) + stream.feed(b"", final=True)
    assert "\x1b" not in text and "\u241b[31mALERT" in text
