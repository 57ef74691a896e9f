"""Device, autocast dtype and seeds, resolved once at start-up and passed down (no work at import)."""

from __future__ import annotations

import contextlib
import random
import threading

import numpy as np
import torch

from learntok.util.errors import ConfigError


DEVICE_TYPES = ("cpu", "cuda", "mps")  # what learntok runs on (torch knows more: meta, xla, ...)


def resolve_device(name: str = "auto") -> torch.device:
    """The one device check (system.device and every --device): auto is CUDA when available,
    else CPU; a device of another type, or one this machine lacks (`cpu:1`, `cuda:99`), is a
    ConfigError. The CPU comes back as `cpu` (`cpu:0` too); a CUDA device with its index (`cuda`
    is the current one, as tensors report it: torch.device("cuda") != torch.device("cuda:0"))."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise ConfigError(f"unknown device {name!r} (expected auto, cpu, cuda, cuda:N, mps)") from None
    if device.type not in DEVICE_TYPES:
        raise ConfigError(f"device {name!r} is not supported: learntok runs on {', '.join(DEVICE_TYPES)}")
    if device.type == "cpu" and device.index not in (None, 0):
        raise ConfigError(f"device {name!r} is not available: the CPU is one device, cpu (or cpu:0)")
    if device.type == "cpu":
        device = torch.device("cpu")  # cpu:0 is the CPU too, a name safetensors does not take
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} is not available: this torch sees no CUDA GPU")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ConfigError(f"device {name!r} is not available: {torch.cuda.device_count()} GPU(s)")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {name!r} is not available on this machine")
    return device


BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of a CPU's 16-bit matrix units


def cpu_bf16_units(cpuinfo: str | None = None) -> list[str]:
    """The bf16 matrix units this CPU reports (AMX, AVX-512 BF16: the `flags` of /proc/cpuinfo;
    none where that file is missing, as off Linux)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return []
    flags = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            flags.update(value.split())
    return [f for f in BF16_CPU_FLAGS if f in flags]


def resolve_dtype(name: str, device: torch.device, units: list[str] | None = None) -> torch.dtype | None:
    """The autocast dtype, or None for plain fp32 (weights stay fp32: they are the master copy).
    bf16 runs on CUDA, and on a CPU with bf16 matrix units (`cpu_bf16_units`, or `units` given);
    `auto` is bf16 on CUDA and fp32 on every CPU (docs/benchmarks.md: the precision table)."""
    if name == "fp32" or (name == "auto" and device.type != "cuda"):
        return None
    if device.type == "cpu" and (cpu_bf16_units() if units is None else units):
        return torch.bfloat16
    if device.type != "cuda":
        raise ConfigError(
            f"system.dtype {name!r}: bf16 autocast needs a CUDA device or a CPU with bf16 matrix units "
            f"(AMX or AVX-512 BF16), got {device} without them"
        )
    return torch.bfloat16


def autocast(device: torch.device, dtype: torch.dtype | None):
    """Context for the forward pass: bf16 autocast when dtype is set, else nothing."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def set_threads(n: int) -> None:
    """torch's CPU threads (0: leave torch's default, every core). Runs that share a machine
    should take one each: two processes with every core each thrash (a step 10x slower)."""
    if n > 0:
        torch.set_num_threads(n)


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


# The state a block borrows and gives back: a model's rate knob, online control and training flag
# (boundaries.rate's rate_knob_kept, eval_mode, rate.set_rate) and torch's global RNG, which every
# private stream is swapped into (PrivateRNG.active). Process-wide, as the RNG is; reentrant, as
# these blocks nest. Every block that changes such state for a while holds it, so a thread never
# sees another's (generation in one thread, Tokenizer.encode at a rate in another: docs/reliability.md).
MODEL_STATE = threading.RLock()


class PrivateRNG:
    """A seeded random stream of its own, swapped in around each use: reproducible under a seed,
    and the caller's global RNG is untouched, even while the stream is suspended between uses
    (generation swaps it in around each byte)."""

    def __init__(self, seed: int | None, device: torch.device | None = None):
        self.devices = [device] if device is not None and device.type == "cuda" else []
        with MODEL_STATE:
            if seed is None:
                seed = int(torch.randint(0, 2**62, ()))
            self.states = self._seeded(seed)

    def _seeded(self, seed: int) -> list[torch.Tensor]:
        with torch.random.fork_rng(devices=self.devices):
            torch.manual_seed(seed)
            return self._get()

    def _get(self) -> list[torch.Tensor]:
        return [torch.get_rng_state()] + [torch.cuda.get_rng_state(d) for d in self.devices]

    @contextlib.contextmanager
    def active(self):
        with MODEL_STATE, torch.random.fork_rng(devices=self.devices):
            torch.set_rng_state(self.states[0])
            for d, s in zip(self.devices, self.states[1:]):
                torch.cuda.set_rng_state(s, d)
            try:
                yield
            finally:
                self.states = self._get()


def rng_snapshot(device: torch.device | None = None) -> list[torch.Tensor]:
    """The global RNG state now (CPU, and `device`'s when it is a CUDA device): see `replayed`."""
    cuda = device is not None and device.type == "cuda"
    return [torch.get_rng_state()] + ([torch.cuda.get_rng_state(device)] if cuda else [])


@contextlib.contextmanager
def replayed(snapshot: list[torch.Tensor], device: torch.device | None = None):
    """Run a block from an `rng_snapshot`, so that it draws again what was drawn after the
    snapshot; the RNG is back where it was after the block."""
    cuda = device is not None and device.type == "cuda"
    with MODEL_STATE, torch.random.fork_rng(devices=[device] if cuda else []):
        torch.set_rng_state(snapshot[0])
        if cuda:
            torch.cuda.set_rng_state(snapshot[1], device)
        yield


def isolated_rng(seed: int, device: torch.device | None = None):
    """Run a block (evaluation, sample segmentations) under its own seed without disturbing the
    training RNG stream: a resumed run then sees exactly the same random draws."""
    return PrivateRNG(seed, device).active()


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module):
    """The model in eval mode for the block, its training flag restored after (MODEL_STATE held)."""
    with MODEL_STATE:
        was_training = model.training
        model.eval()
        try:
            yield
        finally:
            model.train(was_training)


@contextlib.contextmanager
def inference(model: torch.nn.Module, seed: int, device: torch.device | None = None):
    """Evaluation mode under a private seed: no gradients, the model in eval mode (restored after),
    and an RNG stream of its own so the caller's (training) stream is untouched."""
    with eval_mode(model), torch.no_grad(), isolated_rng(seed, device):
        yield
