"""Training: small pure functions around one short loop.

    for step: batch = data.train_batch(step) -> out = model(x) -> loss -> backward, clip, step
              -> adapt the boundary rate; at log / eval / segment / checkpoint steps: sync once.

Metrics stay on the device between log steps (no host sync per step). A loss that is not
finite is recorded on the device and found at the next sync; the run then stops without
saving, and the error names the last good checkpoint. Evaluation and sample segmentations run
under their own seeds, so they never shift the training RNG: `resume` reproduces an
uninterrupted run exactly (on CPU).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from learntok.checkpoint import STATE, latest_checkpoint, load_checkpoint, save_checkpoint
from learntok.config import OptimConfig, RunConfig, to_toml
from learntok.errors import CheckpointError, ConfigError, TrainingDiverged
from learntok.data import PAD, ByteData, small_split_warnings
from learntok.data.dataset import FIT_BYTES
from learntok.distributed import (
    DistEnv,
    all_reduce,
    barrier,
    broadcast_module_state,
    checkpoint_views,
    compile_model,
    init_distributed,
    load_state,
    micro_plan,
    no_grad_sync,
    shutdown,
    slot_seed,
    wrap_model,
)
from learntok.model.aunet import AUNet
from learntok.evaluate import EvalOptions, evaluate_bpb, position_bytes
from learntok.figures import covers
from learntok.files import open_no_follow, write_text_atomic
from learntok.objective import ObjectiveConfig, loss, objective_for, rate_gain_at
from learntok.progress import Progress, note
from learntok.runfolder import SEGMENTS, anchored, check_resume, check_same_settings, claim, release, trim_logs
from learntok.runtime import autocast, resolve_dtype, seed_everything, set_rng_state, set_threads
from learntok.display import render_terminal
from learntok.segment import segment_text
from learntok.tracking import Tracker, check_trackers


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


def validate(
    model: nn.Module, data: ByteData, run_cfg: RunConfig, amp: torch.dtype | None, env: DistEnv | None
) -> dict[str, float]:
    """The periodic validation: learntok.evaluate.evaluate_bpb on at most log.eval_bytes of the
    val split, seeded by train.seed; keys val_bpb, val_boundary_rate, val_whitespace_rate, val_bytes
    (scored) and val_split_bytes (the whole split's: what the figure covers, `validation_line`)."""
    tc = run_cfg.train
    r = evaluate_bpb(
        model, data, "val", EvalOptions(tc.batch_size, tc.seq_len, run_cfg.log.eval_bytes, seed=tc.seed, amp=amp), env
    )
    return {
        "val_bpb": r["bpb"],
        "val_boundary_rate": r["boundary_rate"],
        "val_whitespace_rate": r["whitespace_rate"],
        "val_bytes": r["n_bytes"],
        "val_split_bytes": data.n_bytes("val"),
    }


def segments_text(model: nn.Module, texts: list[bytes], seed: int, fsdp: bool = False) -> str:
    """Sample segmentations of held-out texts, one line each, `|` between chunks (segments.txt;
    FSDP: every rank runs the model's whole forward, which gathers its weights)."""
    lines = []
    for text in texts:
        chunks, stats = segment_text(model, text, seed=seed, full_forward=fsdp)
        lines.append(
            f"[rate {stats['boundary_rate']:.3f} ws {stats['whitespace_rate']:.3f}] "
            f"{render_terminal(chunks, color=False)}\n"
        )
    return "".join(lines)


def validation_line(step: int, val: dict[str, float]) -> str:
    """The line training prints for each validation."""
    return (
        f"step {step}: val bpb ({covers(val['val_bytes'], val['val_split_bytes'])}) {val['val_bpb']:.4f}, "
        f"boundary rate {val['val_boundary_rate']:.3f}, "
        f"whitespace rate {val['val_whitespace_rate']:.3f}"
    )


def fit_strategy(model: AUNet, data: ByteData, env: DistEnv) -> dict:
    """Fit the strategy once, on rank 0, to a bounded sample of the train split (never the whole
    split: it may be many GB), and give every other rank the fitted state."""
    fitted = model.strategy.fit(data.sample_documents("train", FIT_BYTES)) if env.is_main else {}
    return broadcast_module_state(model.strategy, fitted, env)


def _sample_texts(data: ByteData, n: int = 3, n_bytes: int = 200) -> list[bytes]:
    docs = [d for d in data.documents("val", limit=100) if d.strip()] or data.documents("train", limit=n)
    return [d[:n_bytes] for d in docs[:n]]


class MetricWindow:
    """Per-step metrics summed on the device between log steps and read with one host sync;
    also the first step whose loss was not finite (-1 if none) and the bytes/s since reset."""

    def __init__(self, device: torch.device):
        self.device = device
        self.reset()

    def reset(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.n, self.t0 = 0, time.perf_counter()
        self.bad = torch.full((), -1, dtype=torch.long, device=self.device)

    def add(self, step: int, metrics: dict[str, torch.Tensor]) -> None:
        nonfinite = ~torch.isfinite(metrics["loss"])
        self.bad = torch.where((self.bad < 0) & nonfinite, torch.full_like(self.bad, step), self.bad)
        self.sums = {k: self.sums.get(k, 0) + v.detach().double() for k, v in metrics.items()}
        self.n += 1

    def read(self, env: DistEnv | None = None) -> tuple[int, dict[str, float], int]:
        """(first non-finite step or -1, mean of each metric and bytes_per_s, bytes in the window).
        With `env` (world > 1) a collective: metrics are averaged over ranks, bytes added."""
        world = env.world if env is not None else 1
        bad = all_reduce(self.bad, env, "max") if world > 1 else self.bad
        sums = torch.stack(list(self.sums.values()))
        sums = all_reduce(sums, env, "mean") if world > 1 else sums
        values = torch.cat([bad.double()[None], sums]).tolist()  # the host sync
        means = {k: v / self.n for k, v in zip(self.sums, values[1:])}
        n_bytes = round(means["n_bytes"] * self.n * world)
        means["bytes_per_s"] = n_bytes / (time.perf_counter() - self.t0)
        return int(values[0]), means, n_bytes


@dataclass
class Engine:
    """What a training step runs on."""

    model: AUNet  # the plain model: its strategy, its parameters
    wrapped: nn.Module  # model, DDP(model) or FSDP(model): what syncs gradients
    fwd: nn.Module  # wrapped, or its torch.compile wrapper: what the step calls
    optimizer: torch.optim.Optimizer
    env: DistEnv
    amp: torch.dtype | None  # autocast dtype (None: fp32)


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
    return step_metrics


def rank_batches(data: ByteData, step: int, run_cfg: RunConfig, env: DistEnv) -> tuple[list[torch.Tensor], list[int]]:
    """This rank's micro-batches at `step` and their boundary seeds: micro-batch k of the global
    batch (k = rank * A .. rank * A + A - 1) draws its rows from (seed, step, k), whatever the
    world size (learntok.distributed)."""
    tc = run_cfg.train
    micro, accum = micro_plan(tc.batch_size, tc.micro_batch_size, env.world)
    slots = range(env.rank * accum, (env.rank + 1) * accum)
    xs = [data.train_batch(step, micro, tc.seq_len, tc.seed, rank=k, world=accum * env.world) for k in slots]
    return [x.to(env.device, non_blocking=True) for x in xs], [slot_seed(tc.seed, step, k) for k in slots]


def _diverged(step: int, last_ckpt: Path | None) -> TrainingDiverged:
    where = f"the last good checkpoint is at {last_ckpt}" if last_ckpt else "no checkpoint was saved"
    return TrainingDiverged(f"loss became NaN or infinite at step {step}; stopped without saving; {where}")


def _start(run_cfg: RunConfig, run_dir: Path, model: nn.Module, optimizer, resume: bool) -> tuple[int, int]:
    """Fresh run or resume: returns (completed steps, bytes seen) and restores state in place."""
    if not resume:
        if latest_checkpoint(run_dir) is not None:
            raise ConfigError(f"run folder {run_dir} already has checkpoints; pass --resume or another --out")
        return 0, 0
    ckpt = load_checkpoint(run_dir, needs=("bytes_seen",))
    check_resume(run_dir, ckpt.step, run_cfg.train.steps)
    # a resume may run longer (check_resume), never on other data, model or optimizer settings
    check_same_settings(run_dir, RunConfig.from_dict(ckpt.config), run_cfg, "resume", free=("train.steps",))
    try:
        load_state(model, optimizer, ckpt.model_state, ckpt.state["optimizer"], run_cfg.system.fsdp)
        set_rng_state(ckpt.state["rng"])
    except (KeyError, ValueError, TypeError, RuntimeError, AttributeError) as e:  # a state.pt of another shape
        raise CheckpointError(
            f"cannot resume from {ckpt.path}: its {STATE} does not fit this run "
            f"({type(e).__name__}: {' '.join(str(e).split())})"
        ) from None
    trim_logs(run_dir, ckpt.step)
    return ckpt.step, int(ckpt.state["bytes_seen"])


def train(
    run_cfg: RunConfig, out_dir: str | Path, resume: bool = False, until: int | None = None, progress: bool = True
) -> dict:
    """Train (or resume) a run in `out_dir`; stop after step `until` if given (with a checkpoint).
    Returns a summary: val bpb, boundary and whitespace rates, bytes/s, run dir. Under torchrun,
    every rank calls it; rank 0 alone writes the run folder (learntok.distributed)."""
    run_cfg = anchored(run_cfg)  # stored with data.source absolute: evaluated later from anywhere, the same file
    tc, sc, lc, run_dir = run_cfg.train, run_cfg.system, run_cfg.log, Path(out_dir)
    check_trackers(lc)  # a missing tracker package: one line, nothing written
    set_threads(sc.threads)
    owns_group = not torch.distributed.is_initialized()  # compare under torchrun holds the group itself
    env = init_distributed(sc.device)
    device, main = env.device, env.is_main
    if main:
        claim(run_dir, resume)  # lock the folder; refuse one not ours
    amp = resolve_dtype(sc.dtype, device)
    micro, _ = micro_plan(tc.batch_size, tc.micro_batch_size, env.world)  # check the batch split at start-up
    data = ByteData.from_config(run_cfg.data)
    data.check_window(
        "train", tc.seq_len, micro, position_bytes(run_cfg.model), training=True
    )  # before any file is written
    seed_everything(tc.seed)
    model = AUNet(run_cfg.model).to(device)
    objective = objective_for(run_cfg.objective, model.strategy.has_policy)
    fitted = {} if resume else fit_strategy(model, data, env)  # e.g. the bpe tokenizer, fitted once
    wrapped = wrap_model(model, env, sc.fsdp)  # before the optimizer: FSDP swaps parameters
    optimizer = build_optimizer(model, run_cfg.optim, device)
    start, bytes_seen = _start(run_cfg, run_dir, model, optimizer, resume)
    barrier(env)  # every rank has read the folder before rank 0 writes
    end = min(until or tc.steps, tc.steps)
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(run_dir / "config.toml", to_toml(run_cfg))
        for warning in small_split_warnings(data):
            note(f"warning: {warning}", progress)
    tracker = Tracker(run_dir, lc, run_cfg.to_dict(), start, enabled=main)
    if fitted:
        tracker.log("fit", 0, {"bytes_seen": 0, **fitted})

    def ckpt(step: int) -> Path:
        m, o = checkpoint_views(model, optimizer, sc.fsdp)  # FSDP: a collective gather
        path = run_dir / "checkpoints" / f"step_{step:07d}"
        if main:
            path = save_checkpoint(
                run_dir, step, m, o, run_cfg, {"bytes_seen": bytes_seen}, keep=run_cfg.checkpoint.keep
            )
        barrier(env)
        return path

    last_ckpt = latest_checkpoint(run_dir) if resume else ckpt(0)
    eng = Engine(model, wrapped, compile_model(wrapped) if sc.compile else wrapped, optimizer, env, amp)
    texts = _sample_texts(data) if lc.segment_every else []
    window, summary = MetricWindow(device), {"run_dir": str(run_dir), "params": model.num_params(), **fitted}
    bar = Progress(range(start, end), desc=run_dir.name, initial=start, total=tc.steps, unit="step", enabled=progress)
    try:
        for step in bar:
            xs, seeds = rank_batches(data, step, run_cfg, env)
            lr = lr_at(step, run_cfg.optim, tc.steps)
            gain = rate_gain_at(objective, step, tc.steps)
            window.add(step + 1, train_step(eng, xs, objective, run_cfg.optim, lr, seeds, gain))
            done, at_end = step + 1, step + 1 == end
            due = lambda every: every > 0 and done % every == 0  # noqa: E731
            do_eval, do_ckpt = due(lc.eval_every) or at_end, due(run_cfg.checkpoint.every) or at_end
            do_segment = due(lc.segment_every) or (at_end and lc.segment_every > 0)
            if not (due(lc.log_every) or do_eval or do_segment or do_ckpt):
                continue
            bad, means, n_bytes = window.read(env)
            if bad >= 0:
                raise _diverged(bad, last_ckpt)
            bytes_seen += n_bytes
            tracker.log("train", done, {"bytes_seen": bytes_seen, "lr": lr, **means})
            bar.set_postfix(
                loss=f"{means['loss']:.3f}",
                bpb=f"{means['bpb']:.3f}",
                rate=f"{means['boundary_rate']:.3f}",
                ws=f"{means['whitespace_rate']:.2f}",
                Bps=f"{means['bytes_per_s']:.0f}",
                refresh=False,
            )
            summary.update(train_bpb=means["bpb"], bytes_per_s=means["bytes_per_s"])
            if do_eval:
                # DDP: ranks score disjoint windows of the plain model; FSDP: every rank runs every
                # forward (they are collectives), so each scores the whole split
                val = validate(model, data, run_cfg, amp, None if sc.fsdp else env)
                tracker.log("val", done, {"bytes_seen": bytes_seen, **val})
                note(validation_line(done, val), progress and main)
                summary.update(val)
            if do_segment and (main or sc.fsdp):
                text = segments_text(model, texts, tc.seed, sc.fsdp)
                if main:
                    with open_no_follow(run_dir / SEGMENTS) as f:
                        f.write(f"== step {done}\n{text}")
                    tracker.text(done, "segments", text)
            if do_ckpt:
                last_ckpt = ckpt(done)
            window.reset()  # bytes/s counts training time only
    finally:
        bar.close()
        tracker.close()
    if owns_group:
        shutdown(env)
    if main:
        release(run_dir)
    return {**summary, "step": end, "checkpoint": str(last_ckpt)}
