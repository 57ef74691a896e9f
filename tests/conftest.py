"""Shared test helpers: a tiny model factory, the packaged Shakespeare text, JSON-lines and small
corpus files. Plain functions (importable: `from conftest import tiny_model`) and fixtures."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from learntok import AUNet, ModelConfig
from learntok.boundaries.options import kept_options

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "learntok" / "corpora" / "shakespeare.jsonl.gz"

# The smallest model that exercises every level: two heads of width 16, one block per level.
TINY = dict(d_model=32, n_heads=2, n_down=1, n_mid=1, n_up=1, attn_window=16)


def tiny_config(boundary: str = "learned", window: int | None = None, **overrides) -> ModelConfig:
    """TINY with `overrides`; `window` is the learned policy's w (ignored by strategies without one)."""
    strategy = dict(overrides.pop("strategy", {}))
    if window is not None:
        strategy.update(kept_options({"window": window}, boundary))
    return ModelConfig(**{**TINY, "boundary": boundary, **overrides, "strategy": strategy})


def tiny_model(boundary: str = "learned", seed: int = 0, **overrides) -> AUNet:
    """A freshly initialised tiny AUNet under `seed` (in training mode, like any new module)."""
    torch.manual_seed(seed)
    return AUNet(tiny_config(boundary, **overrides))


def shakespeare(n: int, skip: int = 5000) -> bytes:
    """n bytes of real prose from the packaged corpus (its first three documents), from `skip`."""
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        text = "".join(json.loads(line)["text"] for _, line in zip(range(3), f)).encode("utf-8")
    return text[skip : skip + n]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    """One JSON object a line, gzip-compressed when the name ends in .gz."""
    text = "".join(json.dumps(r) + "\n" for r in records).encode("utf-8")
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    return path


def corpus_text(n: int = 300) -> str:
    """A small plain-text corpus: n short sentences (about 50 bytes each)."""
    return " ".join(f"the quick brown fox {i} jumps over the lazy dog." for i in range(n))


@pytest.fixture
def corpus_file(tmp_path) -> Path:
    """A small text file to train on (data.source=PATH)."""
    path = tmp_path / "corpus.txt"
    path.write_text(corpus_text())
    return path
