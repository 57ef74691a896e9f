"""Byte vocabulary: 256 byte values, then BOS, EOS, PAD; the table is padded to a multiple of 64."""

from __future__ import annotations

import torch

from learntok.data.symbols import BOS, EOS, N_SYMBOLS, PAD, VOCAB_SIZE
from learntok.util import unicode

__all__ = [
    "BOS",
    "EOS",
    "N_SYMBOLS",
    "PAD",
    "VOCAB_SIZE",
    "bos_rows",
    "decision_mask",
    "decode",
    "encode",
    "is_byte",
    "row_pieces",
]


def is_byte(x):
    """Whether ids are real bytes (not BOS, EOS or PAD): a bool mask of a tensor or array, or a
    bool for one int."""
    return x < 256


def decision_mask(x: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: the decisions that count (toward the boundary rate, the rate losses and the
    scores): real bytes (not BOS/EOS/PAD) at t >= 1. BOS's decision is always 1 and never scored."""
    real = is_byte(x)
    real[:, 0] = False
    return real


def encode(text: str | bytes, bos: bool = True) -> torch.Tensor:
    """str | bytes -> LongTensor (T,), BOS first. A str is encoded as UTF-8 (one with a surrogate
    is a ValueError: learntok.util.unicode.text); bytes are taken as they are."""
    data = unicode.text("learntok.data.encode", "text", text) if isinstance(text, str) else bytes(text)
    ids = torch.frombuffer(bytearray(data), dtype=torch.uint8).long() if data else torch.zeros(0, dtype=torch.long)
    return torch.cat([torch.tensor([BOS]), ids]) if bos else ids


def row_pieces(data: bytes, seq_len: int | None) -> list[bytes]:
    """`data` in pieces of seq_len - 1 bytes, each to be read after its own BOS (one piece without seq_len)."""
    piece = max(1, seq_len - 1) if seq_len else max(1, len(data))
    return [data[i : i + piece] for i in range(0, len(data), piece)]


def bos_rows(pieces: list[bytes]) -> torch.Tensor:
    """(B, T) ids: each piece after its own BOS, PAD on the right (T = 1 + the longest piece)."""
    return torch.nn.utils.rnn.pad_sequence([encode(p) for p in pieces], batch_first=True, padding_value=PAD)


def decode(ids) -> bytes:
    """Ids -> bytes, dropping BOS/EOS/PAD and anything not a byte."""
    vals = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    return bytes(v for v in vals if 0 <= v < 256)
