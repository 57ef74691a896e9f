"""A CUDA machine without a GPU, for tests: `fake_cuda()` runs a block with fake tensors
(torch._subclasses.fake_tensor) on device `cuda`, so that learntok takes the branches only CUDA
takes (varlen attention, bf16 autocast, fused AdamW, torch.cuda calls) while PyTorch checks the
device, dtype and shape of every operation and allocates nothing. An operation that mixes a CUDA
tensor with one made on the CPU raises, as it would on a GPU. docs/reliability.md ("The CUDA
path, checked on CPU") lists what is reached and what cannot be.

What a CPU-only torch lacks, and what stands in for it here (each a few lines below):
- torch.cuda answers as on a one-GPU machine (is_available, current_device, RNG states) and
  `FakeCUDA` keeps FakeTensorMode from trying to reach a device.
- a CUDA device guard: torch's Python indexing and autograd's graph recording open one on a
  tensor's device. A CUDA build without GPUs gets a no-op guard from c10 when FakeTensorMode
  starts (`ensureCUDADeviceGuardSet`); a CPU-only build has none, so CUDA borrows the meta
  device's no-op guard in c10's registry for the duration (`cuda_device_guard`).
- values: a fake tensor has a shape, not numbers. `HostValues` keeps the numbers of whatever is
  made from data alone (the batch's bytes, buffers, positions, rule-based decisions: small
  tensors computed from known inputs and no weights or random draws), computed on the CPU beside
  the fakes, and answers every host read with them; a read of anything else (a value computed
  from the weights or a random draw) gets a stand-in and is logged, so a test can see every host
  sync a step makes.
- the backward: autograd's engine routes CUDA gradients through an accelerator runtime that only a
  CUDA build has, so `synthetic_backward` gives every parameter the loss reaches a gradient of its
  own device, dtype and shape (what autograd would give it) and the optimizer steps on those.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import sys
from pathlib import Path

import numpy as np
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

import learntok
import learntok.model.aunet  # loads the model's parts: token_counts among them

aten = torch.ops.aten
PACKAGE = Path(learntok.__file__).resolve().parent
DEVICE = torch.device("cuda", 0)


class FakeCUDA(FakeTensorMode):
    """FakeTensorMode that never reaches for a device, whatever torch.cuda says (the test says a
    GPU is there; FakeTensorMode would then copy constants to it)."""

    avoid_device_init = True


# ---------------------------------------------------------------- the device guard

_C10_CUDA, _C10_META = 1, 14  # c10::DeviceType values (c10/core/DeviceType.h)


@contextlib.contextmanager
def cuda_device_guard():
    """CUDA borrows the meta device's no-op guard while the block runs: c10's registry of device
    guards (one pointer per device type, `c10::impl::device_guard_impl_registry`) gets the meta
    entry in the CUDA slot, and the empty slot back after."""
    lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libc10.so"))
    registry = ctypes.addressof(ctypes.c_void_p.in_dll(lib, "_ZN3c104impl26device_guard_impl_registryE"))
    cuda, meta = (
        ctypes.c_void_p.from_address(registry + ctypes.sizeof(ctypes.c_void_p) * t) for t in (_C10_CUDA, _C10_META)
    )
    if cuda.value is not None:  # a CUDA build: it has its own guard
        yield
        return
    cuda.value = meta.value
    try:
        yield
    finally:
        cuda.value = None


# ---------------------------------------------------------------- values and host reads

READS = (aten._local_scalar_dense.default, aten.item.default)
INDEX = (aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default)
UNSEEN = (
    aten.empty.memory_format,
    aten.empty_strided.default,
    aten.empty_like.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
)  # their values are garbage: never kept
VALUE = "_host_value"  # the attribute of a fake tensor that holds its CPU value


def site() -> str:
    """`module.function` of the innermost learntok frame on the stack (where a host read happens)."""
    frame = sys._getframe(1)
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if PACKAGE in path.parents:
            return f"{path.stem}.{frame.f_code.co_name}"
        frame = frame.f_back
    return "test"


def tensors(args, kwargs):
    """The tensors among an operation's arguments (lists of tensors included)."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (b for b in a if isinstance(b, torch.Tensor))


def written(func) -> list[int]:
    """Positions of the arguments an operation writes into (in-place and out= operations)."""
    return [i for i, arg in enumerate(func._schema.arguments) if arg.alias_info is not None and arg.alias_info.is_write]


class HostValues(TorchDispatchMode):
    """Numbers for the fake tensors that are made from data alone, and answers to host reads.

    A value is kept for an operation's outputs when every tensor input has one, the operation
    draws no random numbers and each output has at most LIMIT elements; it is computed by the
    same operation on the CPU. Real tensors that enter (the batch, the buffers moved with a
    model) have their own values, parameters none. A read of a tensor without a value returns a
    stand-in: True, 0 or 0.0 for a scalar, zeros for `.numpy()`, and for `nonzero` (a
    data-dependent size) every element, then half of them, in turn, so that code branching on
    "all rows" and "some rows" takes both. `reads` logs (site, had a value) for every read of a
    tensor on the GPU (a host sync there): scalars, `.numpy()`, `nonzero`, copies to the CPU."""

    LIMIT = 1 << 22

    def __init__(self):
        super().__init__()
        self.reads: list[tuple[str, bool]] = []
        self._unknown_nonzero = 0
        self._ops: dict = {}

    @staticmethod
    def value(t):
        """The CPU value of tensor t, or None."""
        if isinstance(t, FakeTensor):
            return t.__dict__.get(VALUE)
        if isinstance(t, torch.nn.Parameter) or t.requires_grad:
            return None
        return t

    def read(self, t) -> torch.Tensor | None:
        """A host read of t: logged when t is on the GPU; its value or None."""
        v = self.value(t)
        if t.device.type == "cuda":
            self.reads.append((site(), v is not None))
        return v

    def numpy(self, t: FakeTensor) -> np.ndarray:
        with _disable_current_modes():
            return self._host_copy(t).numpy()

    def tolist(self, t: FakeTensor) -> list:
        """One read (one copy to the host), not one per element as FakeTensor's own tolist."""
        with _disable_current_modes():
            return self._host_copy(t).tolist()

    def _host_copy(self, t: FakeTensor) -> torch.Tensor:
        """t's value, or zeros (outside the modes)."""
        v = self.read(t)
        return (v if v is not None else torch.zeros(tuple(t.shape), dtype=t.dtype)).detach().clone()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in READS:
            v = self.read(args[0])
            if v is not None:
                with _disable_current_modes():
                    return v.item()
            return True if args[0].dtype == torch.bool else 0.0 if args[0].is_floating_point() else 0
        if func is aten.nonzero.default:
            return self._nonzero(args[0])
        if func in INDEX and any(i is not None and i.dtype == torch.bool for i in args[1]):
            indices = []
            for i in args[1]:
                indices.extend(self._nonzero(i).unbind(1) if i is not None and i.dtype == torch.bool else [i])
            args = (args[0], indices, *args[2:])
        if (
            func is aten._to_copy.default
            and args[0].device.type == "cuda"
            and kwargs.get("device") == torch.device("cpu")
        ):
            self.read(args[0])  # a copy to the host
        out = func(*args, **kwargs)
        self._propagate(func, args, kwargs, out)
        return out

    def _nonzero(self, t):
        v = self.read(t)
        if v is not None:
            with _disable_current_modes():
                nz = v.nonzero()
        else:
            self._unknown_nonzero += 1
            n = t.numel() if self._unknown_nonzero % 2 else max(1, t.numel() // 2)
            with _disable_current_modes():
                nz = torch.zeros(min(n, t.numel()), t.dim(), dtype=torch.long)
        out = torch.empty(tuple(nz.shape), dtype=torch.long, device=t.device)
        if v is not None:
            out.__dict__[VALUE] = nz
        return out

    def _propagate(self, func, args, kwargs, out) -> None:
        if func not in self._ops:  # (positions it writes, keeps no value)
            self._ops[func] = (written(func), func in UNSEEN or torch.Tag.nondeterministic_seeded in func.tags)
        writes, unseen = self._ops[func]
        if not unseen and all(self.value(a) is not None for a in tensors(args, kwargs)):
            outs = pytree.tree_leaves(out)
            real = (
                self._compute(func, args, kwargs)
                if all(o.numel() <= self.LIMIT for o in outs if isinstance(o, torch.Tensor))
                else None
            )
            if real is not None:
                for o, r in zip(outs, pytree.tree_leaves(real)):
                    if isinstance(o, FakeTensor) and isinstance(r, torch.Tensor):
                        o.__dict__[VALUE] = r if r.dtype == o.dtype else r.to(o.dtype)
                return
        for i in writes:  # written with unknown numbers: unknown now
            t = args[i] if i < len(args) else None
            if isinstance(t, FakeTensor):
                t.__dict__.pop(VALUE, None)
                if t._base is not None:
                    t._base.__dict__.pop(VALUE, None)

    def _compute(self, func, args, kwargs):
        """The operation on the inputs' CPU values (None if it cannot run there)."""
        to_cpu = lambda a: (  # noqa: E731
            self.value(a)
            if isinstance(a, torch.Tensor)
            else (torch.device("cpu") if isinstance(a, torch.device) else a)
        )
        real_args, real_kwargs = pytree.tree_map(to_cpu, (args, kwargs))
        if "pin_memory" in real_kwargs:
            real_kwargs["pin_memory"] = False
        try:
            with _disable_current_modes(), torch.no_grad():
                return func(*real_args, **real_kwargs)
        except Exception:  # a value we cannot compute is one we do not keep
            return None


# ---------------------------------------------------------------- the backward


def synthetic_backward(loss: torch.Tensor, *args, **kwargs) -> None:
    """Stands in for `loss.backward()`: every leaf the loss's graph reaches (a parameter)
    accumulates a gradient of its own device, dtype and shape, as autograd would give it."""
    seen, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)
        if leaf is not None:
            grad = torch.zeros_like(leaf)
            leaf.grad = grad if leaf.grad is None else leaf.grad + grad
        stack.extend(fn for fn, _ in node.next_functions)


# ---------------------------------------------------------------- the machine


class _RNG:
    """torch.cuda's random states, kept on the host."""

    def __init__(self):
        self.states: dict[int, torch.Tensor] = {}

    def get(self, device="cuda"):
        return self.states.get(_index(device), torch.zeros(16, dtype=torch.uint8))

    def set(self, state, device="cuda"):
        self.states[_index(device)] = state.clone()


def _index(device) -> int:
    device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    return device.index or 0


@contextlib.contextmanager
def fake_cuda(monkeypatch, tokens_per_byte: float):
    """The block runs on a one-GPU machine that does no arithmetic (module docstring). Yields the
    HostValues log. The forward's host read of the token counts (`token_counts`, beside
    `pack_rows`) gets each row at `tokens_per_byte` when the decisions have no value (they
    came from the weights or a random draw), so the token level runs at the shapes the rate gives."""
    loaded = {name: m for name, m in sys.modules.items() if name.startswith("learntok.")}
    true_counts = next(
        m.token_counts
        for name, m in loaded.items()
        if getattr(getattr(m, "token_counts", None), "__module__", None) == name
    )
    rng = _RNG()
    for name, fn in {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "is_bf16_supported": lambda *a, **k: True,
        "manual_seed_all": lambda seed: None,
        "manual_seed": lambda seed: None,
        "get_rng_state": rng.get,
        "set_rng_state": rng.set,
    }.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    host = HostValues()
    monkeypatch.setattr(FakeTensor, "numpy", lambda t, *args, **kwargs: host.numpy(t))
    monkeypatch.setattr(FakeTensor, "tolist", lambda t: host.tolist(t))
    monkeypatch.setattr(torch.Tensor, "backward", synthetic_backward)

    def token_counts(a):
        if host.value(a) is not None:
            return true_counts(a)
        host.reads.append(("pooling.token_counts", False))  # the read it stands in for
        B, T = a.shape
        k = min(T, 1 + math.ceil(tokens_per_byte * (T - 1)))
        return a.long().sum(1), B * k, k

    for module in loaded.values():
        if getattr(module, "token_counts", None) is true_counts:  # wherever it is defined or imported
            monkeypatch.setattr(module, "token_counts", token_counts)
    caches = [f for m in loaded.values() for f in vars(m).values() if hasattr(f, "cache_clear")]
    try:
        with cuda_device_guard(), FakeCUDA(allow_non_fake_inputs=True), host:
            yield host
    finally:
        for f in caches:  # e.g. attention masks memoised per device:
            f.cache_clear()  # no fake tensor outlives its mode
