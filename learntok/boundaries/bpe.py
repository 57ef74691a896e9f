"""The paper's BPE guidance (`bpe`): the whole sequence is tokenized by a byte-level BPE, and the
boundary is placed at the first byte of each BPE token (the authors' code,
SamD770/bitter-lesson-tokenization, `bpe_tokenizer/`). It is NOT causal (`causal = False`): a
byte's decision depends on the bytes after it, so generation refuses it; `bpe-causal`
(bpe_causal.py) is the causal rule beside it. The authors' recipe, the windows between special
symbols, invalid UTF-8 and the vocabulary options: docs/strategies.md ("bpe"); what the
lookahead is worth: docs/compare.md.

Shapes: B batch, T bytes.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from learntok.boundaries.base import register
from learntok.boundaries.tokenizer import MAX_VOCAB, RATE_TOLERANCE, TokenizerStrategy, bisect_merges
from learntok.data.vocab import is_byte
from learntok.util.errors import ConfigError
from learntok.util.ranges import BPE_VOCAB, ranged


@dataclass
class PaperBPEConfig:
    # BPE vocabulary; 0: the number of merges whose rate on the fit sample is closest to rho*
    vocab_size: int = ranged(0, ge=0, le=BPE_VOCAB.high)
    tokenizer: str = ""  # path of a byte-level BPE tokenizer.json to use instead of fitting ("": fit one)

    def __post_init__(self) -> None:
        if 0 < self.vocab_size < BPE_VOCAB.low:  # the byte-level alphabet alone is 256 tokens
            raise ValueError(f"strategy.vocab_size {self.vocab_size} must be 0 (fit it) or at least {BPE_VOCAB.low:g}")


def utf8_text(data: bytes) -> tuple[str, list[int]]:
    """The valid UTF-8 text of `data` (invalid bytes left out) and, for each byte of the text's
    UTF-8 encoding, its offset in `data`."""
    text = data.decode("utf-8", errors="surrogateescape")  # an invalid byte -> one lone surrogate
    kept, src, i = [], [], 0
    for ch in text:
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            i += 1
            continue
        n = len(ch.encode("utf-8"))
        kept.append(ch)
        src.extend(range(i, i + n))
        i += n
    return "".join(kept), src


def token_byte_starts(tokens: list[str], src: list[int]) -> list[int]:
    """Byte offsets (in the run) of the first byte of each token of a byte-level BPE encoding.
    Each character of a byte-level token is one byte; a prefix space added by the pre-tokenizer
    (add_prefix_space) is one byte more than the text has, and covers no byte of the run."""
    extra = sum(len(t) for t in tokens) - len(src)
    if extra not in (0, 1):
        raise ConfigError(
            "the bpe strategy's tokenizer is not a byte-level BPE: its tokens do not spell the text's "
            "bytes (use a tokenizer with the ByteLevel pre-tokenizer and no normalizer)"
        )
    starts, pos = [], -extra
    for t in tokens:
        if pos + len(t) > 0 and pos < len(src):
            starts.append(src[max(pos, 0)])
        pos += len(t)
    return starts


def bpe_boundaries(tokenizer, x: torch.Tensor) -> torch.Tensor:
    """(B, T) ids -> (B, T) float: 1 at the first byte of each BPE token of each run of real
    bytes (the run tokenized as a whole), at every special symbol and at the byte after it."""
    xc = x.cpu()  # one copy to the host
    ids, real = xc.numpy(), is_byte(xc).numpy()  # (B, T), (B, T) bool
    a = (~real).astype(np.float32)  # special symbols
    runs = []  # (row, start, end) of each run of real bytes
    for b in range(ids.shape[0]):
        edges = np.flatnonzero(np.diff(np.concatenate([[0], real[b], [0]]).astype(np.int8)))
        runs.extend((b, s, e) for s, e in zip(edges[::2], edges[1::2]))
    texts = [utf8_text(bytes(ids[b, s:e].astype(np.uint8))) for b, s, e in runs]
    encodings = tokenizer.encode_batch([t for t, _ in texts], add_special_tokens=False)
    for (b, s, _), (_, src), enc in zip(runs, texts, encodings):
        a[b, s] = 1.0
        for start in token_byte_starts(enc.tokens, src):
            a[b, s + start] = 1.0
    return torch.from_numpy(a).to(x.device)


def train_bytelevel_bpe(documents: list[bytes], vocab_size: int):
    """The authors' tokenizer recipe: BPE with the ByteLevel pre-tokenizer (add_prefix_space),
    trained on the documents (the full byte alphabet included, so that any byte encodes)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator((utf8_text(d)[0] for d in documents), trainer)
    return tok


def truncate_merges(tokenizer, n_merges: int):
    """The same tokenizer (pre-tokenizer included) with only its first n_merges merges: BPE
    training appends one token per merge, so the vocabulary keeps its first ids."""
    from tokenizers import Tokenizer

    d = json.loads(tokenizer.to_str())
    merges = d["model"]["merges"]
    keep = len(d["model"]["vocab"]) - len(merges) + n_merges
    d["model"]["merges"] = merges[:n_merges]
    d["model"]["vocab"] = {t: i for t, i in d["model"]["vocab"].items() if i < keep}
    return Tokenizer.from_str(json.dumps(d))


def bpe_rate(tokenizer, documents: list[bytes]) -> float:
    """BPE tokens per byte of the documents, each tokenized as a whole."""
    texts = [utf8_text(d)[0] for d in documents]
    n_tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False))
    return n_tokens / max(sum(len(d) for d in documents), 1)


def fit_merges(tokenizer, documents: list[bytes], target_rate: float) -> tuple[object, float]:
    """The tokenizer truncated to the number of merges whose rate is closest to target_rate:
    (tokenizer, rate)."""
    n_max = len(json.loads(tokenizer.to_str())["model"]["merges"])
    best, rate = bisect_merges(n_max, lambda m: bpe_rate(truncate_merges(tokenizer, m), documents), target_rate)
    return truncate_merges(tokenizer, best), rate


def load_tokenizer(path: str):
    from tokenizers import Tokenizer

    if not Path(path).is_file():
        raise ConfigError(f"strategy.tokenizer {path!r}: no such file (give a tokenizer.json)")
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises a bare Exception on a bad file
        raise ConfigError(f"strategy.tokenizer {path!r} is not a tokenizers JSON file: {e}") from None


@register("bpe", config=PaperBPEConfig)
class PaperBPE(TokenizerStrategy):
    """The paper's BPE guidance: a boundary at the first byte of each BPE token of the whole
    window. Sees the whole sequence (not causal); `fit` trains or loads the tokenizer."""

    causal = False

    def __init__(self, cfg):
        super().__init__(cfg)
        self._parsed = None  # the tokenizer parsed from the buffer (a cache)

    def _forget_tokenizer(self) -> None:
        self._parsed = None

    def fit(self, documents: list[bytes]) -> dict:
        if self.opts.tokenizer:
            tok = load_tokenizer(self.opts.tokenizer)
        else:
            tok = train_bytelevel_bpe(documents, self.opts.vocab_size or MAX_VOCAB)
            if not self.opts.vocab_size:
                tok, _ = fit_merges(tok, documents, self.cfg.target_rate)
            elif tok.get_vocab_size() < 0.99 * self.opts.vocab_size:
                raise ConfigError(
                    f"strategy.vocab_size={self.opts.vocab_size}: the {sum(map(len, documents)):,}-byte fit sample only "
                    f"supports a {tok.get_vocab_size():,}-token BPE (every pair it holds is merged). For the paper's "
                    "tokenizer, train one on enough text (the authors used 500k FineWeb documents; docs/reproduce.md) "
                    "and give it as strategy.tokenizer=PATH/tokenizer.json, or leave strategy.vocab_size=0 to fit the rate"
                )
        rate = bpe_rate(tok, documents)
        if abs(rate - self.cfg.target_rate) > RATE_TOLERANCE:
            warnings.warn(
                f"the bpe strategy's tokenizer ({tok.get_vocab_size()} tokens) gives {rate:.4f} boundaries "
                f"per byte on the fit sample, not rho* = {self.cfg.target_rate}",
                stacklevel=2,
            )
        self.set_tokenizer(tok)
        return {"bpe_vocab_size": tok.get_vocab_size(), "bpe_rate": rate, "bpe_target_rate": self.cfg.target_rate}

    def boundaries(self, x: torch.Tensor) -> torch.Tensor:
        if self._parsed is None:
            self._parsed = self.tokenizer()
        return bpe_boundaries(self._parsed, x)

    def init_state(self, batch, device) -> dict:
        raise ConfigError(
            "the bpe strategy (the paper's BPE guidance) tokenizes the whole sequence, so it cannot "
            "decide boundaries byte by byte: generate with a model trained with bpe-causal"
        )

    def prefill_state(self, h, x, decisions, early_logits=None) -> dict:
        return self.init_state(x.size(0), x.device)
