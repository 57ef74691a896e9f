"""How good are a model's boundaries? Chunk lengths, and precision / recall / F1 against
references: the three places a word boundary can sit, named by the tokens each gives, the
ends and the starts of UTF-8 characters (the references for scripts written without spaces,
such as Japanese and Chinese) and the starts of BPE tokens.

A boundary at byte position t (t >= 1; 0 is BOS) makes byte t a boundary byte: its token reads
the bytes after the previous boundary through t, so a chunk *ends* at its boundary byte
(learntok.text.display.chunk_starts, docs/tokenizer.md). A boundary at a word's last letter gives
tokens " word" (GPT-2's convention), one at the space after it tokens "word ", one at a word's
first letter tokens that close on it ("e w|ord"); a boundary at a character's last byte gives
chunks of whole characters.

Positions scored: real bytes t >= 2. The first byte of a window (t = 1) is left out: whether
a chunk starts there is decided by where the window was cut, not by the text.

Shapes: B batch, T bytes (BOS at t = 0).
"""

from __future__ import annotations

import numpy as np
import torch

from learntok.boundaries.common import decision_mask
from learntok.data.dataset import FIT_BYTES
from learntok.data.vocab import is_byte
from learntok.model.metrics import is_whitespace

HIST_MAX = 32  # chunk-length histogram: lengths 1..HIST_MAX, longer ones in one last bin


def scored_positions(x: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: real bytes (not BOS/EOS/PAD) at t >= 2."""
    m = is_byte(x)
    m[:, :2] = False
    return m


def _whitespace_now_and_before(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) bool each: byte t is whitespace; byte t-1 is whitespace (False at t = 0)."""
    ws = is_whitespace(x)
    prev = torch.zeros_like(ws)
    prev[:, 1:] = ws[:, :-1]
    return ws, prev


def word_starts(x: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: byte t is not whitespace and byte t-1 is a whitespace byte: a boundary at a
    word's first letter, whose token closes on it ("the w|ord": tokens "e w", "ord ...")."""
    ws, prev = _whitespace_now_and_before(x)
    return prev & ~ws & is_byte(x)


def space_starts(x: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: byte t is whitespace and byte t-1 is not (BOS counts as not): a boundary at
    the space after a word, whose token reads "word " (the space closes it)."""
    ws, prev = _whitespace_now_and_before(x)
    return ws & ~prev & is_byte(x)


def word_ends(x: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: byte t is not whitespace and byte t+1 is a whitespace byte: a boundary at a
    word's last letter, whose token reads " word" (the space opens the next one), the convention
    of GPT-2-style byte BPE. Not causal (it reads byte t+1): a reference, not a rule. The last
    byte of a window is never one."""
    ws = is_whitespace(x)
    nxt = torch.zeros_like(ws)
    nxt[:, :-1] = ws[:, 1:] & is_byte(x[:, 1:])
    return nxt & ~ws & is_byte(x)


def char_starts(x: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: byte t starts a UTF-8 character (it is not a continuation byte 10xxxxxx). In
    ASCII every byte does; in CJK text one byte in three. A boundary at a multi-byte character's
    first byte ends a chunk inside that character."""
    return is_byte(x) & ((x < 0x80) | (x >= 0xC0))


def char_ends(x: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: byte t is the last byte of a UTF-8 character (byte t+1 is not a continuation
    byte). A boundary there closes a chunk of whole characters. Reads byte t+1; the last byte of
    a row counts as an end."""
    nxt = torch.zeros_like(x)
    nxt[:, :-1] = x[:, 1:]
    continued = is_byte(nxt) & (nxt >= 0x80) & (nxt < 0xC0)
    return is_byte(x) & ~continued


# What boundaries are scored against, by the tokens each gives (a chunk ends at its boundary
# byte): the three places a word boundary can sit, one byte apart, in the order they come in the
# text, then the ends and the starts of characters. The keys name the tokens; the functions name
# the boundary bytes.
REFERENCES = {
    "space_word": word_ends,  # tokens " word": a boundary at a word's last letter
    "word_space": space_starts,  # tokens "word ": a boundary at the space after a word
    "first_letter": word_starts,  # tokens that close on a word's first letter ("e w", "ord ...")
    "char_ends": char_ends,  # chunks of whole characters
    "char_starts": char_starts,  # chunks that end on a character's first byte (inside it, past ASCII)
}

# How a report names each reference.
REFERENCE_LABELS = {
    "space_word": 'tokens " word"',
    "word_space": 'tokens "word "',
    "first_letter": "tokens closing on a word's first letter",
    "char_ends": "whole characters (boundary at a character's last byte)",
    "char_starts": "a character's first byte",
    "bpe_starts": "BPE token starts",
}

# The three word references, one byte apart: where a policy that finds words may put its cut.
WORD_REFERENCES = ("space_word", "word_space", "first_letter")
# Keys earlier releases stored these references under (eval.json of older runs), by today's key.
LEGACY_KEYS = {"word_ends": "space_word", "space_starts": "word_space", "word_starts": "first_letter"}


def settled_on(report: dict, lift: float = 2.0) -> str | None:
    """Which of the three places a word boundary can sit the boundaries have settled on, from an
    evaluation's figures: the word reference of highest F1, when it recalls at least `lift` times
    what random cuts at the same rate would (they recall a share equal to the rate of any
    reference: recall / rate is the lift over chance). None when no reference is above chance."""
    rate = report.get("boundary_rate", 0.0)
    scored = [(report[k]["f1"], k) for k in WORD_REFERENCES if k in report and rate > 0]
    best = max(scored, default=None)
    return best[1] if best and report[best[1]]["recall"] >= lift * rate else None


def prf_counts(pred: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(3,) int64 on the device: [true positives, predicted, reference] over positions in `mask`;
    pred, ref, mask (B, T)."""
    p, r = pred.bool() & mask, ref.bool() & mask
    return torch.stack([(p & r).sum(), p.sum(), r.sum()])


def prf(counts) -> dict[str, float]:
    """Precision, recall and F1 from [tp, predicted, reference] (0 where undefined)."""
    tp, n_pred, n_ref = (int(c) for c in counts)
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_ref if n_ref else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def chunk_lengths(x: torch.Tensor, a: torch.Tensor) -> np.ndarray:
    """Lengths in bytes of the chunks of every row: a chunk starts at the first real byte and at
    every boundary after it, and ends before the next start or after the last real byte."""
    x, a = x.cpu().numpy(), a.detach().cpu().numpy() > 0.5
    lengths = []
    for row_x, row_a in zip(x, a):
        n = int(is_byte(row_x[1:]).sum())  # real bytes after BOS (they come first)
        if n == 0:
            continue
        starts = np.flatnonzero(row_a[1 : n + 1])  # byte offsets where chunks start
        starts = np.union1d([0], starts)
        lengths.append(np.diff(np.append(starts, n)))
    return np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)


def chunk_length_histogram(x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """(HIST_MAX + 1,) int64 on the device, no host sync: `length_histogram(chunk_lengths(x, a))`
    (the plain reference, tested equal). A chunk starts at t = 1 and at each boundary t >= 2 on a
    real byte; it ends at the next start or after the row's last real byte."""
    real = decision_mask(x)  # (B, T); real bytes come first after BOS
    starts = real & (a > 0.5)
    starts[:, 1] = real[:, 1]  # (B, T)
    T = x.size(1)
    pos = torch.arange(T, device=x.device).expand_as(x)  # (B, T)
    end = real.sum(1, keepdim=True) + 1  # (B, 1) one past the last real byte
    at = torch.where(starts, pos, torch.full_like(pos, T + 1))  # (B, T) start positions, T + 1 elsewhere
    following = torch.full_like(at, T + 1)
    following[:, :-1] = at.flip(1).cummin(1).values.flip(1)[:, 1:]  # (B, T) first start after t
    length = torch.minimum(following, end) - pos  # (B, T) chunk length at start positions
    bins = (length.clamp(min=1, max=HIST_MAX + 1) - 1).flatten()  # (B T,) histogram bin at start positions
    # a sum of the starts into their bins: selecting them, or bincount's data-dependent size, is a host sync
    return torch.zeros(HIST_MAX + 1, dtype=torch.long, device=x.device).scatter_add_(0, bins, starts.flatten().long())


def length_histogram(lengths: np.ndarray) -> np.ndarray:
    """(HIST_MAX + 1,) counts: [i] = chunks of length i + 1, the last bin = longer than HIST_MAX."""
    return np.bincount(np.minimum(lengths, HIST_MAX + 1) - 1, minlength=HIST_MAX + 1)[: HIST_MAX + 1]


# ---------------------------------------------------------------- BPE reference


def reference_bpe(docs: list[bytes], vocab_size: int = 4096, max_bytes: int = FIT_BYTES):
    """A byte-level BPE (`tokenizers`) trained on `docs`, for the reference starts. Bytes are read
    as Latin-1 so that every byte is one symbol and offsets are byte offsets; words are pre-split
    GPT-2 style (a leading space joins the word). At most `max_bytes` bytes are used."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r" ?[^\s]+|\s+"), behavior="isolated")
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=[chr(i) for i in range(256)], show_progress=False, special_tokens=[]
    )
    texts, total = [], 0
    for d in docs:
        if total >= max_bytes:
            break
        texts.append(d[: max_bytes - total].decode("latin-1"))
        total += len(texts[-1])
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def bpe_starts(tokenizer, x: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: byte t starts a BPE token of its row's real bytes (tokenised as one text,
    read as Latin-1, so offsets are byte offsets). Works for any `tokenizers.Tokenizer` whose
    offsets count characters of its input."""
    out = torch.zeros(x.shape, dtype=torch.bool)
    rows = x.cpu().numpy()
    texts = [bytes(r[1:][is_byte(r[1:])].astype(np.uint8)).decode("latin-1") for r in rows]
    for b, enc in enumerate(tokenizer.encode_batch(texts, add_special_tokens=False)):
        starts = [s for s, e in enc.offsets if e > s]
        if starts:
            out[b, torch.tensor(starts, dtype=torch.long) + 1] = True
    return out.to(x.device)
