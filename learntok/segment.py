"""Show how a model cuts text into tokens: chunks of bytes, for the terminal or HTML.

A boundary at byte position t (t >= 1; position 0 is BOS) means a chunk starts at byte t of
the sequence, i.e. at text byte t - 1. The first chunk always starts at the first byte.
"""
from __future__ import annotations

import html
from pathlib import Path

import torch

from learntok.data import ByteData, DataError
from learntok.data.vocab import encode
from learntok.objective import boundary_stats
from learntok.plots import read_metrics
from learntok.runtime import inference

# 256-colour terminal backgrounds, alternated chunk by chunk (readable with the default foreground)
_BACKGROUNDS = (24, 58, 53, 22)
RESET = "\x1b[0m"


def background(i: int) -> str:
    """The escape code that starts chunk i's background colour."""
    return f"\x1b[48;5;{_BACKGROUNDS[i % len(_BACKGROUNDS)]}m"
_HTML_COLOURS = ("#dbeafe", "#fef3c7", "#fce7f3", "#dcfce7")


def chunks_from_boundaries(data: bytes, boundaries: torch.Tensor) -> list[bytes]:
    """Cut `data` where boundaries (T,) = (BOS + len(data),) are 1; BOS's decision is dropped."""
    starts = (boundaries[1:] > 0.5).nonzero().flatten().tolist()  # text byte offsets where chunks start
    cuts = sorted(set([0] + starts)) + [len(data)]
    return [data[a:b] for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def segment_text(model, text: str | bytes, greedy: bool = False, seed: int = 0,
                 window: int | None = None) -> tuple[list[bytes], dict[str, float]]:
    """Segment one text with the model's boundary strategy. With `window`, the text is cut
    into pieces of window - 1 bytes, each read after its own BOS (so a chunk always starts at
    a piece's first byte): long files then cost linear time, at lengths the model was trained
    on. Sampling runs under its own seed (reproducible; the caller's RNG is left alone).
    Returns (chunks, stats) with stats boundary_rate, whitespace_rate, n_bytes, n_chunks."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    device = next(model.parameters()).device
    piece = max(1, window - 1) if window else max(1, len(data))
    decisions = [torch.ones(1)]                                  # BOS
    with inference(model, seed, device):
        for i in range(0, len(data), piece):
            x = encode(data[i:i + piece]).unsqueeze(0).to(device)  # (1, T)
            decisions.append(model(x, greedy=greedy).boundaries[0, 1:].float().cpu())
    a = torch.cat(decisions)                                     # (1 + len(data),)
    chunks = chunks_from_boundaries(data, a)
    stats = {k: float(v) for k, v in boundary_stats(encode(data).unsqueeze(0), a.unsqueeze(0)).items()}
    stats.update(n_bytes=len(data), n_chunks=len(chunks))
    return chunks, stats


def render_terminal(chunks: list[bytes], color: bool) -> str:
    """Alternating background colours when `color`, else chunks joined by `|`. Bytes that are
    not valid UTF-8 on their own (a character cut across chunks) show as U+FFFD."""
    texts = [c.decode("utf-8", errors="replace") for c in chunks]
    if not color:
        return "|".join(texts)
    return "".join(f"{background(i)}{t}{RESET}" for i, t in enumerate(texts))


def render_html(chunks: list[bytes], path: str | Path, title: str = "learntok segmentation") -> Path:
    """Write a standalone HTML page with one coloured span per chunk (hover: its byte count)."""
    spans = "".join(
        f'<span style="background:{_HTML_COLOURS[i % len(_HTML_COLOURS)]}" title="{len(c)} bytes">'
        f"{html.escape(c.decode('utf-8', errors='replace'))}</span>"
        for i, c in enumerate(chunks))
    page = (f"<!doctype html>\n<meta charset=\"utf-8\">\n<title>{html.escape(title)}</title>\n"
            f"<pre style=\"white-space:pre-wrap;font:14px/1.6 monospace\">{spans}</pre>\n")
    path = Path(path)
    path.write_text(page, encoding="utf-8")
    return path


def held_out_passage(data: ByteData, n_bytes: int = 700, max_docs: int = 1000) -> bytes:
    """A passage of the test split (never trained on), starting at a line, from the longest of
    the split's first `max_docs` documents (a bounded read, whatever the split's size)."""
    doc = max((d for d in data.documents("test", limit=max_docs) if d.strip()), key=len, default=b"")
    if not doc:
        raise DataError("the test split holds no text to show")
    start = doc.find(b"\n", len(doc) // 3) + 1
    passage = doc[start:start + n_bytes]
    cut = passage.rfind(b"\n")
    return passage[:cut] if cut > n_bytes // 2 else passage


def last_validation(run_dir: str | Path) -> dict[str, float]:
    """The run's last validation figures in metrics.jsonl (step, val_bpb, val_boundary_rate,
    val_whitespace_rate); empty when there are none (a model folder)."""
    try:
        _, val = read_metrics(run_dir)
    except DataError:
        return {}
    keys = ("step", "val_bpb", "val_boundary_rate", "val_whitespace_rate")
    return {k: val[-1][k] for k in keys if k in val[-1]} if val else {}
