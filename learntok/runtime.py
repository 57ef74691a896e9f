"""Device, autocast dtype and seeds, resolved once at start-up and passed down (no work at import)."""
from __future__ import annotations

import contextlib
import random

import numpy as np
import torch

from learntok.config import ConfigError


def resolve_device(name: str = "auto") -> torch.device:
    """auto: CUDA when available, else CPU. An explicit CUDA device that is absent is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"train.device {name!r} is not a device (auto, cpu, cuda, cuda:N)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"train.device {name!r}: CUDA is not available on this machine")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for plain fp32. bf16 autocast runs only on CUDA (weights stay
    fp32: they are the master copy); on CPU `auto` means fp32 and `bf16` is refused."""
    if name == "fp32" or (name == "auto" and device.type != "cuda"):
        return None
    if device.type != "cuda":
        raise ConfigError(f"train.dtype {name!r}: bf16 autocast needs a CUDA device, got {device}")
    return torch.bfloat16


def autocast(device: torch.device, dtype: torch.dtype | None):
    """Context for the forward pass: bf16 autocast when dtype is set, else nothing."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds every CUDA device too


def rng_state() -> dict:
    """Python, numpy, torch (and CUDA) RNG states, as tensors and plain containers only so that
    `torch.load(weights_only=True)` can read them back."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextlib.contextmanager
def isolated_rng(seed: int, device: torch.device | None = None):
    """Run a block (evaluation, sample segmentations) under its own seed without disturbing the
    training RNG stream: a resumed run then sees exactly the same random draws."""
    devices = [device] if device is not None and device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield
