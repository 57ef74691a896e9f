"""Byte batches for training and evaluation.

Each split is held as one uint8 array of all its documents' bytes plus document offsets. A row
is BOS followed by T-1 bytes. Training rows are random windows, a pure function of
(seed, step, rank) so that a resumed run sees exactly the batches it would have seen. Evaluation
walks every document in consecutive windows so that each byte is scored exactly once.

Dimension letters: B batch rows, T sequence length (BOS included), N bytes per row = T - 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

import learntok.data.shards as shards
from learntok.data.corpora import BUILTINS, load_named_documents, source_path
from learntok.data.split import SPLITS, small_split, split_named_documents
from learntok.data.vocab import BOS, EOS, PAD
from learntok.util.errors import DataError
from learntok.util.files import memory_budget
from learntok.util.typed_fields import config_fields
from learntok.util.ranges import FRACTION, SEED, ranged

ALL = "all"  # the split of ByteData.from_config(..., unsplit=True): every document of the source
FIT_BYTES = 4_000_000  # training bytes a fit reads (a strategy's `fit`, the reference BPE): `sample_documents`


def path_bytes_only(text: str) -> bool:
    """Whether `text` is not UTF-8 text only by bytes that os.fsdecode escaped (U+DC80..U+DCFF)."""
    try:
        text.encode("utf-8")
        return False
    except UnicodeEncodeError:
        pass
    try:
        text.encode("utf-8", "surrogateescape")
        return True
    except UnicodeEncodeError:
        return False


@dataclass
class DataConfig:
    # built-in corpus (shakespeare, kjv, python-stdlib, python-docs, python-rst,
    # debref-de/fr/es/ja/zh) or a path: text file,
    # folder, .jsonl(.gz), .parquet, prepared data folder (index.json)
    source: str = "shakespeare"
    text_field: str = "text"  # JSONL field / parquet column that holds a document's text
    val_fraction: float = ranged(0.05, FRACTION)  # fraction of documents (pieces, for few ones) held out for validation
    test_fraction: float = ranged(0.05, FRACTION)  # fraction of documents (pieces, for few ones) held out for test
    split_seed: int = ranged(0, SEED)  # seed of the document shuffle that assigns splits; independent of train.seed
    # True: windows run across documents joined by EOS; False: windows inside one document, PAD after its end
    packed: bool = False

    def __post_init__(self) -> None:
        # each field's type and range, its strings Unicode text (learntok.util.typed_fields); but a source that
        # is a path may hold bytes that are not UTF-8, as os.fsdecode gives them (U+DC80..U+DCFF,
        # `eval --source` with such a name): it is checked as the path's bytes, never saved as text
        source = self.source
        if isinstance(source, str) and path_bytes_only(source):
            object.__setattr__(self, "source", "path")
        config_fields(self)
        object.__setattr__(self, "source", source)
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError(
                f"data.val_fraction {self.val_fraction} + data.test_fraction {self.test_fraction} must be "
                f"< 1 (the rest is the training split)"
            )


def anchored_source(source: str) -> str:
    """`data.source` as a run stores it: a built-in corpus's name as it is, a path made absolute
    (against the current folder, which is what it means now), so that the run, evaluated later
    from any folder, reads the file it was trained on and not another of the same name."""
    if not str(source).strip() or (source in BUILTINS and not shards.is_prepared(source)):
        return source
    return os.path.abspath(source_path(source))


@dataclass(frozen=True)
class SplitBytes:
    """One split: all documents' bytes end to end, and where each document starts."""

    data: np.ndarray  # (total bytes,) uint8; a memmap (or shards.ShardedBytes) for a prepared folder
    offsets: np.ndarray  # (n_docs + 1,) int64: document i is data[offsets[i]:offsets[i + 1]]

    @classmethod
    def from_documents(cls, docs: list[bytes]) -> SplitBytes:
        docs = [d for d in docs if d]
        data = np.frombuffer(b"".join(docs), dtype=np.uint8)
        offsets = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum([len(d) for d in docs], out=offsets[1:])
        return cls(data, offsets)

    @classmethod
    def concat(cls, parts: list[SplitBytes]) -> SplitBytes:
        """Several splits seen as one, without copying their bytes."""
        nonempty = [p for p in parts if len(p.data)]
        data = shards.ShardedBytes([p.data for p in nonempty]) if nonempty else np.empty(0, dtype=np.uint8)
        shifts = np.cumsum([0] + [len(p.data) for p in parts])
        offsets = np.concatenate([[0]] + [np.asarray(p.offsets[1:]) + shift for p, shift in zip(parts, shifts)])
        return cls(data, offsets.astype(np.int64))

    @property
    def lengths(self) -> np.ndarray:  # (n_docs,) int64
        return np.diff(self.offsets)


class ByteData:
    """The one way to read data: train/val/test byte splits of any source (a built-in corpus, a
    text file, a folder, JSONL, parquet or a prepared folder), their documents, and the batches
    drawn from them. With `unsplit`, a single split "all" holds every document of the source."""

    def __init__(self, splits: dict[str, list[bytes]], packed: bool = False, names: dict[str, list[str]] | None = None):
        unknown = set(splits) - set(SPLITS) - {ALL}
        if unknown:
            raise DataError(f"unknown split names {sorted(unknown)}; expected {', '.join(SPLITS)}")
        keep = {
            name: [(d, n) for d, n in zip(docs, (names or {}).get(name) or [None] * len(docs)) if d]
            for name, docs in splits.items()
        }
        kept_names = {
            name: [n for _, n in pairs]
            for name, pairs in keep.items()
            if names is not None and names.get(name) is not None
        }
        parts = {name: SplitBytes.from_documents([d for d, _ in pairs]) for name, pairs in keep.items()}
        if ALL not in parts:
            parts = {name: parts.get(name, SplitBytes.from_documents([])) for name in SPLITS}
        self._init(parts, packed, kept_names)

    def _init(self, splits: dict[str, SplitBytes], packed: bool, names: dict[str, list[str]] | None = None) -> None:
        self.packed = packed
        self._splits = splits
        self._names = names or {}  # split -> each document's file name (folders only)
        first = ALL if ALL in splits else "train"
        if not self.n_bytes(first):
            raise DataError(f"the {first} split is empty")

    @classmethod
    def from_prepared(cls, root: str, packed: bool = False, unsplit: bool = False) -> ByteData:
        """A prepared data folder (`learntok prepare`): each split memory-mapped, never read whole;
        its own split stands (data.split_seed and the fractions do not apply)."""
        index = shards.read_index(root)
        parts = {name: SplitBytes(*shards.open_split(root, name, index)) for name in SPLITS}
        self = cls.__new__(cls)
        self._init({ALL: SplitBytes.concat(list(parts.values()))} if unsplit else parts, packed)
        return self

    @classmethod
    def from_config(cls, cfg: DataConfig, unsplit: bool = False) -> ByteData:
        """The run's data as `cfg` describes it: the same documents in the same splits for
        training, evaluation and every tool."""
        source_path(cfg.source)  # an empty source is refused, not read as "."
        if shards.is_prepared(cfg.source):
            return cls.from_prepared(cfg.source, packed=cfg.packed, unsplit=unsplit)
        docs, names = load_named_documents(cfg.source, cfg.text_field)
        if unsplit:
            return cls({ALL: docs}, packed=cfg.packed, names=None if names is None else {ALL: names})
        splits, split_names = split_named_documents(
            docs, names, seed=cfg.split_seed, val_fraction=cfg.val_fraction, test_fraction=cfg.test_fraction
        )
        return cls(splits, packed=cfg.packed, names=split_names)

    @property
    def split_names(self) -> tuple[str, ...]:
        return tuple(self._splits)

    def n_bytes(self, split: str) -> int:
        return len(self._get(split).data)

    def n_documents(self, split: str) -> int:
        return len(self._get(split).offsets) - 1

    def names(self, split: str) -> list[str] | None:
        """Each document's file name relative to the source folder (None unless the source is a folder)."""
        self._get(split)
        return self._names.get(split)

    def documents(self, split: str, limit: int | None = None) -> Iterator[bytes]:
        """The split's documents as bytes, one at a time (the first `limit` of them if given)."""
        s = self._get(split)
        n = self.n_documents(split) if limit is None else min(limit, self.n_documents(split))
        for i in range(n):
            yield s.data[int(s.offsets[i]) : int(s.offsets[i + 1])].tobytes()

    def sample_documents(self, split: str, max_bytes: int, seed: int = 0) -> list[bytes]:
        """A bounded random sample of the split for fitting (e.g. the bpe strategy's tokenizer):
        documents in a seeded random order until `max_bytes` bytes, the last one cut. Reads at
        most max_bytes bytes, however large the split."""
        s, n = self._get(split), self.n_documents(split)
        rng = np.random.default_rng(seed)
        order = rng.permutation(n) if n <= 1 << 20 else rng.choice(n, size=min(n, 1 << 20), replace=False)
        out, total = [], 0
        for i in order.tolist():
            if total >= max_bytes:
                break
            a, b = int(s.offsets[i]), int(s.offsets[i + 1])
            out.append(s.data[a : min(b, a + max_bytes - total)].tobytes())
            total += len(out[-1])
        return out

    def train_batch(
        self, step: int, batch_size: int, seq_len: int, seed: int, rank: int = 0, world: int = 1
    ) -> torch.Tensor:
        """(B, T) LongTensor of random training windows; a pure function of (seed, step, rank).

        Windows start uniformly over all bytes, so documents are drawn in proportion to length.
        `world` only checks `rank`: each rank draws its own B rows from its own stream.
        """
        _check_rank(rank, world)
        s, n = self._get("train"), self._bytes_per_row("train", seq_len)
        rng = np.random.default_rng([seed, step, rank])
        if self.packed:
            rows = _packed_rows(s, rng, batch_size, n)
        else:
            lengths = s.lengths
            doc = np.searchsorted(s.offsets, rng.integers(0, len(s.data), batch_size), side="right") - 1  # (B,)
            start = rng.integers(0, np.maximum(lengths[doc] - n, 0) + 1)  # (B,) offset inside the document
            rows = _window_rows(s.data, s.offsets[doc] + start, lengths[doc] - start, n)
        return _with_bos(rows)

    def eval_batches(
        self, split: str, batch_size: int, seq_len: int, max_bytes: int | None = None, rank: int = 0, world: int = 1
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Yield (x (B, T) LongTensor, doc_ids (B,) LongTensor) covering every byte of `split` once.

        Each document is cut into consecutive windows of T-1 bytes, the last one padded with PAD;
        windows never cross documents, whatever `packed` says. With `max_bytes`, scoring stops
        after that many bytes. Rank r of `world` gets windows r, r + world, ...; the last batch
        may have fewer than B rows.
        """
        s, n = self._get(split), seq_len - 1
        doc, start, scored = self._eval_windows(split, seq_len, max_bytes, rank, world)
        for i in range(0, len(doc), batch_size):
            b = slice(i, i + batch_size)
            rows = _window_rows(s.data, s.offsets[doc[b]] + start[b], scored[b], n)
            yield _with_bos(rows), torch.from_numpy(doc[b])

    def n_eval_batches(
        self, split: str, batch_size: int, seq_len: int, max_bytes: int | None = None, rank: int = 0, world: int = 1
    ) -> int:
        """How many batches `eval_batches` yields with these arguments (for a progress bar)."""
        return -(-len(self._eval_windows(split, seq_len, max_bytes, rank, world)[0]) // batch_size)

    def _eval_windows(
        self, split: str, seq_len: int, max_bytes: int | None, rank: int, world: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(document, start offset, bytes scored) of each of rank's evaluation windows, (W,) each."""
        _check_rank(rank, world)
        s = self._get(split)
        n = seq_len - 1
        if n < 1:
            raise DataError(f"seq_len {seq_len} leaves no room for bytes after BOS")
        if not len(s.data):
            raise DataError(f"the {split} split is empty")
        doc, start, scored = reading_windows(s.lengths, seq_len)
        if max_bytes is not None:
            before = np.cumsum(scored) - scored
            keep = before < max_bytes
            doc, start, scored = doc[keep], start[keep], np.minimum(scored[keep], max_bytes - before[keep])
        return doc[rank::world], start[rank::world], scored[rank::world]

    def _get(self, split: str) -> SplitBytes:
        if split not in self._splits:
            raise DataError(f"unknown split {split!r}; this data has {', '.join(self._splits)}")
        return self._splits[split]

    def check_window(
        self, split: str, seq_len: int, batch_size: int, position_bytes: int = 8, training: bool = False
    ) -> None:
        """Refuse, before anything is allocated, rows that cannot fit. Training draws windows of
        exactly seq_len - 1 bytes, so the split must hold one; and one batch (batch_size rows,
        or fewer when evaluation has fewer windows) at `position_bytes` a position (a lower bound
        on what a forward takes: learntok.evaluation.evaluate.position_bytes) must fit in files.memory_budget()."""
        if training:
            self._bytes_per_row(split, seq_len)
            if "val" in self._splits and not self.n_bytes("val"):
                raise DataError(
                    "the val split is empty (data.val_fraction 0, or a prepared folder without val documents): "
                    "training validates on it; give data.val_fraction > 0 or prepare the data with --val-fraction > 0"
                )
        s = self._get(split)
        rows = batch_size if training else min(batch_size, int((-(-s.lengths // max(seq_len - 1, 1))).sum()))
        need, budget = rows * seq_len * position_bytes, memory_budget()
        if need > budget:
            longest = int(s.lengths.max(initial=0))
            raise DataError(
                f"a batch of {rows} rows of {seq_len} bytes needs at least {need / 1e9:.1f} GB, more "
                f"than the {budget / 1e9:.1f} GB this process can use (the {split} split has "
                f"{self.n_bytes(split)} bytes, its longest document {longest}): give a smaller "
                f"seq_len or batch size"
            )

    def _bytes_per_row(self, split: str, seq_len: int) -> int:
        n_bytes = self.n_bytes(split)
        if seq_len < 2 or n_bytes < seq_len - 1:
            raise DataError(
                f"the {split} split has {n_bytes} bytes, fewer than one sequence of {seq_len} "
                f"(BOS + {seq_len - 1} bytes): give a seq_len of at most {max(n_bytes + 1, 2)}"
            )
        return seq_len - 1


def reading_windows(lengths: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How a text longer than one row is read: each text of `lengths` (n,) bytes in consecutive
    windows of seq_len - 1 bytes from its start, each after its own BOS (an empty text in none).
    Returns (text, start offset, bytes) of each window, (W,) int64 each, texts in order. The one
    definition: `eval`'s windows, lm-eval's rolling windows (learntok.evaluation.tasks) and the
    `transformers` model's reading of a row longer than its window (learntok.hf.modeling)."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)) or seq_len < 2:
        raise ValueError(f"reading_windows: seq_len {seq_len!r} must be an int of at least 2 (BOS and a byte)")
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.ndim != 1 or (lengths < 0).any():
        raise ValueError("reading_windows: lengths must be a 1-d array of byte counts, none negative")
    n = seq_len - 1
    per_text = -(-lengths // n)  # (n,) windows per text
    text = np.repeat(np.arange(len(lengths)), per_text)  # (W,)
    start = (np.arange(len(text)) - np.repeat(np.cumsum(per_text) - per_text, per_text)) * n  # (W,)
    return text, start, np.minimum(lengths[text] - start, n)


def _check_rank(rank: int, world: int) -> None:
    if not 0 <= rank < world:
        raise DataError(f"rank {rank} is not in [0, world {world})")


def _window_rows(data: np.ndarray, first: np.ndarray, length: np.ndarray, n: int) -> np.ndarray:
    """(B, N) int64: data[first[b] : first[b] + length[b]] per row, PAD after `length` bytes."""
    local = np.arange(n)  # (N,)
    valid = local < length[:, None]  # (B, N)
    idx = np.where(valid, first[:, None] + local, 0)  # (B, N) indices into data
    return np.where(valid, data[idx].astype(np.int64), PAD)  # widen first: PAD does not fit in uint8


def _packed_rows(s: SplitBytes, rng: np.random.Generator, batch_size: int, n: int) -> np.ndarray:
    """(B, N) int64 windows of the stream doc_0 EOS doc_1 EOS ..., built without materialising it."""
    n_docs = len(s.offsets) - 1
    stream_offsets = s.offsets + np.arange(n_docs + 1)  # (n_docs + 1,) start of each doc in the stream
    start = rng.integers(0, stream_offsets[-1] - n + 1, batch_size)  # (B,)
    pos = start[:, None] + np.arange(n)  # (B, N) positions in the stream
    doc = np.searchsorted(stream_offsets, pos, side="right") - 1  # (B, N)
    local = pos - stream_offsets[doc]  # (B, N) offset inside the document; == its length at its EOS
    is_eos = local == s.lengths[doc]
    idx = np.minimum(s.offsets[doc] + local, len(s.data) - 1)  # (B, N); clipped only where is_eos
    return np.where(is_eos, EOS, s.data[idx].astype(np.int64))


def _with_bos(rows: np.ndarray) -> torch.Tensor:
    """(B, N) -> (B, T) LongTensor with BOS in column 0."""
    x = np.empty((rows.shape[0], rows.shape[1] + 1), dtype=np.int64)
    x[:, 0] = BOS
    x[:, 1:] = rows
    return torch.from_numpy(x)


def small_split_warnings(data: ByteData) -> list[str]:
    """A line for each held-out split of `data` too small for a useful standard error (data.split)."""
    held_out = [s for s in ("val", "test") if s in data.split_names]
    return [w for s in held_out if (w := small_split(s, data.n_documents(s), data.n_bytes(s)))]
