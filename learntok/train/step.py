"""One training step, and what it runs on: the learning-rate schedule, AdamW's parameter groups,
the engine (model, wrappers, optimizer, the weights' average) and the step itself.

    for each micro-batch: forward -> loss -> backward (weighted by its bytes); clip, step;
    adapt the boundary rate; update the weights' average.

The loop around it (learntok.train.loop) and the step measured on fake tensors
(learntok.train.fake_step) call the same `train_step`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from learntok.data.dataset import ByteData
from learntok.data.vocab import PAD
from learntok.model.aunet import AUNet
from learntok.model.objective import ObjectiveConfig, loss
from learntok.run.config import OptimConfig, RunConfig
from learntok.run.distributed import (
    DistEnv,
    all_reduce,
    compile_model,
    fit_strategy,
    micro_plan,
    no_grad_sync,
    slot_seed,
    wrap_model,
)
from learntok.util.runtime import autocast


def lr_at(step: int, cfg: OptimConfig, steps: int) -> float:
    """Learning rate for optimizer step `step` (0-based) of `steps`: linear warm-up from
    warmup_start * lr to cfg.lr over warmup_steps, then cosine decay to min_lr_ratio * lr at the
    last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (cfg.warmup_start + (1 - cfg.warmup_start) * (step + 1) / cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, steps - 1 - cfg.warmup_steps))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def build_optimizer(model: nn.Module, cfg: OptimConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only: not on norms, biases (1-D) or embeddings. A
    score-function policy's parameters (the learned strategy's) get lr * policy_lr_mult: under
    Adam, the policy's fixed logit scaling s = 1/16 (docs/design.md §3) also divides its effective
    learning rate by 16, which is what policy_lr_mult = 16 undoes while keeping p near rho* at
    initialisation. Other strategies' predictors (nawrot, hnet) have no such scaling and train
    at the backbone's learning rate, so the multiplier never confounds a comparison."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    policy = {id(p) for p in model.strategy.parameters()} if model.strategy.has_policy else set()
    params = [p for p in model.parameters() if p.requires_grad]
    groups = []
    for is_policy in (False, True):
        mine = [p for p in params if (id(p) in policy) == is_policy]
        decay = [p for p in mine if cfg.decay_all or (p.dim() >= 2 and id(p) not in embeddings)]
        rest = [p for p in mine if not cfg.decay_all and (p.dim() < 2 or id(p) in embeddings)]
        mult = cfg.policy_lr_mult if is_policy else 1.0
        groups += [
            {"params": ps, "weight_decay": wd, "lr_mult": mult}
            for ps, wd in ((decay, cfg.weight_decay), (rest, 0.0))
            if ps
        ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, fused=device.type == "cuda")


@dataclass
class Engine:
    """What a training step runs on."""

    model: AUNet  # the plain model: its strategy, its parameters
    wrapped: nn.Module  # model, DDP(model) or FSDP(model): what syncs gradients
    fwd: nn.Module  # wrapped, or its torch.compile wrapper: what the step calls
    optimizer: torch.optim.Optimizer
    env: DistEnv
    amp: torch.dtype | None  # autocast dtype (None: fp32)
    ema: AveragedModel | None = None  # the weights' moving average (optim.ema), updated after each step


def weight_average(model: AUNet, decay: float) -> AveragedModel | None:
    """The exponential moving average of `model`'s parameters and buffers (the rate controller's
    bias is one) at `decay`, for evaluation: torch's AveragedModel, whose first update copies the
    weights; None when decay is 0."""
    if not decay:
        return None
    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)


def train_step(
    eng: Engine,
    micro_batches: list[torch.Tensor],
    objective: ObjectiveConfig,
    optim: OptimConfig,
    lr: float,
    seeds: list[int] | None = None,
    gain: float | None = None,
) -> dict[str, torch.Tensor]:
    """One optimizer step over this rank's micro-batches (each (b, T)), accumulating gradients;
    then the rate controller, at `gain` (None: objective.rate_gain). Returns the step's metrics
    (means over micro-batches) as device tensors, no host sync. seeds[i] seeds micro-batch i's
    boundary draws (None: running RNG).

    Micro-batch i's loss is weighted by world * n_i / N (n_i its target bytes, N the global
    batch's, summed over ranks): DDP averages gradients over ranks, so the step follows the
    gradient of the byte-mean loss of the whole global batch. The batch-relative baseline is
    computed inside each micro-batch (docs/scaling.md)."""
    model, optimizer, env = eng.model, eng.optimizer, eng.env
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_mult", 1.0)
    counts = torch.stack([(x[:, 1:] != PAD).sum() for x in micro_batches]).float()  # (A,) target bytes
    total_bytes = all_reduce(counts.sum(), env)
    optimizer.zero_grad(set_to_none=True)
    step_metrics: dict[str, torch.Tensor] = {}
    for i, x in enumerate(micro_batches):
        if seeds is not None:
            torch.manual_seed(seeds[i])
        with no_grad_sync(eng.wrapped, last=i == len(micro_batches) - 1):
            with autocast(x.device, eng.amp):
                out = eng.fwd(x)
            total, metrics = loss(out, x, objective)
            (total * (env.world * counts[i] / total_bytes)).backward()
        metrics["loss"] = total.detach()  # the value backpropagated: the one checked for NaN/inf
        for k, v in metrics.items():
            v = v if k == "n_bytes" else v / len(micro_batches)  # n_bytes adds up, the rest average
            step_metrics[k] = step_metrics[k] + v if k in step_metrics else v
    if optim.grad_clip > 0:
        norm = nn.utils.clip_grad_norm_(model.parameters(), optim.grad_clip)
        step_metrics["grad_norm"] = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP: a DTensor
    optimizer.step()
    with torch.no_grad():
        gain = objective.rate_gain if gain is None else gain
        rate, sums = step_metrics["boundary_rate"], model.strategy.controller_sums()
        if gain > 0:
            rate = all_reduce(rate, env, "mean")  # every rank moves its controller by the same amount
            if sums is not None:
                sums.copy_(all_reduce(sums, env))
        model.strategy.adapt_rate(rate, gain)
    if eng.ema is not None:
        eng.ema.update_parameters(model)
    return step_metrics


def rank_batches(data: ByteData, step: int, run_cfg: RunConfig, env: DistEnv) -> tuple[list[torch.Tensor], list[int]]:
    """This rank's micro-batches at `step` and their boundary seeds: micro-batch k of the global
    batch (k = rank * A .. rank * A + A - 1) draws its rows from (seed, step, k), whatever the
    world size (learntok.run.distributed)."""
    tc = run_cfg.train
    micro, accum = micro_plan(tc.batch_size, tc.micro_batch_size, env.world)
    slots = range(env.rank * accum, (env.rank + 1) * accum)
    xs = [data.train_batch(step, micro, tc.seq_len, tc.seed, rank=k, world=accum * env.world) for k in slots]
    return [x.to(env.device, non_blocking=True) for x in xs], [slot_seed(tc.seed, step, k) for k in slots]


def build_engine(
    run_cfg: RunConfig, data: ByteData, env: DistEnv, amp: torch.dtype | None, resume: bool
) -> tuple[Engine, dict]:
    """Step 4 of training: the model at its seeded initial weights (its strategy fitted on a
    fresh run: e.g. the bpe tokenizer), wrapped for the ranks and compiled if asked, with its
    optimizer and the weights' average; and what the fit reported."""
    model = AUNet(run_cfg.model)
    model.set_gradient_checkpointing(run_cfg.train.grad_checkpoint)
    model = model.to(env.device)
    fitted = {} if resume else fit_strategy(model, data, env)
    wrapped = wrap_model(model, env, run_cfg.system.fsdp)  # before the optimizer: FSDP swaps parameters
    fwd = compile_model(wrapped) if run_cfg.system.compile else wrapped
    optimizer = build_optimizer(model, run_cfg.optim, env.device)
    return Engine(model, wrapped, fwd, optimizer, env, amp, weight_average(model, run_cfg.optim.ema)), fitted
