"""A plan before the run (`learntok config --plan`): per GPU, the parameters, the peak memory of a
training step, its FLOPs, the steps, tokens and GPU-hours of the budget, and the micro-batch that
fits each card, data-parallel (DDP) and sharded (FSDP) over N GPUs (docs/reproduce.md).

Memory and FLOPs are measured, not modelled: learntok.train.train_step runs once on fake tensors
(torch._subclasses.fake_tensor: shapes, dtypes and devices, no data; nothing is allocated), with
bf16 autocast as on a GPU, the optimizer's state in place as after any step, and boundaries
prescribed at the target rate (a fake tensor has no values to sample from). Tensors computed
from the bytes and the boundaries alone stay real, so the forward's host sync (its token counts)
reads real numbers. `MemoryTally` adds up every storage while it lives; FlopCounterMode counts
the FLOPs. tests/test_plan.py checks the tally against the CPU allocator's peak of the same step
on real tensors, and the counted FLOPs against the analytic count (`model_flops`).

Shapes: B micro-batch rows, T bytes a row.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import weakref
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map_only
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count
from torch.utils.weak import WeakIdKeyDictionary

from learntok.boundaries.common import bresenham
from learntok.config import ConfigError, RunConfig
from learntok.distributed import DistEnv, micro_plan
from learntok.files import memory_budget
from learntok.model.aunet import AUNet
from learntok.nn.config import ModelConfig
from learntok.nn.layers import block_window_mask, window_mask  # cached masks: see cached_masks_forgotten
from learntok.runtime import resolve_dtype
from learntok.train import Engine, build_optimizer, train_step

GiB = 2**30
PEAK_FLOPS = 989e12  # H100 / H200 SXM dense bf16 FLOP/s
CARDS = (24, 40, 80, 141)  # GPU memory (GB as sold, about GiB) of the cards the plan fits
USABLE = 0.9  # of a card's memory for the step: the CUDA context, workspaces and fragmentation take the rest
WORLDS = (1, 2, 4, 8)  # GPU counts the plan shows
# Bounds checked before any work (`check_bounds`): the measured step holds the bytes and the
# prescribed boundaries as real tensors, this many bytes a (row, byte) at the larger micro-batch
# (int64 bytes, float boundaries and what is computed from them alone), and builds every block.
REAL_BYTES = 64
MAX_BLOCKS = 1024  # blocks of all three stacks: the largest paper preset has a few dozen
MAX_WEIGHTS = 10**13  # weights the plan can describe (an estimate by d_model**2 per block)
MAX_ROWS = 2**24  # train.batch_size: the plan tries each divisor of the per-GPU batch


# ---------------------------------------------------------------- analytic FLOPs


def attended(T: int, window: int | None) -> float:
    """Mean keys a causal query attends to over T positions (a window caps it)."""
    if window is None or window >= T:
        return (T + 1) / 2
    return window - window * (window - 1) / (2 * T)


def meta_model(cfg: ModelConfig) -> AUNet:
    """The model on the meta device: its shapes, built in no time (and no draw from the caller's RNG)."""
    with torch.device("meta"), torch.random.fork_rng(devices=[]):
        return AUNet(cfg)


def _matrices(*modules: torch.nn.Module) -> int:
    return sum(p.numel() for m in modules for p in m.parameters() if p.dim() == 2)


def model_flops(cfg: ModelConfig, seq_len: int, rate: float | None = None) -> dict[str, float]:
    """Training FLOPs (forward + backward) per byte, by part: 6 per weight per position it acts on
    (Kaplan et al. 2020), byte-level weights (encoder, decoder, both heads, the strategy's own) on
    every byte, token-level ones (mid) on a fraction `rate` (default rho*) of them; attention
    12 D per causal (query, key) pair (4 D forward, twice that backward): the byte window at byte
    level, the tokens so far at token level. Lookups, norms and elementwise work are left out.
    The model FLOPs of MFU (docs/reproduce.md)."""
    rate, model = cfg.target_rate if rate is None else rate, meta_model(cfg)
    attention = (cfg.n_down + cfg.n_up) * attended(seq_len, cfg.attn_window)
    attention += rate * cfg.n_mid * attended(int(rate * seq_len), None)
    return {
        "byte level": 6.0 * _matrices(model.encoder, model.decoder, model.head, model.early_head, model.strategy),
        "token level": 6.0 * rate * _matrices(model.mid),
        "attention": 12.0 * cfg.d_model * attention,
    }


def flops_per_byte(cfg: ModelConfig, seq_len: int, rate: float | None = None) -> float:
    return sum(model_flops(cfg, seq_len, rate).values())


# ---------------------------------------------------------------- measuring a step on fake tensors


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


# ---------------------------------------------------------------- the plan


def per_gpu_peak(f: StepFigures, micro: int, accum: int, world: int, fsdp: bool) -> float:
    """Peak bytes a GPU at `micro` rows a micro-batch, `accum` micro-batches a step, over `world`
    GPUs. Activations grow with the rows (but for their `fixed` part). While micro-batches
    accumulate, the earlier ones' gradients are held.
    DDP: every GPU holds everything, and its gradient buckets (one more copy of the gradients).
    FSDP: weights and optimizer state sharded over the GPUs, gradients too once reduced (whole
    while accumulating: they are reduced after the last micro-batch), plus the all-gathered
    weights of the root unit and of two blocks (the current one and the one prefetched)."""
    s, peak = f.state, f.at_peak
    act = f.fixed + (f.activations - f.fixed) * micro / f.micro
    grads = s["grads"] if accum > 1 else peak.get("grads", 0)
    if not fsdp:
        return s["params"] + s["optimizer"] + grads + act + (s["grads"] if world > 1 else 0)
    per_param = s["params"] / f.params
    gathered = per_param * (f.root_params + 2 * f.block_params) if world > 1 else 0
    return (s["params"] + s["optimizer"]) / world + (grads if accum > 1 else grads / world) + gathered + act


def largest_fit(f: StepFigures, batch: int, world: int, fsdp: bool, card_gib: float) -> int | None:
    """The largest micro-batch (a divisor of the per-GPU batch) whose step fits the card; None if none."""
    per_gpu = batch // world
    fits = [m for m in divisors(per_gpu) if per_gpu_peak(f, m, per_gpu // m, world, fsdp) <= USABLE * card_gib * GiB]
    return max(fits, default=None)


def divisors(n: int) -> list[int]:
    """The divisors of n >= 1, found up to its square root (not by trying every number to n)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def budget(run_cfg: RunConfig) -> dict[str, float]:
    """What the budget implies: steps, bytes, tokens at the target rate, model FLOPs per byte and in all."""
    tc, rate = run_cfg.train, run_cfg.model.target_rate
    n_bytes = tc.steps * tc.bytes_per_step
    per_byte = flops_per_byte(run_cfg.model, tc.seq_len)
    return {
        "steps": tc.steps,
        "bytes": n_bytes,
        "tokens": n_bytes * rate,
        "flops_per_byte": per_byte,
        "flops": per_byte * n_bytes,
    }


def budget_lines(run_cfg: RunConfig) -> list[str]:
    tc, b = run_cfg.train, budget(run_cfg)
    given = f" (train.train_bytes {tc.train_bytes:.3g})" if tc.train_bytes else ""
    return [
        f"budget: {b['steps']} steps x {tc.batch_size} rows x {tc.seq_len} bytes = {b['bytes']:.3g} bytes{given}, "
        f"{b['tokens']:.3g} tokens at the target rate {run_cfg.model.target_rate:g}",
        f"training FLOPs (analytic, forward + backward): {b['flops_per_byte']:.3g} a byte, {b['flops']:.3g} in all",
    ]


def gpu_hours(flops: float, mfu: float) -> float:
    return flops / (mfu * PEAK_FLOPS) / 3600


def check_bounds(run_cfg: RunConfig, micro: int) -> None:
    """Refuse, in one line and before anything is built, a plan that would hold more real bytes
    than this process can allocate (files.memory_budget), build more blocks than MAX_BLOCKS,
    describe more than MAX_WEIGHTS weights or try more than MAX_ROWS rows a step."""
    m, tc = run_cfg.model, run_cfg.train
    blocks = m.n_down + m.n_mid + m.n_up
    weights = blocks * m.d_model**2 * (4 + 3 * max(m.mlp_ratio_bytes, m.mlp_ratio_tokens)) + m.vocab_size * m.d_model
    real, budget = 2 * micro * tc.seq_len * REAL_BYTES, memory_budget()
    for bad, what in (
        (blocks > MAX_BLOCKS, f"{blocks} blocks (model.n_down + n_mid + n_up), more than {MAX_BLOCKS}"),
        (
            weights > MAX_WEIGHTS,
            f"about {weights:.3g} weights (model.d_model {m.d_model}), more than {MAX_WEIGHTS:.0e}",
        ),
        (tc.batch_size > MAX_ROWS, f"train.batch_size {tc.batch_size}, more than {MAX_ROWS} rows"),
        (
            real > budget,
            f"{real / GiB:.3g} GiB of real bytes and boundaries (micro-batch {micro} x train.seq_len "
            f"{tc.seq_len}), more than this process can allocate ({budget / GiB:.3g} GiB)",
        ),
    ):
        if bad:
            raise ConfigError(f"config --plan cannot measure {what}: give smaller sizes")


def plan(run_cfg: RunConfig, mfu: float = 0.4) -> dict:
    """Every figure of the plan (format_plan prints it): the measured step, the budget, GPU-hours
    at `mfu` of PEAK_FLOPS, and per GPU count the peak at the config's micro-batch and the largest
    micro-batch that fits each card, one GPU alone, with DDP and with FSDP."""
    tc = run_cfg.train
    micro, accum = micro_plan(tc.batch_size, tc.micro_batch_size, 1)
    check_bounds(run_cfg, micro)
    f, b = measure_step(run_cfg, micro).rows_apart(measure_step(run_cfg, 2 * micro)), budget(run_cfg)
    step_flops = b["flops_per_byte"] * tc.bytes_per_step
    rows, runs = [], [w for w in WORLDS if runs_at(tc.batch_size, tc.micro_batch_size, w)]
    for world in runs:
        m, a = micro_plan(tc.batch_size, tc.micro_batch_size, world)
        for fsdp in (False,) if world == 1 else (False, True):
            rows.append(
                {
                    "gpus": world,
                    "parallel": "FSDP" if fsdp else ("DDP" if world > 1 else "one GPU"),
                    "per_gpu_batch": tc.batch_size // world,
                    "micro": m,
                    "peak": per_gpu_peak(f, m, a, world, fsdp),
                    "fits": {c: largest_fit(f, tc.batch_size, world, fsdp, c) for c in CARDS},
                }
            )
    return {
        "step": f,
        "budget": b,
        "micro": micro,
        "accum": accum,
        "mfu": mfu,
        "step_flops": step_flops,
        "counted_step_flops": f.flops * accum,
        "gpu_hours": gpu_hours(b["flops"], mfu),
        "step_seconds": step_flops / (mfu * PEAK_FLOPS),
        "rows": rows,
        "not_run": [w for w in WORLDS if w not in runs],
    }


def runs_at(batch_size: int, micro_batch_size: int, world: int) -> bool:
    """Whether a run of this batch and micro-batch can train on `world` GPUs (`micro_plan` accepts it)."""
    per_gpu = batch_size // world
    return batch_size % world == 0 and per_gpu % (micro_batch_size or per_gpu) == 0


def format_plan(run_cfg: RunConfig, p: dict) -> str:
    m, tc, f, b = run_cfg.model, run_cfg.train, p["step"], p["budget"]
    dtype = "bf16 autocast" if resolve_dtype(run_cfg.system.dtype, torch.device("cuda")) else "fp32"
    act, per_row = f.activations / GiB, (f.activations - f.fixed) / f.micro / GiB
    lines = [
        f"plan per GPU: model.boundary {m.boundary}, d_model {m.d_model}, layers {m.n_down}-{m.n_mid}-{m.n_up}, "
        f"T {tc.seq_len}, {dtype}",
        f"parameters     {f.params / 1e6:.2f}M: weights {f.state['params'] / GiB:.3g} GiB, with gradients and AdamW state "
        f"{sum(f.state.values()) / GiB:.3g} GiB",
        f"batch          {tc.batch_size} rows x {tc.seq_len} bytes a step; micro-batch {p['micro']}, "
        f"{p['accum']} a step on one GPU",
        f"budget         {b['steps']} steps, {b['bytes']:.3g} bytes, {b['tokens']:.3g} tokens at the target rate {m.target_rate:g}",
        f"peak memory    {p['rows'][0]['peak'] / GiB:.3g} GiB on one GPU at micro-batch {p['micro']} ({p['accum']} a step): "
        f"activations and the rest {act:.3g} GiB ({per_row:.3g} GiB a row) at the peak of one micro-batch",
        f"FLOPs a step   {p['step_flops']:.3g} model FLOPs ({b['flops_per_byte']:.3g} a byte, analytic); counted "
        f"{p['counted_step_flops']:.3g} (FlopCounterMode: matmuls {f.matmul_flops * p['accum']:.3g}, attention "
        f"{f.attention_flops * p['accum']:.3g} over whole score blocks, masked parts too)",
        f"FLOPs a run    {b['flops']:.3g} model FLOPs",
        f"GPU-hours      {p['gpu_hours']:.3g} at {p['mfu']:.0%} MFU of {PEAK_FLOPS / 1e12:.0f} TFLOP/s (H100/H200 SXM dense "
        f"bf16), {p['step_seconds']:.3g} s a step on one GPU",
        "",
        f"per GPU: the peak at the config's micro-batch, and the largest micro-batch that fits a card (peak within "
        f"{USABLE:.0%} of it)",
        "| GPUs | parallel | per-GPU batch | micro-batch | peak GiB | " + " | ".join(f"{c} GB" for c in CARDS) + " |",
        "|---" * (5 + len(CARDS)) + "|",
    ]
    for r in p["rows"]:
        fits = " | ".join("-" if r["fits"][c] is None else str(r["fits"][c]) for c in CARDS)
        lines.append(
            f"| {r['gpus']} | {r['parallel']} | {r['per_gpu_batch']} | {r['micro']} | {r['peak'] / GiB:.3g} | {fits} |"
        )
    if p["not_run"]:
        lines.append(
            f"not on {', '.join(map(str, p['not_run']))} GPUs: train.batch_size {tc.batch_size} does not split "
            f"into micro-batches of {tc.micro_batch_size or 'the per-GPU batch'} there"
        )
    lines += [
        "",
        "Measured on fake tensors: one training step (two micro-batch sizes, for what grows with the rows), "
        "boundaries prescribed at the target rate (a sampled policy's rows vary around it), the CPU's attention "
        "kernels standing in for the GPU's (whose packed token level needs no padding: a little less). DDP: each "
        "GPU holds the weights, gradients, AdamW state and gradient buckets; FSDP: weights and AdamW state "
        "sharded over the GPUs, gradients too once reduced, plus the gathered root unit and two blocks; "
        "activations stay per GPU.",
    ]
    return "\n".join(lines)
