"""Byte vocabulary: 256 byte values, then BOS, EOS, PAD; the table is padded to a multiple of 64."""
from __future__ import annotations

import torch

BOS = 256
EOS = 257
PAD = 258
N_SYMBOLS = 259
VOCAB_SIZE = 320  # N_SYMBOLS padded to a multiple of 64


def is_byte(x):
    """Whether ids are real bytes (not BOS, EOS or PAD): a bool mask of a tensor or array, or a
    bool for one int."""
    return x < 256


def encode(text: str | bytes, bos: bool = True) -> torch.Tensor:
    """str | bytes -> LongTensor (T,), BOS first. A str is encoded as UTF-8; bytes are taken as they are."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    ids = torch.frombuffer(bytearray(data), dtype=torch.uint8).long() if data else torch.zeros(0, dtype=torch.long)
    return torch.cat([torch.tensor([BOS]), ids]) if bos else ids


def decode(ids) -> bytes:
    """Ids -> bytes, dropping BOS/EOS/PAD and anything not a byte."""
    vals = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    return bytes(v for v in vals if 0 <= v < 256)
