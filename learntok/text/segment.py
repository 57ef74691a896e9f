"""`learntok segment`: a text cut into a model's chunks, on the terminal, as JSON and as an HTML
page, streamed batch by batch (docs/tokenizer.md). The decisions come from learntok.text.windows
(through learntok.Tokenizer, the same code as the API); the display from learntok.text.display.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, TextIO

import torch

from learntok.run.checkpoint import load_run
from learntok.data.dataset import ByteData
from learntok.util.errors import ConfigError, DataError
from learntok.util.files import OutputFile
from learntok.text.display import Chunk, ChunkStream, render_terminal
from learntok.text.page import PageCollector, condition_grid, page_note, render_html
from learntok.run import metrics_log
from learntok.run.rate import CALIBRATION_BYTES
from learntok.text.tokenizer import Tokenizer
from learntok.text.windows import Decided, file_rows, read_pieces, segment_stats, text_rows


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
    """`segment --json PATH`, written as the chunks come: {"chunks": [...], figures...}, through
    the one writer of a user's files (learntok.util.files.OutputFile: put in place by `finish`, so
    a run cut short leaves PATH as it was; a device or pipe written in place)."""

    def __init__(self, path: str | Path):
        self.out = OutputFile(path)
        self.out.write('{"chunks": [')
        self.n = 0

    def add(self, chunks: list[Chunk]) -> None:
        for c in chunks:
            self.out.write(("," if self.n else "") + "\n  " + json.dumps(chunk_record(c)))
            self.n += 1

    def finish(self, figures: dict) -> None:
        self.out.write("\n], " + json.dumps(figures, indent=2)[1:] + "\n")
        self.out.commit()

    def abandon(self) -> None:
        self.out.abandon()


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


@dataclass
class SegmentRequest:
    """How `learntok segment` cuts a text and what it writes besides the terminal."""

    greedy: bool = True  # decide p > 0.5 (the default, as the API does); False: sampled under `seed`
    seed: int = 0  # of the sampled boundaries
    rate: float | None = None  # cut at this boundary rate (docs/rate.md); None: the model's own
    rate_mode: str | None = None  # learntok.run.rate.RATE_MODES; None: online where the strategy has it
    json_path: str | None = None  # --json: chunks and figures (JsonChunks)
    html_path: str | None = None  # --html: the page with its compression slider (learntok.text.page)
    extra: dict = field(default_factory=dict)  # figures added to the JSON (the run's last validation)


def segment_to(
    tok: Tokenizer,
    rows: Iterable[tuple[int, int, bytes]],
    head: bytes,
    request: SegmentRequest,
    out: TextIO,
    err: TextIO,
) -> dict:
    """`learntok segment`'s work on one text, given as its windows (`rows`, windows.text_rows or
    file_rows) and its first bytes (`head`: what `request.rate` is calibrated on, held by its
    rate_mode, learntok.run.rate.set_rate): the rate line to `err`, the chunks to `out` (colours on
    a terminal), then --json (with the request's `extra` figures) and --html. Returns the
    figures: segment_stats, rule, seed, window, rate_setting."""
    greedy, seed = request.greedy, request.seed
    with tok.at_rate(request.rate, greedy, seed, head, request.rate_mode) as setting:
        if setting is not None:
            print(setting.describe(), file=err)
        page = PageCollector("greedy" if greedy else "sampled") if request.html_path else None
        json_out = JsonChunks(request.json_path) if request.json_path else None
        try:
            decided = tok.decide(rows, greedy, seed, terms=page.limit if page else 0)
            stats = stream_segments(decided, out, out.isatty(), json_out, page.add if page else None)
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
        "rule": "greedy" if greedy else "sampled",
        "seed": seed,
        "window": tok.window,
        "rate_setting": asdict(setting) if setting else None,
    }
    if page is not None:
        write_page(page, request, setting, tok.model.cfg, stats)
    if json_out is not None:
        json_out.finish({**figures, **request.extra})
    return figures


def write_page(page: PageCollector, request: SegmentRequest, setting, model_cfg, stats: dict) -> None:
    """--html: the page of the batches `page` collected, with its note on what it shows."""
    view = page.page()
    described = setting.describe() if setting else None
    view.note = page_note(
        view,
        request.seed,
        described,
        model_cfg.target_rate,
        stats["boundary_rate"],
        stats["n_bytes"],
        model_cfg.boundary,
    )
    render_html(view, request.html_path)


def segment_command(
    run: str | Path,
    text: bytes | None,
    file: str | None,
    held_out: bool,
    window: int,
    request: SegmentRequest,
    out: TextIO,
    err: TextIO,
) -> dict:
    """`learntok segment RUN`: one of a `text`, a `file` (streamed window by window) or a
    `held_out` passage of the run's test split (beside the run's last validation figures), cut
    in windows of `window` bytes as `request` says (`segment_to`), then a line of figures (to
    `out` for the held-out passage, `err` else). Returns segment_to's figures."""
    if sum(x is not None and x is not False for x in (text, file, held_out)) != 1:
        raise ConfigError("give one of: a text, --file F, --held-out")
    model, run_cfg = load_run(run)
    if held_out:
        if run_cfg is None:
            raise ConfigError(f"{run} holds no run config (data source): --held-out needs a run or checkpoint")
        text, run_figures = held_out_passage(ByteData.from_config(run_cfg.data)), last_validation(run)
        request = replace(request, extra={**request.extra, **run_figures})
        print("-- a held-out passage (test split), cut into the model's chunks --", file=out)
    if file:  # streamed, window by window
        rows, head = file_rows(file, window), next(read_pieces(file, CALIBRATION_BYTES), b"")
    else:
        rows, head = text_rows([text], window), text[:CALIBRATION_BYTES]
    figures = segment_to(Tokenizer(model, run_cfg, window=window), rows, head, request, out, err)
    if held_out:
        print(held_out_line(figures, run_figures), file=out)
    else:
        shown = {k: v for k, v in figures.items() if k != "rate_setting"}
        print(" ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in shown.items()), file=err)
    if request.html_path:
        print(f"wrote {request.html_path}", file=err)
    return figures


def held_out_line(figures: dict, run: dict) -> str:
    """The held-out passage's figures beside the run's last validation figures, each that the
    run's log records (a model folder, or a run not yet validated, records none: never `nan`)."""
    names = (
        ("val_bpb", "bits per byte"),
        ("val_boundary_rate", "boundary rate"),
        ("val_whitespace_rate", "whitespace rate"),
    )
    recorded = [f"{words} {run[key]:.3f}" for key, words in names if key in run]
    return (
        f"-- this passage: boundary rate {figures['boundary_rate']:.3f}, whitespace rate "
        f"{figures['whitespace_rate']:.3f} | "
        + (
            f"the run at step {run.get('step', '?')}: validation {', '.join(recorded)}"
            if recorded
            else "no validation of the run recorded (no metrics log beside its checkpoint)"
        )
    )


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
    """The run's last validation figures in its metrics log (step, val_bpb, val_boundary_rate,
    val_whitespace_rate); empty when there are none (a model or checkpoint folder, a run that
    logged nothing yet). A log that is there is read whole: a bad row is an error."""
    val = metrics_log.last_logged(run_dir, "val") or {}
    return {k: val[k] for k in ("step", "val_bpb", "val_boundary_rate", "val_whitespace_rate") if k in val}
