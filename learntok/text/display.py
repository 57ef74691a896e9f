"""Chunks of bytes shown as text, losing nothing (docs/tokenizer.md).

A chunk is what one token reads. Token k is the encoder state at its boundary byte t_k, a causal
summary of the bytes up to and including t_k (learntok.nn.pooling), so the chunk it stands for is
the bytes after the previous boundary through t_k: a chunk *ends* at a boundary byte, and the
next one starts at the byte after it (`chunk_starts`). The first byte of a window starts a chunk
(the bytes before it are read by an earlier window); the bytes after the last boundary are the
chunk the model is still reading.

A boundary may fall inside a multi-byte UTF-8 character: the model decides per byte. A chunk's
display string then shows the cut character once, whole, in the chunk that holds its first
byte, followed by SPLIT_END; the chunk that holds the rest starts with SPLIT_START in its place.
Bytes that are not UTF-8 show as `\\xNN`. Removing the two marks from the joined display strings
gives the text decoded with `errors="backslashreplace"`, every character exactly once; the bytes
themselves are always the chunk's byte span. `display_chunks` is the one function that computes
display strings from (bytes, chunk starts): the terminal, the JSON, the tokenizer API and, through
`char_spans`, the HTML page's script (which mirrors it) all use it.

Terminal output also passes through `escape_controls`: a control character of the text (ESC
above all, which would drive the terminal) shows as its visible picture.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

SPLIT_END = "\u25b8"  # after a character whose bytes continue in the next chunk
SPLIT_START = "\u25c2"  # in place of the bytes that finish a character begun in an earlier chunk
CONTEXT = 3  # bytes beyond either end of a chunk its display may read (a character has at most 4)

# 256-colour terminal backgrounds, alternated chunk by chunk (readable with the default foreground)
_BACKGROUNDS = (24, 58, 53, 22)
RESET = "\x1b[0m"


def background(i: int) -> str:
    """The escape code that starts chunk i's background colour."""
    return f"\x1b[48;5;{_BACKGROUNDS[i % len(_BACKGROUNDS)]}m"


# C0 controls (but newline and tab, which are layout) as their control pictures, DEL as its
# picture, C1 controls (U+0080..U+009F: CSI among them) as \\u escapes.
_CONTROLS = {c: 0x2400 + c for c in range(0x20) if chr(c) not in "\n\t"}
_CONTROLS[0x7F] = 0x2421
_CONTROLS.update({c: f"\\u{c:04x}" for c in range(0x80, 0xA0)})


def escape_controls(text: str) -> str:
    """`text` safe to print on a terminal: control characters shown, never obeyed."""
    return text.translate(_CONTROLS)


def char_spans(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Per byte i, (lead[i], end[i]): the byte span of the character that holds it. Python's
    strict UTF-8 decoder decides what a character is; a byte that is not part of one is a span
    of its own. Both arrays (len(data),) int64."""
    text = data.decode("utf-8", "surrogateescape")  # a byte that is not UTF-8 -> U+DC80..U+DCFF
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    escaped = (cps >= 0xDC80) & (cps <= 0xDCFF)
    width = np.where(escaped, 1, 1 + (cps >= 0x80) + (cps >= 0x800) + (cps >= 0x10000)).astype(np.int64)
    lead = np.repeat(np.cumsum(width) - width, width)  # (len(data),)
    return lead, lead + np.repeat(width, width)


@dataclass(frozen=True, slots=True)
class Chunk:
    start: int  # byte offset of the chunk's first byte in the text
    end: int  # byte offset just past its last byte
    data: bytes  # its bytes: text[start:end]
    text: str  # display string (see the module docstring)
    starts_mid: bool  # its first byte continues a character begun in the previous chunk
    ends_mid: bool  # its last character continues in the next chunk


def chunk_starts(decisions: Sequence[int], offset: int = 0) -> list[int]:
    """Where the chunks of one window start, given its decisions a[i] (0/1, one per byte, BOS
    excluded) and the text offset of its first byte: the first byte, and the byte after each
    boundary byte (a token reads the bytes through its boundary byte; see the module docstring)."""
    n = len(decisions)
    return [offset] + [offset + i + 1 for i, a in enumerate(decisions) if a and i + 1 < n] if n else []


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


def display_chunks(
    data: bytes, starts: Sequence[int], lo: int = 0, hi: int | None = None, base: int = 0
) -> list[Chunk]:
    """The chunks of data[lo:hi] that begin at `starts` (sorted offsets into data, starts[0] ==
    lo; each chunk ends where the next begins, the last at hi). data[:lo] and data[hi:] are
    context only (CONTEXT bytes each side suffice; the text's own ends need none). Offsets in
    the returned chunks are shifted by `base` (where data[0] sits in the whole text)."""
    hi = len(data) if hi is None else hi
    if not len(starts):
        return []
    lead, end = char_spans(data)
    a = np.asarray(starts, dtype=np.int64)
    b = np.append(a[1:], hi)
    chunks = []
    for s, e, lead_s, end_s, lead_l, end_l in zip(
        a.tolist(), b.tolist(), lead[a].tolist(), end[a].tolist(), lead[b - 1].tolist(), end[b - 1].tolist()
    ):
        text, i, j, tail = "", s, e, ""
        if lead_s < s:  # finishes a character begun before
            text, i = SPLIT_START, min(end_s, e)
        if end_l > e:  # its last character goes on after it
            j = lead_l if lead_l >= i else i
            tail = (_decode(data[lead_l:end_l]) if lead_l >= i else "") + SPLIT_END
        chunks.append(Chunk(base + s, base + e, data[s:e], text + _decode(data[i:j]) + tail, lead_s < s, end_l > e))
    return chunks


class ChunkStream:
    """`display_chunks` of a text that arrives in pieces: each chunk is given out as soon as the
    bytes after it that its display may read have arrived. Holds only the open chunk and the
    context, so memory is bounded by the longest chunk, not the text."""

    def __init__(self):
        self.buf = b""  # bytes from the first unfinished chunk's start - CONTEXT to the newest
        self.base = 0  # offset in the text of buf[0]
        self.starts: list[int] = []  # text offsets of the chunks not given out yet (the last is open)

    def feed(self, data: bytes, starts: Iterable[int]) -> list[Chunk]:
        """Append `data` (the next bytes of the text) with the text offsets among them where chunks
        start (the text's first byte always starts one). Returns the chunks now complete."""
        first = self.base + len(self.buf)  # text offset of data[0]
        self.buf += data
        new = sorted(set(starts) | ({first} if data and not self.starts else set()))
        self.starts += [s for s in new if not self.starts or s > self.starts[-1]]
        known = self.base + len(self.buf)
        ready = next((k for k in range(len(self.starts) - 1, 0, -1) if self.starts[k] + CONTEXT <= known), 0)
        return self._give(ready)

    def close(self) -> list[Chunk]:
        """The chunks still held, the last ending at the end of the text."""
        return self._give(len(self.starts), final=True)

    def _give(self, n: int, final: bool = False) -> list[Chunk]:
        """Give out the first n held chunks."""
        if n == 0:
            return []
        stop = self.base + len(self.buf) if final else self.starts[n]
        out = display_chunks(
            self.buf, [s - self.base for s in self.starts[:n]], self.starts[0] - self.base, stop - self.base, self.base
        )
        self.starts = self.starts[n:]
        keep = max(self.starts[0] - CONTEXT, self.base) if self.starts else self.base + len(self.buf)
        self.buf, self.base = self.buf[keep - self.base :], keep
        return out


def render_terminal(chunks: Sequence[Chunk], color: bool, first: int = 0) -> str:
    """Chunks with alternating background colours when `color` (chunk k of the text in colour
    `first + k`), else joined by `|`; control characters escaped."""
    texts = [escape_controls(c.text) for c in chunks]
    if not color:
        return "|".join(texts)
    return "".join(f"{background(first + i)}{t}{RESET}" for i, t in enumerate(texts))


class TextStream:
    """Bytes to terminal text as they come: whole characters, bytes that are not UTF-8 as \\xNN,
    control characters escaped (`learntok sample` without chunk marks)."""

    def __init__(self):
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="backslashreplace")

    def feed(self, data: bytes, final: bool = False) -> str:
        return escape_controls(self.decoder.decode(data, final))


def _width_name(width: int) -> str:
    return "ascii" if width == 1 else f"{width}-byte"


def whole_character_shares(data: bytes, chunks: Sequence[Chunk]) -> dict[str, dict[str, float]]:
    """How a text's chunks sit on its characters, per script class (the byte width of the
    character a chunk ends in: "ascii", "2-byte", "3-byte" (most CJK), "4-byte"): the number of
    chunks, the share that are whole characters (starting at a character's first byte and ending
    at a character's last byte), and where their boundary bytes fall in that character ("at_byte":
    {1: share at its first byte, 2: ..., ...}; a chunk of whole characters ends at byte `width`).
    Bytes that are not UTF-8 count as 1-byte characters of class "ascii"."""
    lead, end = char_spans(data)
    out: dict[str, dict] = {}
    for c in chunks:
        last = c.end - 1
        width = int(end[last] - lead[last])
        row = out.setdefault(_width_name(width), {"chunks": 0, "whole": 0, "at_byte": {}})
        row["chunks"] += 1
        row["whole"] += int(lead[c.start] == c.start and end[last] == c.end)
        k = int(last - lead[last]) + 1
        row["at_byte"][k] = row["at_byte"].get(k, 0) + 1
    return {
        name: {
            "chunks": row["chunks"],
            "whole_share": row["whole"] / row["chunks"],
            "at_byte": {k: n / row["chunks"] for k, n in sorted(row["at_byte"].items())},
        }
        for name, row in sorted(out.items())
    }
