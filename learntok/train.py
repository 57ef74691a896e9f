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
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from learntok.checkpoint import EMA, STATE, latest_checkpoint, load_checkpoint, save_checkpoint
from learntok.config import OptimConfig, RunConfig, check_memory, config_warnings, to_toml
from learntok.errors import CheckpointError, ConfigError, TrainingDiverged
from learntok.data import PAD, ByteData, small_split_warnings
from learntok.data.dataset import FIT_BYTES
from learntok.data.identity import DATA_IDENTITY, check_identity, source_identity
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
from learntok.model.pretrained import WEIGHTS, read_weights
from learntok.evaluate import position_bytes
from learntok.files import open_no_follow, write_text_atomic
from learntok.objective import ObjectiveConfig, loss, objective_for, rate_gain_at
from learntok.progress import Progress, note
from learntok.runfolder import SEGMENTS, anchored, check_resume, check_same_settings, claim, release, trim_logs
from learntok.runtime import autocast, resolve_dtype, seed_everything, set_rng_state, set_threads
from learntok.tracking import Tracker, check_trackers
from learntok.train_report import MetricWindow, sample_texts, segments_text, validate, validation_line


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


def fit_strategy(model: AUNet, data: ByteData, env: DistEnv) -> dict:
    """Fit the strategy once, on rank 0, to a bounded sample of the train split (never the whole
    split: it may be many GB), and give every other rank the fitted state."""
    fitted = model.strategy.fit(data.sample_documents("train", FIT_BYTES)) if env.is_main else {}
    return broadcast_module_state(model.strategy, fitted, env)


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
    world size (learntok.distributed)."""
    tc = run_cfg.train
    micro, accum = micro_plan(tc.batch_size, tc.micro_batch_size, env.world)
    slots = range(env.rank * accum, (env.rank + 1) * accum)
    xs = [data.train_batch(step, micro, tc.seq_len, tc.seed, rank=k, world=accum * env.world) for k in slots]
    return [x.to(env.device, non_blocking=True) for x in xs], [slot_seed(tc.seed, step, k) for k in slots]


def _diverged(step: int, last_ckpt: Path | None) -> TrainingDiverged:
    where = f"the last good checkpoint is at {last_ckpt}" if last_ckpt else "no checkpoint was saved"
    return TrainingDiverged(f"loss became NaN or infinite at step {step}; stopped without saving; {where}")


def _start(
    run_cfg: RunConfig,
    run_dir: Path,
    model: nn.Module,
    optimizer,
    resume: bool,
    identity: dict,
    ema: AveragedModel | None = None,
) -> tuple[int, int]:
    """Fresh run or resume: returns (completed steps, bytes seen) and restores state in place
    (the weights' average `ema` too). A resume is refused when its data source now holds other
    bytes than `identity` recorded."""
    if not resume:
        if latest_checkpoint(run_dir) is not None:
            raise ConfigError(f"run folder {run_dir} already has checkpoints; pass --resume or another --out")
        return 0, 0
    ckpt = load_checkpoint(run_dir, needs=("bytes_seen",))
    check_resume(run_dir, ckpt.step, run_cfg.train.steps)
    # a resume may run longer (check_resume), never on other data, model or optimizer settings
    check_same_settings(run_dir, RunConfig.from_dict(ckpt.config), run_cfg, "resume", free=("train.steps",))
    check_identity(ckpt.state.get(DATA_IDENTITY), run_cfg.data.source, "resume", run_dir)
    try:
        load_state(model, optimizer, ckpt.model_state, ckpt.state["optimizer"], run_cfg.system.fsdp)
        set_rng_state(ckpt.state["rng"])
        if ema is not None:
            ema.module.load_state_dict(read_weights(ckpt.path / EMA / WEIGHTS, "cpu"))
            ema.n_averaged.fill_(ckpt.state["ema_updates"])
    except (KeyError, ValueError, TypeError, RuntimeError, AttributeError) as e:  # a state.pt of another shape
        raise CheckpointError(
            f"cannot resume from {ckpt.path}: its {STATE} does not fit this run "
            f"({type(e).__name__}: {' '.join(str(e).split())})"
        ) from None
    trim_logs(run_dir, ckpt.step)
    return ckpt.step, int(ckpt.state["bytes_seen"])


@dataclass
class Run:
    """What the training loop runs with, built once by `train`."""

    cfg: RunConfig  # anchored: as the run folder stores it
    run_dir: Path
    eng: Engine
    data: ByteData
    objective: ObjectiveConfig  # the strategy's own (objective_for)
    tracker: Tracker
    progress: bool  # bars and log lines
    identity: dict[str, str]  # the data source's (learntok.data.identity), in every checkpoint


@dataclass(frozen=True)
class Due:
    """What a step just finished must do: log, evaluate, segment, checkpoint (log.*_every and
    checkpoint.every; the last step evaluates, checkpoints and, with segmentations on, segments)."""

    log: bool
    eval: bool
    segment: bool
    checkpoint: bool

    @property
    def sync(self) -> bool:
        """Whether the step reads its metrics (one host sync)."""
        return self.log or self.eval or self.segment or self.checkpoint


def due_at(done: int, end: int, run_cfg: RunConfig) -> Due:
    """What step `done` (1-based) of a run ending at `end` must do."""
    lc, at_end = run_cfg.log, done == end
    every = lambda n: n > 0 and done % n == 0  # noqa: E731
    return Due(
        log=every(lc.log_every),
        eval=every(lc.eval_every) or at_end,
        segment=every(lc.segment_every) or (at_end and lc.segment_every > 0),
        checkpoint=every(run_cfg.checkpoint.every) or at_end,
    )


def checkpoint_run(run: Run, step: int, bytes_seen: int) -> Path:
    """Save the run at `step`: rank 0 writes, every rank waits (FSDP: a collective gather first)."""
    eng, cfg = run.eng, run.cfg
    m, o = checkpoint_views(eng.model, eng.optimizer, cfg.system.fsdp)
    path = run.run_dir / "checkpoints" / f"step_{step:07d}"
    if eng.env.is_main:
        extra = {"bytes_seen": bytes_seen, DATA_IDENTITY: run.identity}
        average = None
        if eng.ema is not None:
            extra["ema_updates"] = int(eng.ema.n_averaged)
            average = eng.ema.module
        path = save_checkpoint(run.run_dir, step, m, o, cfg, extra, keep=cfg.checkpoint.keep, average=average)
    barrier(eng.env)
    return path


def validate_logged(run: Run, done: int, bytes_seen: int) -> dict[str, float]:
    """The periodic validation at step `done`, logged and printed. DDP: ranks score disjoint
    windows of the plain model; FSDP: every rank runs every forward (they are collectives), so
    each scores the whole split."""
    eng, fsdp = run.eng, run.cfg.system.fsdp
    val = validate(eng.model, run.data, run.cfg, eng.amp, None if fsdp else eng.env)
    run.tracker.log("val", done, {"bytes_seen": bytes_seen, **val})
    note(validation_line(done, val), run.progress and eng.env.is_main)
    return val


def log_segments(run: Run, texts: list[bytes], done: int) -> None:
    """Sample segmentations at step `done` to segments.txt and the trackers (rank 0; FSDP: every
    rank runs the forward)."""
    main, fsdp = run.eng.env.is_main, run.cfg.system.fsdp
    if not (main or fsdp):
        return
    text = segments_text(run.eng.model, texts, run.cfg.train.seed, fsdp)
    if main:
        with open_no_follow(run.run_dir / SEGMENTS) as f:
            f.write(f"== step {done}\n{text}")
        run.tracker.text(done, "segments", text)


def train_steps(run: Run, start: int, end: int, bytes_seen: int, last_ckpt: Path | None, summary: dict) -> dict:
    """Steps `start` .. `end` - 1, with one host sync at each step that logs, evaluates, segments
    or checkpoints (`due_at`); a loss that is not finite stops the run there. Returns `summary`
    with the last figures, the step and the last checkpoint."""
    cfg, eng, data = run.cfg, run.eng, run.data
    texts = sample_texts(data) if cfg.log.segment_every else []
    window = MetricWindow(eng.env.device)
    steps = cfg.train.steps
    bar = Progress(
        range(start, end), desc=run.run_dir.name, initial=start, total=steps, unit="step", enabled=run.progress
    )
    try:
        for step in bar:
            xs, seeds = rank_batches(data, step, cfg, eng.env)
            lr, gain = lr_at(step, cfg.optim, steps), rate_gain_at(run.objective, step, steps)
            window.add(step + 1, train_step(eng, xs, run.objective, cfg.optim, lr, seeds, gain))
            done, due = step + 1, due_at(step + 1, end, cfg)
            if not due.sync:
                continue
            bad, means, n_bytes = window.read(eng.env)
            if bad >= 0:
                raise _diverged(bad, last_ckpt)
            bytes_seen += n_bytes
            run.tracker.log("train", done, {"bytes_seen": bytes_seen, "lr": lr, **means})
            bar.set_postfix(
                loss=f"{means['loss']:.3f}",
                bpb=f"{means['bpb']:.3f}",
                rate=f"{means['boundary_rate']:.3f}",
                ws=f"{means['whitespace_rate']:.2f}",
                Bps=f"{means['bytes_per_s']:.0f}",
                refresh=False,
            )
            summary.update(train_bpb=means["bpb"], bytes_per_s=means["bytes_per_s"])
            if due.eval:
                summary.update(validate_logged(run, done, bytes_seen))
            if due.segment:
                log_segments(run, texts, done)
            if due.checkpoint:
                last_ckpt = checkpoint_run(run, done, bytes_seen)
            window.reset()  # bytes/s counts training time only
    finally:
        bar.close()
    return {**summary, "step": end, "checkpoint": str(last_ckpt)}


def train(
    run_cfg: RunConfig, out_dir: str | Path, resume: bool = False, until: int | None = None, progress: bool = True
) -> dict:
    """Train (or resume) a run in `out_dir`; stop after step `until` if given (with a checkpoint).
    Returns a summary: val bpb, boundary and whitespace rates, bytes/s, run dir. Under torchrun,
    every rank calls it; rank 0 alone writes the run folder (learntok.distributed)."""
    run_cfg = anchored(run_cfg)  # stored with data.source absolute: evaluated later from anywhere, the same file
    tc, sc, run_dir = run_cfg.train, run_cfg.system, Path(out_dir)
    check_trackers(run_cfg.log)  # a missing tracker package: one line, nothing written
    set_threads(sc.threads)
    owns_group = not torch.distributed.is_initialized()  # compare under torchrun holds the group itself
    env = init_distributed(sc.device)
    if env.is_main:
        claim(run_dir, resume)  # lock the folder; refuse one not ours
    amp = resolve_dtype(sc.dtype, env.device)
    micro, _ = micro_plan(tc.batch_size, tc.micro_batch_size, env.world)  # check the batch split at start-up
    data = ByteData.from_config(run_cfg.data)
    data.check_window(
        "train", tc.seq_len, micro, position_bytes(run_cfg.model), training=True
    )  # before any file is written
    check_memory(run_cfg, env.device.type)
    seed_everything(tc.seed)
    model = AUNet(run_cfg.model).to(env.device)
    objective = objective_for(run_cfg.objective, model.strategy.has_policy)
    fitted = {} if resume else fit_strategy(model, data, env)  # e.g. the bpe tokenizer, fitted once
    wrapped = wrap_model(model, env, sc.fsdp)  # before the optimizer: FSDP swaps parameters
    optimizer = build_optimizer(model, run_cfg.optim, env.device)
    identity = source_identity(run_cfg.data.source)  # recorded in every checkpoint, checked on resume
    ema = weight_average(model, run_cfg.optim.ema)
    start, bytes_seen = _start(run_cfg, run_dir, model, optimizer, resume, identity, ema)
    barrier(env)  # every rank has read the folder before rank 0 writes
    if env.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(run_dir / "config.toml", to_toml(run_cfg))
        for warning in [*small_split_warnings(data), *config_warnings(run_cfg)]:
            note(f"warning: {warning}", progress)
    tracker = Tracker(run_dir, run_cfg.log, run_cfg.to_dict(), start, enabled=env.is_main)
    if fitted:
        tracker.log("fit", 0, {"bytes_seen": 0, **fitted})
    eng = Engine(model, wrapped, compile_model(wrapped) if sc.compile else wrapped, optimizer, env, amp, ema)
    run = Run(run_cfg, run_dir, eng, data, objective, tracker, progress, identity)
    last_ckpt = latest_checkpoint(run_dir) if resume else checkpoint_run(run, 0, 0)
    summary = {"run_dir": str(run_dir), "params": model.num_params(), **fitted}
    try:
        summary = train_steps(run, start, min(until or tc.steps, tc.steps), bytes_seen, last_ckpt, summary)
    finally:
        tracker.close()
    if owns_group:
        shutdown(env)
    if env.is_main:
        release(run_dir)
    return summary
