"""A trained model's boundaries as a tokenizer: `learntok.Tokenizer` (docs/tokenizer.md).

    tok = Tokenizer.from_pretrained("runs/a")
    enc = tok.encode("Some text to cut into tokens")
    enc.tokens, enc.offsets, len(enc); tok.decode(enc) == "Some text to cut into tokens"

Shaped after the `tokenizers` library's `Encoding`, with one difference on purpose: there is no
vocabulary. A chunk is the span of bytes one token reads, ending at the byte the model chose as
its boundary (docs/tokenizer.md, "What a chunk is"); the model reads the bytes, not an id from a table, so there are no ids to give.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np

from learntok.checkpoint import load_run
from learntok.display import Chunk, char_spans, display_chunks
from learntok.rate import CALIBRATION_BYTES, RateSetting, apply_setting, rate_kept, set_rate_for_run
from learntok.windows import BATCH_BYTES, WINDOW, Decided, decide, text_rows


@dataclass
class Encoding:
    """One text cut into the model's chunks. `tokens` are display strings (a character cut by a
    boundary shows once, marked: learntok.display); `bytes` are exact, and joined they give back the
    text. There are no ids: the model has no vocabulary."""

    data: bytes  # the text's bytes (UTF-8 of a str)
    chunks: list[Chunk]  # in order; chunk k is data[chunks[k].start:chunks[k].end]
    rule: str  # the decision rule: "greedy" (p > 0.5) or "sampled"

    def __len__(self) -> int:
        return len(self.chunks)

    def __repr__(self) -> str:
        return f"Encoding(num_chunks={len(self)}, num_bytes={len(self.data)}, rule={self.rule!r})"

    @property
    def tokens(self) -> list[str]:
        return [c.text for c in self.chunks]

    @property
    def bytes(self) -> list[bytes]:
        return [c.data for c in self.chunks]

    @property
    def byte_offsets(self) -> list[tuple[int, int]]:
        return [(c.start, c.end) for c in self.chunks]

    @property
    def offsets(self) -> list[tuple[int, int]]:
        """(start, end) character offsets into the decoded text. A character cut by a boundary
        belongs to both chunks (their offsets overlap by it, as byte-level BPE's do in
        `tokenizers`); a byte that is not UTF-8 counts as one character."""
        if not self.chunks:
            return []
        lead, _ = char_spans(self.data)
        index = np.cumsum(lead == np.arange(len(self.data))) - 1  # (n_bytes,) character of each byte
        a = np.array([c.start for c in self.chunks])
        b = np.array([c.end for c in self.chunks])
        return list(zip(index[a].tolist(), (index[b - 1] + 1).tolist()))

    @property
    def starts_mid(self) -> list[bool]:
        """Per chunk: its first byte continues a character begun in the previous chunk."""
        return [c.starts_mid for c in self.chunks]

    @property
    def ends_mid(self) -> list[bool]:
        """Per chunk: its last character goes on in the next chunk."""
        return [c.ends_mid for c in self.chunks]


class Tokenizer:
    """Encode text into a model's chunks. Windows of `window` bytes (BOS included) are read in
    batched forwards of at most `batch_bytes` (learntok.windows), so time and memory are linear
    in the input. The model is used in eval mode and its rate knob is left as it was found."""

    def __init__(self, model, run_cfg=None, window: int = WINDOW, batch_bytes: int = BATCH_BYTES):
        self.model, self.run_cfg = model, run_cfg  # run_cfg: the run's config (None for a bare model folder)
        self.window, self.batch_bytes = window, batch_bytes
        self.calibrations: dict[tuple, RateSetting] = {}  # memo of `at_rate`'s calibrations

    @classmethod
    def from_pretrained(
        cls, path, device: str = "cpu", window: int = WINDOW, batch_bytes: int = BATCH_BYTES
    ) -> "Tokenizer":
        """From a run folder (its latest checkpoint and its config: `rate=` calibrates on its
        validation split) or a model or checkpoint folder."""
        model, run_cfg = load_run(path, device)
        return cls(model, run_cfg, window, batch_bytes)

    def encode(
        self,
        text: str | bytes | Sequence[str | bytes],
        rate: float | None = None,
        greedy: bool = True,
        seed: int | None = None,
        rate_mode: str | None = None,
    ) -> Encoding | list[Encoding]:
        """One Encoding per text (a list for a list). `rate`: cut at this boundary rate instead of
        the model's own (calibrated with the decision rule in use: learntok.rate.set_rate, on the
        run's validation split, or on the texts' first bytes for a bare model folder), held by
        `rate_mode` (learntok.rate.RATE_MODES; default: online where the strategy has it). `greedy`:
        p > 0.5; else sampled, under `seed` (None: a seed drawn from torch's global RNG).
        Windows are batched longest first (a stable sort: one text's windows keep their order, as
        `learntok segment` reads them). Sampled cuts depend on which texts are encoded together;
        greedy ones do not."""
        single = isinstance(text, (str, bytes, bytearray))
        datas = [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in ([text] if single else text)]
        starts: list[list[int]] = [[] for _ in datas]
        rows = sorted(text_rows(datas, self.window), key=lambda r: -len(r[2]))  # like lengths batched together
        with self.at_rate(rate, greedy, seed, calibration_text(datas), rate_mode):
            for batch in self.decide(rows, greedy, seed):
                for w in batch.windows:
                    starts[w.key] += w.starts
        rule = "greedy" if greedy else "sampled"
        out = [Encoding(d, display_chunks(d, s), rule) for d, s in zip(datas, starts)]
        return out[0] if single else out

    def decide(
        self, rows: Iterable[tuple[int, int, bytes]], greedy: bool, seed: int | None, terms: int = 0
    ) -> Iterator[Decided]:
        """learntok.windows.decide with this tokenizer's model and batch size (`learntok segment`
        streams a file through this)."""
        return decide(self.model, rows, greedy, seed, self.batch_bytes, terms)

    @contextlib.contextmanager
    def at_rate(self, rate: float | None, greedy: bool, seed: int | None, text: bytes | None, mode: str | None = None):
        """The block runs at boundary rate `rate` (None: the model's own), calibrated for `greedy`
        on the run's validation split or, for a bare model folder, on `text`, and held by `mode`
        (learntok.rate.set_rate); yields the RateSetting (None). Calibrations are remembered; the
        knob is restored after."""
        if rate is None:
            yield None
            return
        seed = 0 if seed is None else seed
        key = (rate, greedy, seed, mode, None if self.run_cfg is not None else hashlib.blake2b(text or b"").hexdigest())
        with rate_kept(self.model):
            if key in self.calibrations:
                apply_setting(self.model, self.calibrations[key])
            else:
                self.calibrations[key] = set_rate_for_run(self.model, self.run_cfg, rate, text, greedy, seed, mode)
            yield self.calibrations[key]

    def decode_bytes(self, encoding: Encoding | Sequence[bytes]) -> bytes:
        """The encoded bytes, exactly (an Encoding, or its chunks' bytes)."""
        return b"".join(encoding.bytes if isinstance(encoding, Encoding) else encoding)

    def decode(self, encoding: Encoding | Sequence[bytes]) -> str:
        """The encoded text, exactly (its bytes must be UTF-8, as those of any str are)."""
        return self.decode_bytes(encoding).decode("utf-8")


def calibration_text(texts: Sequence[bytes]) -> bytes:
    """What a bare model folder calibrates `rate=` on: the first CALIBRATION_BYTES of the texts."""
    out, n = [], 0
    for t in texts:
        out.append(t[: CALIBRATION_BYTES - n])
        n += len(out[-1])
        if n >= CALIBRATION_BYTES:
            break
    return b"".join(out)
