"""A trained model's boundaries as a tokenizer: `learntok.Tokenizer` (docs/tokenizer.md).

    tok = Tokenizer.from_pretrained("runs/a")
    enc = tok("Some text to cut into tokens")          # tok.encode(...); tok.encode_batch([...])
    enc.tokens, enc.offsets, len(enc); tok.decode(enc) == "Some text to cut into tokens"

Shaped after the `tokenizers` library's `Encoding`, with one difference on purpose: there is no
vocabulary. A chunk is the span of bytes one token reads, ending at the byte the model chose as
its boundary (docs/tokenizer.md, "What a chunk is"); the model reads the bytes, not an id from a
table, so there are no ids to give: the chunks' byte spans (`byte_offsets`) stand in for them.
Every entry point checks its arguments (learntok.util.checks).
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np

import learntok.util.checks as check
from learntok.util import unicode
from learntok.run.checkpoint import load_run
from learntok.run.config import RunConfig
from learntok.text.display import Chunk, char_spans, display_chunks
from learntok.model.aunet import AUNet
from learntok.model.generate import DEFAULT_BOUNDARIES
from learntok.model.pretrained import save_model
from learntok.util.ranges import RATE, SEED, bounds
from learntok.run.rate import CALIBRATION_BYTES, RATE_MODES, RateSetting, apply_setting, set_rate_for_run
from learntok.text.windows import BATCH_BYTES, WINDOW, Decided, decide, text_rows
from learntok.util.runtime import MODEL_STATE


RULES = ("greedy", "sampled")
GREEDY = DEFAULT_BOUNDARIES == "greedy"  # the one default rule (learntok.model.generate.DEFAULT_BOUNDARIES)
WINDOW_RANGE = bounds(ge=2)  # a window holds BOS and a byte


@dataclass
class Encoding:
    """One text cut into the model's chunks. `tokens` are display strings (a character cut by a
    boundary shows once, marked: learntok.text.display); `bytes` are exact, and joined they give back the
    text. There are no ids: the model has no vocabulary."""

    data: bytes  # the text's bytes (UTF-8 of a str)
    chunks: list[Chunk]  # in order; chunk k is data[chunks[k].start:chunks[k].end]
    rule: str  # the decision rule: "greedy" (p > 0.5) or "sampled"
    boundaries: int = 0  # boundary bytes the model chose (each window's first chunk needs none)
    rate_setting: RateSetting | None = None  # the `rate=` set (None: the model's own rate)

    def __post_init__(self) -> None:
        check.instance("Encoding", "data", self.data, bytes, "the text's bytes")
        check.instance("Encoding", "chunks", self.chunks, list, "a list of learntok.text.display.Chunk")
        check.choice("Encoding", "rule", self.rule, RULES)
        check.number("Encoding", "boundaries", self.boundaries, int, SEED)
        check.instance("Encoding", "rate_setting", self.rate_setting, RateSetting, "a RateSetting", none=True)

    def __len__(self) -> int:
        return len(self.chunks)

    def __repr__(self) -> str:
        note = f", note={self.note!r}" if self.note else ""
        return f"Encoding(num_chunks={len(self)}, num_bytes={len(self.data)}, rule={self.rule!r}{note})"

    @property
    def boundary_rate(self) -> float:
        """The model's boundaries per byte on this text."""
        return self.boundaries / max(len(self.data), 1)

    @property
    def note(self) -> str:
        """Says when `rate=` was not held on this text (learntok.run.rate.RateSetting.held_on); "" else."""
        return self.rate_setting.held_on(self.boundary_rate) if self.rate_setting and self.data else ""

    @property
    def ids(self):
        raise AttributeError(
            "an Encoding has no ids: the model has no vocabulary. Its chunks' byte spans stand in "
            "for them: enc.byte_offsets (and enc.bytes, enc.tokens; docs/tokenizer.md)"
        )

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
    batched forwards of at most `batch_bytes` (learntok.text.windows), so time and memory are linear
    in the input. The model is used in eval mode and its rate knob is left as it was found."""

    def __init__(self, model, run_cfg=None, window: int = WINDOW, batch_bytes: int = BATCH_BYTES):
        self.model = check.instance("Tokenizer", "model", model, AUNet, "a learntok.AUNet")
        self.run_cfg = check.instance("Tokenizer", "run_cfg", run_cfg, RunConfig, "a RunConfig", none=True)
        self.window = check.number("Tokenizer", "window", window, int, WINDOW_RANGE)  # BOS and a byte
        self.batch_bytes = check.number("Tokenizer", "batch_bytes", batch_bytes, int, WINDOW_RANGE)
        self.calibrations: dict[tuple, RateSetting] = {}  # memo of `at_rate`'s calibrations

    @classmethod
    def from_pretrained(
        cls, path, device: str = "cpu", window: int = WINDOW, batch_bytes: int = BATCH_BYTES
    ) -> "Tokenizer":
        """From a run folder (its latest checkpoint and its config), a model or checkpoint folder, or a folder `save_pretrained` wrote.
        A device this machine lacks says so before anything is read."""
        where = "Tokenizer.from_pretrained"
        path, device = check.path(where, "path", path), check.device(where, "device", device)
        check.number(where, "window", window, int, WINDOW_RANGE)
        check.number(where, "batch_bytes", batch_bytes, int, WINDOW_RANGE)
        model, run_cfg = load_run(path, device)
        return cls(model, run_cfg, window, batch_bytes)

    def save_pretrained(self, path) -> None:
        """Write the model and, for a run, its config into folder `path` (atomically), so that
        `from_pretrained(path)` gives this tokenizer back."""
        path = check.path("Tokenizer.save_pretrained", "path", path)
        save_model(self.model, path, self.run_cfg.to_dict() if self.run_cfg is not None else None)

    def encode(
        self,
        text: str | bytes | Sequence[str | bytes],
        rate: float | None = None,
        greedy: bool = GREEDY,
        seed: int | None = None,
        rate_mode: str | None = None,
    ) -> Encoding | list[Encoding]:
        """One Encoding per text (a list for a list). `rate`: cut at this boundary rate instead of
        the model's own (calibrated with the decision rule in use on the texts' own first 64 KB:
        learntok.run.rate.set_rate_for_run, docs/rate.md), held by
        `rate_mode` (learntok.run.rate.RATE_MODES; default: online where the strategy has it); an
        Encoding's `note` says when the rate was not held on its text. `greedy`: p > 0.5 (the
        default of every command and the API); else sampled, under `seed` (None: a seed drawn
        from torch's global RNG). Windows are batched longest first (a stable sort: one text's
        windows keep their order, as `learntok segment` reads them). Sampled cuts depend on which
        texts are encoded together; greedy ones do not."""
        datas, single = unicode.texts("Tokenizer.encode", "text", text)
        rate, greedy, seed, rate_mode = rule_arguments("Tokenizer.encode", rate, greedy, seed, rate_mode)
        starts: list[list[int]] = [[] for _ in datas]
        cuts = [0] * len(datas)
        rows = sorted(text_rows(datas, self.window), key=lambda r: -len(r[2]))  # like lengths batched together
        # one encode at a time: the rate knob and the seeded draws are state of the model and of
        # torch's global RNG, which two threads would hand to each other (runtime.MODEL_STATE)
        with MODEL_STATE, self.at_rate(rate, greedy, seed, calibration_text(datas), rate_mode) as setting:
            for batch in self.decide(rows, greedy, seed):
                for w in batch.windows:
                    starts[w.key] += w.starts
                    cuts[w.key] += sum(w.decisions)
        rule = "greedy" if greedy else "sampled"
        out = [Encoding(d, display_chunks(d, s), rule, n, setting) for d, s, n in zip(datas, starts, cuts)]
        return out[0] if single else out

    __call__ = encode  # tok(text), as the tokenizers libraries are called

    def encode_batch(
        self,
        texts: Sequence[str | bytes],
        rate: float | None = None,
        greedy: bool = GREEDY,
        seed: int | None = None,
        rate_mode: str | None = None,
    ) -> list[Encoding]:
        """`encode` of a list of texts (batched together): a list of Encodings."""
        if not isinstance(texts, (list, tuple)):
            raise check.wrong_type("Tokenizer.encode_batch", "texts", "a list of str or bytes", texts)
        return self.encode(list(texts), rate, greedy, seed, rate_mode)

    def decide(
        self, rows: Iterable[tuple[int, int, bytes]], greedy: bool, seed: int | None, terms: int = 0
    ) -> Iterator[Decided]:
        """learntok.text.windows.decide with this tokenizer's model and batch size (`learntok segment`
        streams a file through this)."""
        greedy, seed = (
            check.flag("Tokenizer.decide", "greedy", greedy),
            check.number("Tokenizer.decide", "seed", seed, int, SEED, none=True),
        )
        check.number("Tokenizer.decide", "terms", terms, int, SEED)
        return decide(self.model, rows, greedy, seed, self.batch_bytes, terms)

    @contextlib.contextmanager
    def at_rate(self, rate: float | None, greedy: bool, seed: int | None, text: bytes | None, mode: str | None = None):
        """The block runs at boundary rate `rate` (None: the model's own), calibrated for `greedy`
        on `text`, the first bytes of the texts to be cut (learntok.run.rate.set_rate_for_run), and held by `mode`
        (learntok.run.rate.set_rate); yields the RateSetting (None). Calibrations are remembered; the
        knob is restored after."""
        rate, greedy, seed, mode = rule_arguments("Tokenizer.at_rate", rate, greedy, seed, mode)
        text = None if text is None else unicode.text("Tokenizer.at_rate", "text", text)
        if rate is None:
            yield None
            return
        seed = 0 if seed is None else seed
        key = (rate, greedy, seed, mode, hashlib.blake2b(text or b"").hexdigest())  # calibrated on the text itself
        with self.model.strategy.rate_knob_kept():
            if key in self.calibrations:
                apply_setting(self.model, self.calibrations[key])
            else:
                self.calibrations[key] = set_rate_for_run(self.model, self.run_cfg, rate, text, greedy, seed, mode)
            yield self.calibrations[key]

    def decode_bytes(self, encoding: Encoding | Sequence[bytes]) -> bytes:
        """The encoded bytes, exactly (an Encoding, or its chunks' bytes `enc.bytes`)."""
        if isinstance(encoding, Encoding):
            return b"".join(encoding.bytes)
        if isinstance(encoding, (list, tuple)) and all(isinstance(b, (bytes, bytearray)) for b in encoding):
            return b"".join(encoding)
        strings = isinstance(encoding, (list, tuple)) and any(isinstance(b, str) for b in encoding)
        raise check.wrong_type(
            "Tokenizer.decode",
            "encoding",
            "an Encoding or its chunks' bytes (enc.bytes)"
            + (
                ": enc.tokens are display strings (a cut character marked, bytes that are not UTF-8 "
                "as \\xNN) that do not give the text back exactly"
                if strings
                else ""
            ),
            encoding,
        )

    def decode(self, encoding: Encoding | Sequence[bytes]) -> str:
        """The encoded text, exactly (its bytes must be UTF-8, as those of any str are;
        `decode_bytes` gives any bytes back)."""
        data = self.decode_bytes(encoding)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(
                f"Tokenizer.decode: the encoded bytes are not UTF-8 text (byte {e.start}); "
                "decode_bytes gives them back exactly"
            ) from None


def rule_arguments(where: str, rate, greedy, seed, rate_mode) -> tuple:
    """`rate`, `greedy`, `seed`, `rate_mode` of encode and at_rate, checked."""
    return (
        check.number(where, "rate", rate, float, RATE, none=True),
        check.flag(where, "greedy", greedy),
        check.number(where, "seed", seed, int, SEED, none=True),
        check.choice(where, "rate_mode", rate_mode, RATE_MODES, none=True),
    )


def calibration_text(texts: Sequence[bytes]) -> bytes:
    """What a bare model folder calibrates `rate=` on: the first CALIBRATION_BYTES of the texts."""
    out, n = [], 0
    for t in texts:
        out.append(t[: CALIBRATION_BYTES - n])
        n += len(out[-1])
        if n >= CALIBRATION_BYTES:
            break
    return b"".join(out)
