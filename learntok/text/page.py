"""`learntok segment --html`: one self-contained page (inline script and style, no network) of
a text cut into the model's chunks, each byte's boundary probability on hover and, with the
learned policy, a compression slider that re-cuts the text live (docs/rate.md).

The page opens with the decisions the command used (its rule, seed and rate) and says which.
The slider adds d to every policy logit and re-decides with the same rule: greedy boundaries
against 0, sampled ones against the same draws (common random numbers), so d = 0 is the
terminal's cut and the rate moves smoothly with d. Its script mirrors `decide_from_terms` and,
through the per-byte character spans, `learntok.text.display.display_chunks`.
"""

from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from learntok.util.files import write_output
from learntok.text.display import SPLIT_END, SPLIT_START, char_spans, display_chunks
from learntok.text.windows import Decided

PAGE_BYTES = 1 << 16  # a page shows at most the first windows up to this many bytes (at least one window)
_HTML_COLOURS = ("#dbeafe", "#fef3c7", "#fce7f3", "#dcfce7")


@dataclass
class PageData:
    """What the page draws, per text byte i (BOS excluded). With a policy (base not None) the page
    re-decides for any slider offset d: l[i] = softcap(base[i] + sum_k mix[i][k-1] a[i-k] + offset
    + d, cap), a[i] = l[i] > threshold[i], where a before a window's first byte is BOS (1) and then
    nothing (0); a chunk ends at each boundary byte, and the first byte of every window starts one
    (learntok.text.display.chunk_starts)."""

    data: bytes
    decisions: list[int] = field(default_factory=list)  # a[i] the model used (0/1)
    probs: list[float] = field(default_factory=list)  # P(a[i] = 1)
    piece_pos: list[int] = field(default_factory=list)  # position of byte i in its window (1 = first after BOS)
    base: list[float] | None = None  # the learned policy's terms (None: no policy, no slider)
    mix: list[list[float]] | None = None
    threshold: list[float] | None = None  # logit of the sampled draws (0 for greedy)
    offset: float = 0.0
    cap: float = 0.0
    rule: str = "greedy"  # the decision rule shown: "greedy" or "sampled"
    note: str = ""  # a line shown above the text
    # a rate-conditioned policy (docs/rate.md): [slider offset d, the target rate the model is conditioned
    # on when its offset is offset + d] on a grid, d nondecreasing; the page shows the rate the slider sets
    conditions: list[list[float]] | None = None


class PageCollector:
    """PageData from the batches `segment.decide` yields, keeping the first windows up to
    PAGE_BYTES (whole windows, at least one): a page's memory is bounded, whatever the text."""

    def __init__(self, rule: str, limit: int = PAGE_BYTES):
        self.view, self.limit = PageData(b"", rule=rule), limit
        self.parts: list[bytes] = []
        self.n_bytes = 0  # bytes kept
        self.full = False  # a window was left out: the page shows a prefix of the text

    def add(self, batch: Decided) -> None:
        v = self.view
        for w in batch.windows:
            if self.full or (self.parts and self.n_bytes + len(w.data) > self.limit):
                self.full = True
                return
            self.parts.append(w.data)
            self.n_bytes += len(w.data)
            v.decisions += w.decisions
            v.probs += w.probs
            v.piece_pos += range(1, len(w.data) + 1)
            if w.terms is not None:
                if v.base is None:
                    v.base, v.mix, v.threshold = [], [], []
                v.base += w.terms.base
                v.mix += w.terms.mix
                v.threshold += w.terms.threshold
                v.offset, v.cap = w.terms.offset, w.terms.cap

    def page(self) -> PageData:
        self.view.data = b"".join(self.parts)
        return self.view


def condition_grid(strategy, offset: float, points: int = 64) -> list[list[float]] | None:
    """PageData.conditions of a rate-conditioned policy whose page logit offset is `offset`: the
    condition enters the logit as an offset alone, so the model conditioned on rate r cuts as the
    page does at d = strategy.condition_offset(r) - offset. None for any other strategy."""
    if strategy.condition_range() is None:
        return None
    rates = torch.logspace(-2, math.log10(0.9), points, device=next(strategy.parameters()).device)
    with torch.no_grad():
        moved = (strategy.condition_offset(rates) - offset).tolist()
    return [[d, r] for d, r in zip(moved, rates.tolist())]


def decide_from_terms(view: PageData, delta: float) -> list[int]:
    """The page script's re-decision at slider offset `delta`, in plain Python (its reference)."""
    a: list[int] = []
    for i, b in enumerate(view.base):
        z = b + view.offset + delta
        for k, m in enumerate(view.mix[i], start=1):
            p = view.piece_pos[i] - k  # window position of the byte k back
            z += m * (1 if p == 0 else a[i - k] if p > 0 else 0)
        a.append(int(view.cap * math.tanh(z / view.cap) > view.threshold[i]))
    return a


def chunk_starts(view: PageData, decisions: list[int]) -> list[int]:
    """Where the page's chunks start: every window's first byte, and the byte after every boundary
    byte (learntok.text.display.chunk_starts, over the page's windows one after another)."""
    return [i for i, p in enumerate(view.piece_pos) if p == 1 or decisions[i - 1]]


_PAGE_SCRIPT = """
const D = JSON.parse(document.getElementById('data').textContent);
const bytes = Uint8Array.from(atob(D.bytes), c => c.charCodeAt(0));
const colours = __COLOURS__, dec = new TextDecoder('utf-8'), SPLIT_START = __START__, SPLIT_END = __END__;
const lead = i => i - (D.back.charCodeAt(i) - 48), end = i => lead(i) + (D.width.charCodeAt(i) - 48);
function decide(delta) {                          // mirrors page.decide_from_terms
  if (!D.base || delta === 0) return D.decisions;
  const a = [];
  for (let i = 0; i < D.base.length; i++) {
    let z = D.base[i] + D.offset + delta;
    for (let k = 1; k <= D.mix[i].length; k++) {
      const q = D.piece_pos[i] - k;
      z += D.mix[i][k - 1] * (q === 0 ? 1 : q > 0 ? a[i - k] : 0);
    }
    a.push(D.cap * Math.tanh(z / D.cap) > D.threshold[i] ? 1 : 0);
  }
  return a;
}
function characters(i, j) {                       // [text, first byte] of each character in [i, j)
  const out = [];
  for (let s = i; s < j; s = end(s)) {
    const e = end(s);
    out.push([e - s === 1 && bytes[s] >= 0x80 ? '\\\\x' + bytes[s].toString(16).padStart(2, '0') : dec.decode(bytes.slice(s, e)), s]);
  }
  return out;
}
function parts(s, e) {                            // mirrors display.display_chunks for the chunk [s, e)
  let i = s, j = e, head = [], tail = [];
  if (lead(s) < s) { head = [[SPLIT_START, s]]; i = Math.min(end(s), e); }
  const l = lead(e - 1);
  if (end(e - 1) > e) {
    j = l >= i ? l : i;
    tail = (l >= i ? characters(l, end(e - 1)) : []).concat([[SPLIT_END, e - 1]]);
  }
  return head.concat(characters(i, j), tail);
}
function render(delta) {
  const a = decide(delta), pre = document.getElementById('text');
  pre.textContent = '';
  const starts = [];
  let cuts = 0;
  for (let i = 0; i < bytes.length; i++) {         // mirrors page.chunk_starts: a chunk ends at a boundary byte
    if (D.piece_pos[i] === 1 || a[i - 1]) starts.push(i);
    cuts += a[i];
  }
  starts.forEach((s, n) => {
    const e = n + 1 < starts.length ? starts[n + 1] : bytes.length;
    const chunk = document.createElement('span');
    chunk.className = 'chunk'; chunk.style.background = colours[n % colours.length];
    for (const [text, b] of parts(s, e)) {
      const c = document.createElement('span');
      c.textContent = text;
      c.title = 'byte ' + b + ': P(boundary) = ' + D.probs[b].toFixed(3) + (a[b] ? ' (boundary)' : '');
      chunk.appendChild(c);
    }
    pre.appendChild(chunk);
  });
  pre.dataset.chunks = starts.length;
  const rate = bytes.length ? cuts / bytes.length : 0;
  document.getElementById('stats').textContent = starts.length + ' chunks, ' + D.rule + ' rate ' + rate.toFixed(3) +
    ', mean chunk ' + (bytes.length / Math.max(starts.length, 1)).toFixed(2) + ' bytes' +
    (D.conditions ? ', conditioned on rate ' + conditionAt(delta).toFixed(3) :
     D.base ? ', offset ' + (delta >= 0 ? '+' : '') + delta.toFixed(2) : '');
}
function conditionAt(d) {                         // the rate a conditioned model is told at slider offset d
  const c = D.conditions;
  let i = 0;
  while (i < c.length - 2 && c[i + 1][0] < d) i++;
  const f = Math.min(1, Math.max(0, (d - c[i][0]) / ((c[i + 1][0] - c[i][0]) || 1)));
  return c[i][1] + f * (c[i + 1][1] - c[i][1]);
}
const slider = document.getElementById('offset');
if (slider) {
  const m = /offset=(-?[0-9.]+)/.exec(location.hash + location.search);
  if (m) slider.value = m[1];
  slider.addEventListener('input', () => render(parseFloat(slider.value)));
  render(parseFloat(slider.value));
} else render(0);
"""


def page_script() -> str:
    return (
        _PAGE_SCRIPT.replace("__COLOURS__", json.dumps(list(_HTML_COLOURS)))
        .replace("__START__", json.dumps(SPLIT_START))
        .replace("__END__", json.dumps(SPLIT_END))
    )


def render_html(view: PageData, path: str | Path, title: str = "learntok segmentation") -> Path:
    """Write the page of `view`. The chunks the command used are also written as plain spans
    (readable without the script, which redraws them)."""
    lead, end = char_spans(view.data)
    pos = np.arange(len(view.data))
    drawn = display_chunks(view.data, chunk_starts(view, view.decisions))
    spans = "".join(
        f'<span class="chunk" style="background:{_HTML_COLOURS[i % len(_HTML_COLOURS)]}">{html.escape(c.text)}</span>'
        for i, c in enumerate(drawn)
    )
    payload = {
        **{k: v for k, v in vars(view).items() if k not in ("data", "note")},
        "bytes": base64.b64encode(view.data).decode("ascii"),
        "back": (pos - lead + 48).astype(np.uint8).tobytes().decode("ascii"),
        "width": (end - lead + 48).astype(np.uint8).tobytes().decode("ascii"),
    }
    slider = (
        '<label>compression: more boundaries &larr; <input id="offset" type="range" min="-8" max="8" step="0.05" '
        'value="0" style="width:24em; direction:rtl"> &rarr; fewer</label> '
        if view.base
        else ""
    )
    data = json.dumps(payload).replace("</", "<\\/")  # no "</script>" inside the script
    page = (
        f'<!doctype html>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
        "<style>body{font:14px/1.5 sans-serif;margin:2em} pre{white-space:pre-wrap;font:14px/1.7 monospace}"
        " .chunk{border-right:1px solid #999} #stats{color:#444}</style>\n"
        f'<h3>{html.escape(title)}</h3>\n<p id="note" style="color:#666">{html.escape(view.note)}</p>\n'
        f'<div>{slider}<span id="stats"></span></div>\n<pre id="text">{spans}</pre>\n'
        f'<script type="application/json" id="data">{data}</script>\n'
        f"<script>{page_script()}</script>\n"
    )
    path = Path(path)
    write_output(path, page)  # whole or not at all
    return path


def page_note(
    view: PageData,
    seed: int | None,
    rate_line: str | None,
    model_rate: float,
    whole_rate: float,
    n_bytes: int,
    strategy: str,
) -> str:
    """The line above the text: which decisions the page opens with, at which rate, and what the
    slider does."""
    rule = f"sampled boundaries (seed {seed})" if view.rule == "sampled" else "greedy boundaries (p > 0.5)"
    setting = f"calibrated: {rate_line}" if rate_line else f"the model's own setting (trained for rate {model_rate:g})"
    note = (
        f"Shown: {rule}, as the command printed them, at {setting}; boundary rate {whole_rate:.3f} on the whole text."
    )
    if view.base is not None:
        how = "against the same draws" if view.rule == "sampled" else "greedily"
        note += f" The slider adds d to every policy logit and re-decides {how}."
        if view.conditions:
            note += " The model is rate-conditioned: the slider sets the rate it is conditioned on."
    else:
        note += f" Strategy {strategy}: no policy logit to move, so no slider (set its rate with --rate)."
    if len(view.data) < n_bytes:
        note += f" The page shows the first {len(view.data):,} of {n_bytes:,} bytes."
    return note
