"""Causal BPE guidance (`bpe-causal`): a boundary at the first byte of each token of a byte-level
BPE trained locally with `tokenizers` on the run's training documents, segmented without
lookahead. (The paper's own BPE guidance, which sees the whole sequence, is `bpe`: bpe.py.)

Pre-tokens are SpaceByte's words (`pretoken_starts`), and within one the vocabulary segments
greedily and causally (`causal_word_starts`: a byte extends the current token while the
extended string is a prefix of a vocabulary token). `fit` trains the BPE on three quarters of
its sample and bisects the number of merges until the causal rate on the held-out quarter is
closest to rho*: text the tokenizer never saw is cut more finely than its own training text
(unseen words split into more tokens), so a rate fitted on the training words overshoots on
the test split. Why this is causal where BPE is not, and how close it stays
to the BPE's own merges: docs/strategies.md ("bpe-causal").

Shapes: B batch, T bytes.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter

import numpy as np
import torch

from learntok.boundaries.base import register
from learntok.boundaries.common import whitespace_boundaries
from learntok.boundaries.tokenizer import RATE_TOLERANCE, TokenizerStrategy, bisect_merges
from learntok.data.dataset import FIT_BYTES
from learntok.data.vocab import BOS, is_byte

HELD_OUT_SHARE = 0.25  # of the fit sample, held out from the BPE's training to fit its merge count on
CAUSAL_MAX_VOCAB = 65536  # the BPE a fit truncates: large, since held-out text needs more merges for rho*


def byte_to_unicode() -> list[str]:
    """GPT-2's reversible map of the 256 byte values to printable characters (byte-level BPE)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


BYTE_CHARS = byte_to_unicode()


def to_chars(data: bytes) -> str:
    return "".join(BYTE_CHARS[b] for b in data)


def pretoken_starts(x: torch.Tensor) -> torch.Tensor:
    """Causal pre-token starts: SpaceByte's word starts plus special symbols (each its own
    pre-token). x (B, T) ids -> (B, T) bool, True at t = 0; reads x[t-1] and x[t] only."""
    special = ~is_byte(x)
    start = whitespace_boundaries(x).bool() | special
    start[:, 1:] |= special[:, :-1]
    return start


def split_pretokens(data: bytes) -> list[bytes]:
    """A document's pre-tokens, by `pretoken_starts`."""
    if not data:
        return []
    x = torch.frombuffer(bytearray(data), dtype=torch.uint8).long().unsqueeze(0)
    idx = torch.nonzero(pretoken_starts(x)[0]).squeeze(-1).tolist() + [len(data)]
    return [data[s:e] for s, e in zip(idx[:-1], idx[1:])]


def token_starts(tokenizer, word: bytes) -> list[int]:
    """Byte offsets of the tokenizer's own tokens in one whole pre-token (not causal; the reference)."""
    return [start for start, _ in tokenizer.encode(to_chars(word)).offsets]


def token_prefixes(tokenizer) -> frozenset[str]:
    """Every prefix of every vocabulary token (byte-level characters)."""
    return frozenset(t[:i] for t in tokenizer.get_vocab() for i in range(1, len(t) + 1))


def causal_word_starts(prefixes: frozenset[str], word: bytes) -> list[int]:
    """Greedy causal segmentation of one pre-token: byte i starts a token (1) unless the
    current token extended by byte i is still a prefix of a vocabulary token. Byte 0 always
    starts one. Decision i reads bytes <= i only."""
    starts, current = [], ""
    for ch in to_chars(word):
        if current and current + ch in prefixes:
            current += ch
            starts.append(0)
        else:
            current = ch
            starts.append(1)
    return starts


def causal_rate(tokenizer, words: Counter) -> float:
    """Boundaries per byte of the causal rule over a word-count table."""
    prefixes = token_prefixes(tokenizer)
    n_bytes = sum(len(w) * c for w, c in words.items())
    n_bounds = sum(sum(causal_word_starts(prefixes, w)) * c for w, c in words.items())
    return n_bytes and n_bounds / n_bytes


def train_bpe(words: Counter, vocab_size: int):
    """A byte-level BPE (no normaliser, no pre-tokenizer: the words are pre-tokens already)."""
    from tokenizers import Tokenizer, models, trainers

    tok = Tokenizer(models.BPE())
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=BYTE_CHARS, show_progress=False)
    tok.train_from_iterator((to_chars(w) for w, c in words.items() for _ in range(c)), trainer)
    return tok


def truncate_bpe(tokenizer, n_merges: int):
    """The same BPE with only its first n_merges merges (and their tokens)."""
    from tokenizers import Tokenizer, models

    merges = json.loads(tokenizer.to_str())["model"]["merges"][:n_merges]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]
    vocab = {c: i for i, c in enumerate(BYTE_CHARS)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return Tokenizer(models.BPE(vocab=vocab, merges=merges))


def fit_bpe(words: Counter, target_rate: float, max_vocab: int = CAUSAL_MAX_VOCAB, held_out: Counter | None = None):
    """Train a BPE on `words` and bisect its number of merges so that the causal rate on
    `held_out` (default: `words` themselves) is closest to target_rate.
    Returns (tokenizer, info) with info = {bpe_vocab_size, bpe_rate, bpe_target_rate}, the rate
    measured on `held_out`."""
    scored = words if held_out is None else held_out
    full = train_bpe(words, max_vocab)
    n_max = len(json.loads(full.to_str())["model"]["merges"])
    best, rate = bisect_merges(n_max, lambda m: causal_rate(truncate_bpe(full, m), scored), target_rate)
    tok = truncate_bpe(full, best)
    return tok, {"bpe_vocab_size": tok.get_vocab_size(), "bpe_rate": rate, "bpe_target_rate": target_rate}


def split_held_out(documents: list[bytes], share: float = HELD_OUT_SHARE) -> tuple[list[bytes], list[bytes]]:
    """The fit sample cut in two at `share` of its bytes from the end, in document order: the
    part a BPE trains on and the part its merge count is fitted on (the document at the cut is
    split in two)."""
    cut = round(sum(len(d) for d in documents) * (1 - share))
    fit, held, seen = [], [], 0
    for doc in documents:
        keep = max(0, min(len(doc), cut - seen))
        fit += [doc[:keep]] if keep else []
        held += [doc[keep:]] if keep < len(doc) else []
        seen += len(doc)
    return fit, held


def sample_words(documents: list[bytes], max_bytes: int = FIT_BYTES) -> Counter:
    words, seen = Counter(), 0
    for doc in documents:
        doc = doc[: max_bytes - seen]
        words.update(split_pretokens(doc))
        seen += len(doc)
        if seen >= max_bytes:
            break
    return words


@register("bpe-causal")
class CausalBPE(TokenizerStrategy):
    """Boundaries at the first byte of each causal BPE token (the greedy prefix rule above):
    learntok's causal stand-in for the paper's BPE guidance (`bpe`). `fit` trains the tokenizer."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self._forget_tokenizer()

    def _forget_tokenizer(self) -> None:
        self._prefixes: frozenset[str] | None = None  # the tokenizer's token prefixes (a cache of the buffer)
        self._word_cache: dict[bytes, list[int]] = {}

    def fit(self, documents: list[bytes]) -> dict:
        fit, held = split_held_out(documents)
        tok, info = fit_bpe(sample_words(fit), self.cfg.target_rate, held_out=sample_words(held) or None)
        if abs(info["bpe_rate"] - self.cfg.target_rate) > RATE_TOLERANCE:
            warnings.warn(
                f"BPE cannot reach boundary rate {self.cfg.target_rate}: the closest, with "
                f"{info['bpe_vocab_size']} tokens, gives {info['bpe_rate']:.4f}",
                stacklevel=2,
            )
        self.set_tokenizer(tok)
        return info

    def word_starts(self, word: bytes) -> list[int]:
        if word not in self._word_cache:
            if len(self._word_cache) > 500_000:
                self._word_cache.clear()
            if self._prefixes is None:
                self._prefixes = token_prefixes(self.tokenizer())
            self._word_cache[word] = causal_word_starts(self._prefixes, word)
        return self._word_cache[word]

    def boundaries(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T) ids -> (B, T) float decisions, computed on the CPU from the bytes."""
        xc = x.cpu()
        starts = pretoken_starts(xc).numpy()
        ids = xc.numpy()
        a = np.zeros(ids.shape, dtype=np.float32)
        for b in range(ids.shape[0]):
            edges = np.flatnonzero(starts[b]).tolist() + [ids.shape[1]]
            for s, e in zip(edges[:-1], edges[1:]):
                if not is_byte(ids[b, s]):
                    a[b, s] = 1.0
                else:
                    a[b, s:e] = self.word_starts(bytes(ids[b, s:e].astype(np.uint8)))
        return torch.from_numpy(a).to(x.device)

    # Incremental decoding: the state is the previous byte (for pre-token starts) and, per row,
    # the current token's characters; the greedy causal rule extends it while it stays a prefix.
    def init_state(self, batch, device) -> dict:
        return {"prev": torch.full((batch,), BOS, device=device), "current": [""] * batch}

    def step(self, h, x, t, state, early_logits=None, greedy=False, boundaries=None):
        if self._prefixes is None:
            self._prefixes = token_prefixes(self.tokenizer())
        pair = torch.stack([state["prev"], x], dim=1)  # (B, 2)
        starts = pretoken_starts(pair)[:, 1].tolist()  # (B,) a pre-token starts at x
        chars = [BYTE_CHARS[b] if is_byte(b) else "" for b in x.tolist()]
        if boundaries is None:
            extend = [
                not start and t > 0 and bool(ch) and bool(cur) and cur + ch in self._prefixes
                for start, ch, cur in zip(starts, chars, state["current"])
            ]
            boundaries = torch.tensor([0.0 if e else 1.0 for e in extend], device=x.device)
        a = boundaries.float()
        current = [ch if new else cur + ch for new, ch, cur in zip(a.tolist(), chars, state["current"])]
        return a, a, {"prev": x, "current": current}
