"""A plan before the run (`learntok config --plan`): per GPU, the parameters, the peak memory of a
training step, its FLOPs, the steps, tokens and GPU-hours of the budget, and the micro-batch that
fits each card, data-parallel (DDP) and sharded (FSDP) over N GPUs (docs/reproduce.md).

Memory and FLOPs are measured, not modelled: learntok.train.fake_step runs one training step on fake
tensors and tallies its storages and FLOPs. tests/test_plan.py checks the tally against the CPU
allocator's peak of the same step on real tensors, and the counted FLOPs against the analytic
count (`model_flops`).
"""

from __future__ import annotations

import math

import torch

from learntok.run.config import RunConfig
from learntok.run.distributed import micro_plan
from learntok.util.errors import ConfigError
from learntok.model.flops import flops_per_byte
from learntok.train.fake_step import StepFigures, measure_step
from learntok.util.files import memory_budget
from learntok.util.runtime import resolve_dtype

GiB = 2**30
PEAK_FLOPS = 989e12  # H100 / H200 SXM dense bf16 FLOP/s
CARDS = (24, 40, 80, 141)  # GPU memory (GB as sold, about GiB) of the cards the plan fits
USABLE = 0.9  # of a card's memory for the step: the CUDA context, workspaces and fragmentation take the rest
WORLDS = (1, 2, 4, 8)  # GPU counts the plan shows
# Bounds checked before any work (`check_bounds`): the measured step holds the bytes and the
# prescribed boundaries as real tensors, this many bytes a (row, byte) at the larger micro-batch
# (int64 bytes, float boundaries and what is computed from them alone), and builds every block.
# The sizes of the model and the batch are bounded for every config (config.check_sizes).
REAL_BYTES = 64


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
    than this process can allocate (files.memory_budget). The blocks, weights and rows a step
    are bounded for every config when it is built (config.check_sizes)."""
    tc = run_cfg.train
    real, budget = 2 * micro * tc.seq_len * REAL_BYTES, memory_budget()
    if real > budget:
        raise ConfigError(
            f"config --plan cannot measure {real / GiB:.3g} GiB of real bytes and boundaries (micro-batch {micro} x "
            f"train.seq_len {tc.seq_len}), more than this process can allocate ({budget / GiB:.3g} GiB): give smaller sizes"
        )


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
