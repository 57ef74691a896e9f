"""Show how a model cuts text into tokens: chunks of bytes, for the terminal or HTML.

A boundary at byte position t (t >= 1; position 0 is BOS) means a chunk starts at byte t of
the sequence, i.e. at text byte t - 1. The first chunk always starts at the first byte.
"""
from __future__ import annotations

import base64
import dataclasses
import html
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from learntok.data import ByteData, DataError
from learntok.data.vocab import encode, row_pieces
from learntok.files import write_output
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
    decisions = [torch.ones(1)]                                  # BOS
    with inference(model, seed, device):
        for piece in row_pieces(data, window):
            x = encode(piece).unsqueeze(0).to(device)            # (1, T)
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


@dataclass
class PageData:
    """What the HTML page draws, per text byte i (BOS excluded). With a policy, the page
    re-decides greedily for any slider offset d (`greedy_from_terms`, which the page's script
    mirrors): l[i] = softcap(base[i] + sum_k mix[i][k-1] a[i-k] + offset + d, cap), a[i] = l[i] > 0,
    where a before a piece's first byte is BOS (1) and then nothing (0)."""
    data: bytes
    decisions: list[int]                # a[i] the model used (0/1); the first byte always starts a chunk
    probs: list[float]                  # P(a[i] = 1) of those decisions
    piece_pos: list[int]                # position of byte i in its piece (1 = first byte after BOS)
    base: list[float] | None = None     # the learned policy's terms (None: no policy, no slider)
    mix: list[list[float]] | None = None
    offset: float = 0.0
    cap: float = 0.0
    note: str = ""                      # a line shown under the text


def page_data(model, text: str | bytes, greedy: bool = True, seed: int = 0, window: int | None = None) -> PageData:
    """PageData of one text: the model's decisions and probabilities and, for the learned policy,
    the per-byte terms of its logit (captured from the strategy's input, `LearnedPolicy.terms`)."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    device = next(model.parameters()).device
    strategy, captured = model.strategy, []
    hook = strategy.register_forward_hook(lambda mod, args, out: captured.append(args[0]))
    decisions, probs, pos, base, mix = [], [], [], [], []
    try:
        with inference(model, seed, device):
            for piece in row_pieces(data, window):
                x = encode(piece).unsqueeze(0).to(device)        # (1, T)
                out = model(x, greedy=greedy)
                decisions += out.boundaries[0, 1:].int().tolist()
                probs += out.boundary_probs[0, 1:].float().tolist()
                pos += list(range(1, len(piece) + 1))
                if strategy.has_policy:
                    terms = strategy.terms(captured.pop())
                    base += terms.base[0, 1:].tolist()
                    mix += terms.mix[0, 1:].tolist()
    finally:
        hook.remove()
    if not strategy.has_policy:
        return PageData(data, decisions, probs, pos, note=f"strategy {model.cfg.boundary}: no policy logit to move, so "
                        "no slider (set its rate with --rate)")
    return PageData(data, decisions, probs, pos, base, mix, terms.offset, terms.cap,
                    note="greedy boundaries (p > 0.5); the slider adds d to every logit")


def greedy_from_terms(view: PageData, delta: float) -> list[int]:
    """The page script's re-decision at slider offset `delta`, in plain Python (its reference)."""
    a: list[int] = []
    for i, b in enumerate(view.base):
        z = b + view.offset + delta
        for k, m in enumerate(view.mix[i], start=1):
            p = view.piece_pos[i] - k                            # piece position of the byte k back
            z += m * (1 if p == 0 else a[i - k] if p > 0 else 0)
        a.append(int(view.cap * math.tanh(z / view.cap) > 0))
    return a


_PAGE_SCRIPT = """
const D = JSON.parse(document.getElementById('data').textContent);
const bytes = Uint8Array.from(atob(D.bytes), c => c.charCodeAt(0));
const colours = %s, dec = new TextDecoder('utf-8');
function decide(delta) {
  if (!D.base) return {a: D.decisions, p: D.probs};
  const a = [], p = [];
  for (let i = 0; i < D.base.length; i++) {
    let z = D.base[i] + D.offset + delta;
    for (let k = 1; k <= D.mix[i].length; k++) {
      const q = D.piece_pos[i] - k;
      z += D.mix[i][k - 1] * (q === 0 ? 1 : q > 0 ? a[i - k] : 0);
    }
    const l = D.cap * Math.tanh(z / D.cap);
    a.push(l > 0 ? 1 : 0); p.push(1 / (1 + Math.exp(-l)));
  }
  return {a, p};
}
function charLength(b) { return b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1; }
function render(delta) {
  const {a, p} = decide(delta), pre = document.getElementById('text');
  pre.textContent = '';
  let chunk = null, n = 0, cuts = 0;
  for (let i = 0; i < bytes.length;) {
    if (i === 0 || a[i]) {
      chunk = document.createElement('span');
      chunk.className = 'chunk'; chunk.style.background = colours[n %% colours.length];
      pre.appendChild(chunk); n++; cuts += a[i];
    }
    let j = i + 1;                                // one character, unless a boundary cuts it
    while (j < Math.min(i + charLength(bytes[i]), bytes.length) && !a[j]) j++;
    const c = document.createElement('span');
    c.textContent = dec.decode(bytes.slice(i, j));
    c.title = 'byte ' + i + ': P(boundary) = ' + p[i].toFixed(3) + (a[i] ? ' (boundary)' : '');
    chunk.appendChild(c);
    i = j;
  }
  pre.dataset.chunks = n;
  const rate = bytes.length ? cuts / bytes.length : 0;
  document.getElementById('stats').textContent = n + ' chunks, rate ' + rate.toFixed(3) +
    ', mean chunk ' + (bytes.length / Math.max(n, 1)).toFixed(2) + ' bytes' +
    (D.base ? ', offset ' + delta.toFixed(2) : '');
}
const slider = document.getElementById('offset');
if (slider) {
  const m = /offset=(-?[0-9.]+)/.exec(location.hash + location.search);
  if (m) slider.value = m[1];
  slider.addEventListener('input', () => render(parseFloat(slider.value)));
  render(parseFloat(slider.value));
} else render(0);
"""


def render_html(chunks: list[bytes], path: str | Path, title: str = "learntok segmentation",
                view: PageData | None = None) -> Path:
    """Write a self-contained HTML page (inline script and style, no network): the text with its
    chunks coloured, each byte's boundary probability on hover and, with a policy's `view`, a
    compression slider that moves the policy's offset and re-cuts the text live (the slider's
    value may be preset with `#offset=D` in the address). Without a view, the chunks alone. The
    chunks are also written as plain spans, which the script redraws (readable without it)."""
    if view is None:
        data = b"".join(chunks)
        starts = [0] * len(data)
        for i in itertools.accumulate(len(c) for c in chunks[:-1]):
            starts[i] = 1
        view = PageData(data, starts, [float(s) for s in starts], list(range(1, len(data) + 1)))
    drawn = chunks_from_boundaries(view.data, torch.tensor([1, *view.decisions]))  # what the page first shows
    spans = "".join(f'<span class="chunk" style="background:{_HTML_COLOURS[i % len(_HTML_COLOURS)]}">'
                    f"{html.escape(c.decode('utf-8', errors='replace'))}</span>" for i, c in enumerate(drawn))
    payload = {**{k: v for k, v in dataclasses.asdict(view).items() if k != "data"},
               "bytes": base64.b64encode(view.data).decode("ascii")}
    slider = ('<label>compression: more boundaries &larr; <input id="offset" type="range" min="-8" max="8" step="0.05" '
              'value="0" style="width:24em; direction:rtl"> &rarr; fewer</label> ' if view.base else "")
    page = (f"<!doctype html>\n<meta charset=\"utf-8\">\n<title>{html.escape(title)}</title>\n"
            "<style>body{font:14px/1.5 sans-serif;margin:2em} pre{white-space:pre-wrap;font:14px/1.7 monospace}"
            " .chunk{border-right:1px solid #999} #stats{color:#444}</style>\n"
            f"<h3>{html.escape(title)}</h3>\n<div>{slider}<span id=\"stats\"></span></div>\n"
            f"<p style=\"color:#666\">{html.escape(view.note)}</p>\n<pre id=\"text\">{spans}</pre>\n"
            f"<script type=\"application/json\" id=\"data\">{json.dumps(payload)}</script>\n"
            f"<script>{_PAGE_SCRIPT % json.dumps(list(_HTML_COLOURS))}</script>\n")
    path = Path(path)
    write_output(path, page)                                     # whole or not at all
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
