"""One GPU's training step measured on fake tensors, for `learntok config --plan` (learntok.train.plan):
its peak memory by kind (weights, gradients, optimizer state, the rest) and its counted FLOPs.

learntok.train.step.train_step runs once on fake tensors (torch._subclasses.fake_tensor: shapes, dtypes
and devices, no data; nothing is allocated), with bf16 autocast as on a GPU, the optimizer's state
in place as after any step, and boundaries prescribed at the target rate (a fake tensor has no
values to sample from). Tensors computed from the bytes and the boundaries alone stay real, so the
forward's host sync (its token counts) reads real numbers. `MemoryTally` adds up every storage
while it lives; FlopCounterMode counts the FLOPs. tests/test_plan.py checks the tally against the
CPU allocator's peak of the same step on real tensors.

Shapes: B micro-batch rows, T bytes a row.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map_only
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count
from torch.utils.weak import WeakIdKeyDictionary

from learntok.boundaries.common import bresenham
from learntok.run.config import RunConfig
from learntok.run.distributed import DistEnv
from learntok.model.flops import meta_model
from learntok.nn.layers import block_window_mask, window_mask  # cached masks: see cached_masks_forgotten
from learntok.util.runtime import resolve_dtype
from learntok.train.step import Engine, build_optimizer, train_step


class MemoryTally(TorchDispatchMode):
    """Bytes of the live tensor storages (fake or real) and their peak: each storage an op makes
    counts until it is freed; `hold` counts one made before (weights, optimizer state, inputs),
    with a kind ("params", "grads", "optimizer", or "" for the rest). `at_peak`: bytes by kind
    when the total peaked."""

    def __init__(self):
        super().__init__()
        self.records = WeakIdKeyDictionary()  # storage -> [bytes, kind]
        self.live, self.peak = {"": 0}, 0
        self.at_peak: dict[str, int] = {}

    def hold(self, t: torch.Tensor, kind: str = "") -> None:
        st = t.untyped_storage()
        record = self.records.get(st)
        if record is None:
            record = self.records[st] = [st.nbytes(), kind]
            weakref.finalize(st, self._free, record)
        elif record[1] != kind:  # a gradient, say, made by an op and kept
            self.live[record[1]] -= record[0]
            record[1] = kind
        else:
            return
        self.live[kind] = self.live.get(kind, 0) + record[0]
        if sum(self.live.values()) > self.peak:
            self.peak, self.at_peak = sum(self.live.values()), dict(self.live)

    def _free(self, record: list) -> None:
        self.live[record[1]] -= record[0]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.prim.device.default and isinstance(args[0], FakeTensor):
            return args[0].fake_device  # makes no tensor; autograd asks thousands of times a step
        out = func(*args, **(kwargs or {}))
        tree_map_only(torch.Tensor, self.hold, out)
        return out


class RealStaysReal(TorchDispatchMode):
    """Above a FakeTensorMode: an op whose tensor inputs are all real runs for real (the bytes,
    the prescribed boundaries and what is computed from them alone); any other op, and every
    factory, goes on to the fake mode."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensors = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        if tensors and not any(isinstance(t, FakeTensor) for t in tensors):
            with _disable_current_modes():
                return func(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


# The CPU's flash attention, counted as the GPU's (FlopCounterMode's table has the CUDA kernels
# only); the formulas receive shapes: (query, key, value) and (grad_out, query, key, value).
CPU_ATTENTION = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: lambda q, k, v, *_, **__: sdpa_flop_count(q, k, v),
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: lambda g, q, k, v, *_, **__: (
        sdpa_backward_flop_count(g, q, k, v)
    ),
}


@contextlib.contextmanager
def cached_masks_forgotten():
    """On leaving, forget the attention masks the layers cache: made under a fake mode, they are
    fake, and a later real forward must not find them."""
    try:
        yield
    finally:
        window_mask.cache_clear()
        block_window_mask.cache_clear()


def planned_boundaries(B: int, T: int, rate: float) -> torch.Tensor:
    """(B, T) float: BOS, then every row at `rate` exactly (the fixed stride)."""
    a = bresenham(torch.arange(T), rate).float()
    a[0] = 1.0
    return a.expand(B, T).contiguous()


def prepared_step(
    run_cfg: RunConfig, micro: int, accum: int = 1, mode: FakeTensorMode | None = None
) -> tuple[Engine, list[torch.Tensor]]:
    """What one GPU's training step runs on: the model (fp32 master weights) and AdamW with its
    state in place (one step on zero gradients: the state of every step after the first), made
    on fake tensors under `mode` (real ones without); and `accum` micro-batches of `micro` rows
    of random bytes with boundaries prescribed at the target rate, real in either case."""
    T, model = run_cfg.train.seq_len, meta_model(run_cfg.model)
    bounds = planned_boundaries(micro, T, run_cfg.model.target_rate)
    xs = [torch.randint(0, 256, (micro, T), generator=torch.Generator().manual_seed(i)) for i in range(accum)]
    with mode or contextlib.nullcontext():
        model.to_empty(device="cpu")
        model.init_weights(run_cfg.train.seed)
        optimizer = build_optimizer(model, run_cfg.optim, torch.device("cuda"))  # fused, as on a GPU
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    amp = resolve_dtype(run_cfg.system.dtype, torch.device("cuda"))
    env = DistEnv(0, 1, 0, torch.device("cpu"))
    return Engine(model, model, lambda x: model(x, boundaries=bounds), optimizer, env, amp), xs


def run_step(run_cfg: RunConfig, eng: Engine, xs: list[torch.Tensor]) -> None:
    train_step(eng, xs, run_cfg.objective, run_cfg.optim, run_cfg.optim.lr)


@dataclass
class StepFigures:
    micro: int  # rows in the measured micro-batch
    params: int  # parameters
    peak: int  # bytes at the peak of one micro-batch's forward + backward + optimizer step
    at_peak: dict[str, int]  # of which, by kind: params, grads, optimizer, "" (activations and the rest)
    state: dict[str, int]  # bytes of params, grads and optimizer state in all
    flops: int  # counted FLOPs of the micro-batch (FlopCounterMode), forward + backward
    attention_flops: int  # of which attention (the kernels' whole score blocks, masked parts too)
    matmul_flops: int  # of which matrix products
    root_params: int  # parameters outside the transformer blocks (FSDP's root unit)
    block_params: int  # parameters of the largest block (an FSDP unit)
    fixed: float = 0.0  # bytes of the activations that do not grow with the rows (e.g. bf16 copies of the weights)

    @property
    def activations(self) -> int:
        """Bytes at the peak besides the weights, gradients and optimizer state."""
        return self.peak - sum(self.at_peak.get(k, 0) for k in ("params", "grads", "optimizer"))

    def rows_apart(self, other: StepFigures) -> StepFigures:
        """These figures with `fixed` set by the line through their activations and `other`'s
        (the same step measured at another micro-batch)."""
        per_row = (other.activations - self.activations) / (other.micro - self.micro)
        return dataclasses.replace(self, fixed=self.activations - per_row * self.micro)


def measure_step(run_cfg: RunConfig, micro: int) -> StepFigures:
    """One GPU's training step at `micro` rows, on fake tensors: peak memory and FLOPs."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    eng, xs = prepared_step(run_cfg, micro, mode=mode)
    with mode, cached_masks_forgotten():
        model, optimizer = eng.model, eng.optimizer
        tally, counter = MemoryTally(), FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION)
        for t in (*model.buffers(), *xs):
            tally.hold(t)
        for p in model.parameters():
            tally.hold(p, "params")
            p.register_post_accumulate_grad_hook(lambda p: tally.hold(p.grad, "grads"))
        for t in (t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)):
            tally.hold(t, "optimizer")
        state = {"params": tally.live["params"], "grads": tally.live["params"], "optimizer": tally.live["optimizer"]}
        with RealStaysReal(), counter, tally:
            run_step(run_cfg, eng, xs)
    ops = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    blocks = [
        sum(p.numel() for p in b.parameters()) for s in (model.encoder, model.mid, model.decoder) for b in s.blocks
    ]
    return StepFigures(
        micro,
        model.num_params(),
        tally.peak,
        tally.at_peak,
        state,
        counter.get_total_flops(),
        sum(n for op, n in ops.items() if "attention" in op),
        sum(n for op, n in ops.items() if op.split(".")[1] in ("mm", "addmm", "bmm")),
        model.num_params() - sum(blocks),
        max(blocks, default=0),
    )
