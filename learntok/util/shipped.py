"""The trained checkpoints that ship inside the package, each a folder of learntok/pretrained/
with a model card (README.md). Wherever a run or model folder is read, a shipped name
("tiny-shakespeare", or "learntok/tiny-shakespeare" as a `transformers` user writes it) that is
not a folder here stands for its folder. Nothing here loads torch (the command line checks a
name before the library loads)."""

from __future__ import annotations

import os
from pathlib import Path

SHIPPED = Path(__file__).parents[1] / "pretrained"  # learntok/pretrained
PREFIX = "learntok/"  # the namespace a shipped name may be written in


def shipped_names() -> list[str]:
    """The shipped checkpoints' names, sorted."""
    return sorted(p.name for p in SHIPPED.iterdir() if (p / "model.safetensors").is_file()) if SHIPPED.is_dir() else []


def shipped_folder(path: str | os.PathLike) -> Path | None:
    """The folder a shipped name stands for; None when `path` exists here or names no shipped model."""
    text = os.fspath(path)
    if Path(text).exists():
        return None
    name = text.removeprefix(PREFIX)
    return SHIPPED / name if name in shipped_names() else None
