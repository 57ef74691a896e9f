"""The Python API's argument checks (docs/reliability.md): every public entry point of
`learntok.__all__` checks what it is given with these, before any work, so a wrong argument
raises TypeError (a wrong type) or ValueError (a wrong value) naming the entry point, the
parameter and what to pass, as the command line's messages do (learntok.cli.values); never an
error from deep inside ("'int' object is not iterable"). Numbers are checked against the same
ranges as the command line's options and the config fields (learntok.util.ranges).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import torch

from learntok.util.errors import ConfigError, wrong_type, wrong_value
from learntok.util.ranges import Range
from learntok.util.runtime import resolve_device


def is_int(value: Any) -> bool:
    """An integer that is not a bool (True is no count), a Python int or a numpy / 0-d torch one."""
    if isinstance(value, bool) or isinstance(value, torch.Tensor):
        return False
    return isinstance(value, int) or (hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in ("i", "u"))


def number(where: str, name: str, value: Any, kind: type = float, within: Range | None = None, none: bool = False):
    """`value` as a `kind` number (an int is a float too) in the range `within`, or None when
    `none`. Returns it as a Python int or float."""
    if value is None and none:
        return None
    what = (
        ("an integer" if kind is int else "a number") + (f" {within}" if within else "") + (" or None" if none else "")
    )
    if is_int(value):
        value = int(value)
    elif kind is float and isinstance(value, float):
        value = float(value)
    else:
        raise wrong_type(where, name, what, value)
    problem = (within or Range()).problem(kind(value) if kind is float else value)
    if problem:
        raise wrong_value(where, name, what, value)
    return kind(value)


def flag(where: str, name: str, value: Any) -> bool:
    """A bool (True or False); 0, 1 or a string are refused, so `greedy="no"` cannot pass as true."""
    if not isinstance(value, bool):
        raise wrong_type(where, name, "True or False", value)
    return value


def choice(where: str, name: str, value: Any, choices: Sequence[str], none: bool = False):
    """One of `choices` (or None when `none`)."""
    if value is None and none:
        return None
    what = "one of " + ", ".join(repr(c) for c in choices) + (" or None" if none else "")
    if not isinstance(value, str):
        raise wrong_type(where, name, what, value)
    if value not in choices:
        raise wrong_value(where, name, what, value)
    return value


def path(where: str, name: str, value: Any) -> Path:
    """A file or folder path: a str or an os.PathLike, not empty."""
    if not isinstance(value, (str, os.PathLike)):
        raise wrong_type(where, name, "a path (a str or pathlib.Path)", value)
    if not os.fspath(value):
        raise wrong_value(where, name, "a path (a str or pathlib.Path)", value)
    return Path(value)


def device(where: str, name: str, value: Any) -> torch.device:
    """A device this machine has (learntok.util.runtime.resolve_device): "cpu", "cuda", "cuda:N",
    "mps" or a torch.device; one it lacks says so ("this torch sees no CUDA GPU")."""
    if isinstance(value, torch.device):
        value = str(value)
    if not isinstance(value, str):
        raise wrong_type(where, name, 'a device name ("cpu", "cuda", "cuda:N", "mps") or a torch.device', value)
    try:
        return resolve_device(value)
    except ConfigError as e:
        raise ValueError(f"{where}: {name}: {e}") from None


def instance(where: str, name: str, value: Any, cls: type | tuple[type, ...], what: str, none: bool = False):
    """`value` of class `cls` (described as `what`), or None when `none`."""
    if (value is None and none) or isinstance(value, cls):
        return value
    raise wrong_type(where, name, what + (" or None" if none else ""), value)


def tensor(where: str, name: str, value: Any, dims: int, integer: bool, what: str) -> torch.Tensor:
    """A tensor of `dims` dimensions, of integers (ids, decisions) or floats."""
    if not isinstance(value, torch.Tensor) or (integer and (value.is_floating_point() or value.is_complex())):
        raise wrong_type(where, name, what, value)
    if not integer and not value.is_floating_point():
        raise wrong_type(where, name, what, value)
    if value.dim() != dims:
        raise ValueError(f"{where}: {name} must be {what}; got shape {tuple(value.shape)}")
    return value


def byte_ids(where: str, name: str, value: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Byte ids (B, T) an embedding can look up: at least one position (BOS), and, on the CPU,
    every id in [0, vocab_size) (an id outside it was an IndexError from deep inside the
    embedding). On an accelerator the ids are not read: that check would wait for the device
    once per forward, in training's hot path; a bad id there is the device's own error."""
    if value.size(1) == 0:
        raise ValueError(f"{where}: {name} is empty (shape {tuple(value.shape)}): it must hold BOS at least")
    if value.device.type == "cpu" and value.numel() and not 0 <= int(value.min()) <= int(value.max()) < vocab_size:
        found = int(value.min()) if int(value.min()) < 0 else int(value.max())
        raise ValueError(
            f"{where}: {name} must be byte ids in [0, {vocab_size}) (learntok.data.encode); got an id {found}"
        )
    return value
