"""The trained checkpoints that ship inside the package, each a folder of learntok/pretrained/
with a model card (README.md), and models on the Hugging Face Hub. Wherever a run or model folder
is read, a shipped name ("tiny-shakespeare", or "learntok/tiny-shakespeare" as a `transformers`
user writes it) that is not a folder here stands for its folder, and a Hub repo id
("someuser/learntok-tiny") that is neither stands for its snapshot in huggingface_hub's cache,
fetched as `transformers` fetches one (offline, with HF_HUB_OFFLINE=1: from the cache alone).
Nothing here loads torch (the command line checks a name before the library loads)."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from learntok.util.errors import CheckpointError

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


# "owner/name" as the Hub spells a repo id: letters, digits, "-", "_", "." (not at either end)
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")


def is_repo_id(text: str) -> bool:
    """Whether `text` reads as a Hub repo id ("owner/name"), not a path of this machine."""
    return bool(REPO_ID.fullmatch(text)) and ".." not in text and not text.endswith((".", "-"))


def hub_folder(path: str | os.PathLike, **options) -> Path | None:
    """The local snapshot of the Hub repo `path` names, when it is a repo id and no folder here
    (huggingface_hub.snapshot_download: the cache, or a download, which HF_HUB_OFFLINE=1 rules
    out); None when it is not a repo id or huggingface_hub is not installed. `options` are
    snapshot_download's (revision, cache_dir, token, local_files_only, force_download,
    allow_patterns), as `transformers`' from_pretrained passes them. A repo id that cannot be had
    is one CheckpointError saying why."""
    text = os.fspath(path)
    if not is_repo_id(text) or Path(text).exists():
        return None
    try:
        import huggingface_hub  # the hf extra's; the core does without it
        import huggingface_hub.constants  # a submodule it loads lazily: imported by name
    except ImportError:
        return None
    offline = huggingface_hub.constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "") in (
        "1",
        "ON",
        "YES",
        "TRUE",
        "true",
        "yes",
        "on",
    )
    options = {k: v for k, v in options.items() if v is not None}
    local_only = bool(options.pop("local_files_only", False))
    try:
        return Path(huggingface_hub.snapshot_download(text, local_files_only=offline or local_only, **options))
    except Exception as e:  # huggingface_hub's errors: not in the cache offline, no such repo, no network
        why = "HF_HUB_OFFLINE is set" if offline else "local_files_only"
        where = f"in the local Hugging Face cache ({why})" if offline or local_only else "on the Hugging Face Hub"
        if options.get("revision") is not None:
            where += f" at revision {options['revision']!r}"
        reason = " ".join(str(e).split())
        reason = reason if len(reason) <= 100 else reason[:100] + "..."
        raise CheckpointError(
            f"{text} does not exist here, and no Hub repo of that name was found {where} ({type(e).__name__}: {reason})"
        ) from None


def named_folder(path: str | os.PathLike) -> Path | None:
    """The folder a name stands for: a shipped model's, or a Hub repo's snapshot; None for a path."""
    return shipped_folder(path) or hub_folder(path)


def unknown_name(text: str) -> str:
    """The words after "does not exist" for a path that names nothing here: the shipped names
    (and the nearest, for a typo) when `text` reads as a name rather than a path."""
    name = os.fspath(text).removeprefix(PREFIX)
    if os.sep in name or name.startswith(".") or not shipped_names():
        return ""
    near = difflib.get_close_matches(name, shipped_names(), n=1)
    hint = f"; did you mean {near[0]}?" if near else ""
    return f" (neither a folder nor a shipped model: {', '.join(shipped_names())}{hint})"
