"""`learntok segment`: a text cut into a model's chunks, on the terminal, as JSON and as an HTML
page, streamed batch by batch (docs/tokenizer.md). The decisions come from learntok.windows
(through learntok.Tokenizer, the same code as the API); the display from learntok.display.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Iterable, TextIO

import torch

from learntok.data import ByteData, DataError
from learntok.display import Chunk, ChunkStream, display_chunks, render_terminal
from learntok.objective import boundary_rates
from learntok.page import PageCollector, condition_grid, page_note, render_html
from learntok.plots import read_metrics
from learntok.runfolder import METRICS
from learntok.tokenizer import Tokenizer
from learntok.windows import BATCH_BYTES, Decided, decide, text_rows


def segment_stats(counts: torch.Tensor, n_chunks: int) -> dict[str, float]:
    """boundary_rate (the model's boundaries per byte), whitespace_rate, n_bytes, n_chunks (every
    window's first byte starts a chunk, so n_chunks may exceed boundaries by a window count)."""
    rates = {k: float(v) for k, v in boundary_rates(counts).items()}
    return {**rates, "n_bytes": int(counts[1]), "n_chunks": n_chunks}


def segment_text(
    model,
    text: str | bytes,
    greedy: bool = False,
    seed: int = 0,
    window: int | None = None,
    batch_bytes: int = BATCH_BYTES,
    full_forward: bool = False,
) -> tuple[list[Chunk], dict[str, float]]:
    """Segment one text (one window without `window`). Returns (chunks, segment_stats)."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    counts, starts = torch.zeros(4, dtype=torch.float64), []
    for d in decide(model, text_rows([data], window), greedy, seed, batch_bytes, full_forward=full_forward):
        counts += d.counts
        starts += [s for w in d.windows for s in w.starts]
    chunks = display_chunks(data, starts)
    return chunks, segment_stats(counts, len(chunks))


def chunk_record(c: Chunk) -> dict:
    """A chunk in `segment --json`: byte offsets, its bytes (base64) and the display string."""
    return {
        "start": c.start,
        "end": c.end,
        "bytes": base64.b64encode(c.data).decode("ascii"),
        "text": c.text,
        "starts_mid": c.starts_mid,
        "ends_mid": c.ends_mid,
    }


class JsonChunks:
    """`segment --json PATH`, written as the chunks come: {"chunks": [...], figures...}. Into a
    temporary file beside PATH, renamed over it by `finish` (a run cut short leaves PATH as it was).
    A PATH that exists and is no regular file (a pipe, /dev/stdout, /dev/full) is written directly:
    a rename would replace the device or pipe itself."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            self.tmp = self.path
            self.f = open(self.path, "w", encoding="utf-8")
        else:
            self.tmp = self.path.absolute().parent / f".{self.path.name}.tmp-{secrets.token_hex(4)}"
            self.f = open(self.tmp, "x", encoding="utf-8")  # a new file, with the user's umask
        self.f.write('{"chunks": [')
        self.n = 0

    def add(self, chunks: list[Chunk]) -> None:
        for c in chunks:
            self._write(("," if self.n else "") + "\n  " + json.dumps(chunk_record(c)))
            self.n += 1

    def finish(self, figures: dict) -> None:
        self._write("\n], " + json.dumps(figures, indent=2)[1:] + "\n", close=True)
        if self.tmp != self.path:
            os.replace(self.tmp, self.path)

    def _write(self, text: str, close: bool = False) -> None:
        """Write (and close); a failed write (disk full) names PATH, and what it wrote goes."""
        try:
            self.f.write(text)
            if close:
                self.f.close()
        except OSError as e:
            self.abandon()
            raise OSError(e.errno, e.strerror, str(self.path)) from None

    def abandon(self) -> None:
        try:
            self.f.close()
        except OSError:  # its last flush may fail: the disk is full
            pass
        if self.tmp != self.path:
            Path(self.tmp).unlink(missing_ok=True)


def stream_segments(
    decided: Iterable[Decided],
    out: TextIO,
    color: bool,
    json_out: JsonChunks | None = None,
    on_batch: Callable[[Decided], None] | None = None,
) -> dict[str, float]:
    """Print one text's chunks to `out` as the batches come (colours when `color`, else `|`
    between chunks; control characters escaped), add them to `json_out`, hand each batch to
    `on_batch` (the HTML page). Memory is bounded by a batch, not the text. Returns segment_stats."""
    stream, counts, n = ChunkStream(), torch.zeros(4, dtype=torch.float64), 0

    def emit(chunks: list[Chunk]) -> None:
        nonlocal n
        if chunks:
            out.write(("|" if n and not color else "") + render_terminal(chunks, color, first=n))
            out.flush()
            if json_out is not None:
                json_out.add(chunks)
            n += len(chunks)

    for batch in decided:
        counts += batch.counts
        if on_batch is not None:
            on_batch(batch)
        emit([c for w in batch.windows for c in stream.feed(w.data, w.starts)])
    emit(stream.close())
    out.write("\n")
    return segment_stats(counts, n)


def segment_to(
    tok: Tokenizer,
    rows: Iterable[tuple[int, int, bytes]],
    head: bytes,
    greedy: bool,
    seed: int,
    rate: float | None,
    out: TextIO,
    err: TextIO,
    json_path: str | None = None,
    html_path: str | None = None,
    extra: dict | None = None,
    rate_mode: str | None = None,
) -> dict:
    """`learntok segment`'s work on one text, given as its windows (`rows`, windows.text_rows or
    file_rows) and its first bytes (`head`: what a bare model folder calibrates `rate` on; the rate
    held by `rate_mode`, learntok.rate.set_rate): the
    rate line to `err`, the chunks to `out` (colours on a terminal), then --json (with `extra`
    figures) and --html. Returns the figures: segment_stats, rule, seed, window, rate_setting."""
    rule = "greedy" if greedy else "sampled"
    with tok.at_rate(rate, greedy, seed, head, rate_mode) as setting:
        if setting is not None:
            print(setting.describe(), file=err)
        page = PageCollector(rule) if html_path else None
        json_out = JsonChunks(json_path) if json_path else None
        try:
            stats = stream_segments(
                tok.decide(rows, greedy, seed, terms=page.limit if page else 0),
                out,
                out.isatty(),
                json_out,
                page.add if page else None,
            )
        except BaseException:
            if json_out is not None:
                json_out.abandon()
            raise
        if page is not None and page.view.base is not None:  # at the rate set: a conditioned policy's grid
            page.view.conditions = condition_grid(tok.model.strategy, page.view.offset)
    if setting is not None and setting.held_on(stats["boundary_rate"]):
        print(setting.held_on(stats["boundary_rate"]), file=err)
    figures = {
        **stats,
        "rule": rule,
        "seed": seed,
        "window": tok.window,
        "rate_setting": asdict(setting) if setting else None,
    }
    if page is not None:
        view = page.page()
        view.note = page_note(
            view,
            seed,
            setting.describe() if setting else None,
            tok.model.cfg.target_rate,
            stats["boundary_rate"],
            stats["n_bytes"],
            tok.model.cfg.boundary,
        )
        render_html(view, html_path)
    if json_out is not None:
        json_out.finish({**figures, **(extra or {})})
    return figures


def held_out_passage(data: ByteData, n_bytes: int = 700, max_docs: int = 1000) -> bytes:
    """A passage of the test split (never trained on), starting at a line, from the longest of
    the split's first `max_docs` documents (a bounded read, whatever the split's size)."""
    doc = max((d for d in data.documents("test", limit=max_docs) if d.strip()), key=len, default=b"")
    if not doc:
        raise DataError("the test split holds no text to show")
    start = doc.find(b"\n", len(doc) // 3) + 1
    passage = doc[start : start + n_bytes]
    cut = passage.rfind(b"\n")
    return passage[:cut] if cut > n_bytes // 2 else passage


def last_validation(run_dir: str | Path) -> dict[str, float]:
    """The run's last validation figures in metrics.jsonl (step, val_bpb, val_boundary_rate,
    val_whitespace_rate); empty when there are none (a model or checkpoint folder, a run that
    logged nothing yet). A metrics file that is there is read whole: a bad row is an error."""
    path = Path(run_dir) / METRICS
    if not path.is_file() or not path.stat().st_size:
        return {}
    _, val = read_metrics(path)
    keys = ("step", "val_bpb", "val_boundary_rate", "val_whitespace_rate")
    return {k: val[-1][k] for k in keys if k in val[-1]} if val else {}
