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

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel

from learntok.run.checkpoint import EMA, STATE, latest_checkpoint, load_checkpoint, save_checkpoint
from learntok.run.config import RunConfig, check_memory, config_warnings, to_toml
from learntok.util.errors import CheckpointError, ConfigError, TrainingDiverged
from learntok.data.dataset import FIT_BYTES, ByteData, small_split_warnings
from learntok.data.identity import DATA_IDENTITY, check_identity, source_identity
from learntok.run.distributed import (
    DistEnv,
    barrier,
    broadcast_module_state,
    checkpoint_views,
    compile_model,
    init_distributed,
    load_state,
    micro_plan,
    shutdown,
    wrap_model,
)
from learntok.model.aunet import AUNet
from learntok.model.pretrained import WEIGHTS, read_weights
from learntok.evaluation.score import position_bytes
from learntok.util.files import open_no_follow, write_text_atomic
from learntok.model.objective import ObjectiveConfig, objective_for, rate_gain_at
from learntok.util.progress import Progress, note
from learntok.run.folder import SEGMENTS, anchored, check_resume, check_same_settings, claim, release, trim_logs
from learntok.util.runtime import resolve_dtype, seed_everything, set_rng_state, set_threads
from learntok.run.tracking import Tracker, check_trackers
from learntok.train.step import Engine, build_optimizer, lr_at, rank_batches, train_step, weight_average
from learntok.train.report import MetricWindow, sample_texts, segments_text, validate, validation_line


def fit_strategy(model: AUNet, data: ByteData, env: DistEnv) -> dict:
    """Fit the strategy once, on rank 0, to a bounded sample of the train split (never the whole
    split: it may be many GB), and give every other rank the fitted state."""
    fitted = model.strategy.fit(data.sample_documents("train", FIT_BYTES)) if env.is_main else {}
    return broadcast_module_state(model.strategy, fitted, env)


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


def start_process(run_cfg: RunConfig) -> tuple[DistEnv, bool]:
    """This process ready to train: its trackers' packages there, its threads set, its rank in the
    group (and whether it made the group, to end it)."""
    check_trackers(run_cfg.log)  # a missing tracker package: one line, nothing written
    set_threads(run_cfg.system.threads)
    owns_group = not torch.distributed.is_initialized()  # compare under torchrun holds the group itself
    return init_distributed(run_cfg.system.device), owns_group


def training_data(run_cfg: RunConfig, env: DistEnv) -> ByteData:
    """The run's data, with its windows, batch split and memory checked before any file is written."""
    tc = run_cfg.train
    micro, _ = micro_plan(tc.batch_size, tc.micro_batch_size, env.world)
    data = ByteData.from_config(run_cfg.data)
    data.check_window("train", tc.seq_len, micro, position_bytes(run_cfg.model), training=True)
    check_memory(run_cfg, env.device.type)
    return data


def build_engine(run_cfg: RunConfig, data: ByteData, env: DistEnv, resume: bool) -> tuple[Engine, dict]:
    """The model at its seeded initial weights (its strategy fitted on a fresh run: e.g. the bpe
    tokenizer), wrapped for the ranks, with its optimizer and the weights' average; and what the
    fit reported."""
    sc = run_cfg.system
    seed_everything(run_cfg.train.seed)
    model = AUNet(run_cfg.model).to(env.device)
    fitted = {} if resume else fit_strategy(model, data, env)
    wrapped = wrap_model(model, env, sc.fsdp)  # before the optimizer: FSDP swaps parameters
    optimizer = build_optimizer(model, run_cfg.optim, env.device)
    fwd = compile_model(wrapped) if sc.compile else wrapped
    amp = resolve_dtype(sc.dtype, env.device)
    return Engine(model, wrapped, fwd, optimizer, env, amp, weight_average(model, run_cfg.optim.ema)), fitted


def open_run(
    run_cfg: RunConfig, run_dir: Path, data: ByteData, env: DistEnv, start: int, fitted: dict, progress: bool
) -> Tracker:
    """The run folder written (rank 0: its config.toml, the warnings said) and its tracker opened
    at step `start`, the strategy's fit logged."""
    barrier(env)  # every rank has read the folder before rank 0 writes
    if env.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(run_dir / "config.toml", to_toml(run_cfg))
        for warning in [*small_split_warnings(data), *config_warnings(run_cfg)]:
            note(f"warning: {warning}", progress)
    tracker = Tracker(run_dir, run_cfg.log, run_cfg.to_dict(), start, enabled=env.is_main)
    if fitted:
        tracker.log("fit", 0, {"bytes_seen": 0, **fitted})
    return tracker


def train(
    run_cfg: RunConfig, out_dir: str | Path, resume: bool = False, until: int | None = None, progress: bool = True
) -> dict:
    """Train (or resume) a run in `out_dir`; stop after step `until` if given (with a checkpoint).
    Returns a summary: val bpb, boundary and whitespace rates, bytes/s, run dir. Under torchrun,
    every rank calls it; rank 0 alone writes the run folder (learntok.run.distributed)."""
    run_cfg = anchored(run_cfg)  # stored with data.source absolute: evaluated later from anywhere, the same file
    run_dir, steps = Path(out_dir), run_cfg.train.steps
    env, owns_group = start_process(run_cfg)
    if env.is_main:
        claim(run_dir, resume)  # 1. the run folder: lock it, refuse one not ours
    data = training_data(run_cfg, env)  # 2. the data
    eng, fitted = build_engine(run_cfg, data, env, resume)  # 3. the model, its optimizer
    identity = source_identity(run_cfg.data.source)  # recorded in every checkpoint, checked on resume
    start, bytes_seen = _start(run_cfg, run_dir, eng.model, eng.optimizer, resume, identity, eng.ema)  # 4. resume
    tracker = open_run(run_cfg, run_dir, data, env, start, fitted, progress)
    objective = objective_for(run_cfg.objective, eng.model.strategy.has_policy)
    run = Run(run_cfg, run_dir, eng, data, objective, tracker, progress, identity)
    last_ckpt = latest_checkpoint(run_dir) if resume else checkpoint_run(run, 0, 0)
    summary = {"run_dir": str(run_dir), "params": eng.model.num_params(), **fitted}
    try:  # 5. the loop
        summary = train_steps(run, start, min(until or steps, steps), bytes_seen, last_ckpt, summary)
    finally:
        tracker.close()
    if owns_group:
        shutdown(env)
    if env.is_main:
        release(run_dir)
    return summary
