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

from learntok.data.dataset import ByteData
from learntok.model.objective import ObjectiveConfig, objective_for, rate_gain_at
from learntok.run.checkpoint import latest_checkpoint, resume_state, save_run_checkpoint
from learntok.run.config import RunConfig
from learntok.train.data import training_data
from learntok.run.distributed import shutdown, start_process
from learntok.run.folder import SEGMENTS, open_folder, release
from learntok.run.tracking import Tracker, check_trackers, open_run
from learntok.train.report import MetricWindow, sample_texts, segments_text, validate, validation_line
from learntok.train.step import Engine, build_engine, lr_at, rank_batches, train_step
from learntok.util.errors import TrainingDiverged
from learntok.data.identity import DATA_IDENTITY
from learntok.util.files import open_no_follow
from learntok.util.progress import Progress, note


def _diverged(step: int, last_ckpt: Path | None) -> TrainingDiverged:
    where = f"the last good checkpoint is at {last_ckpt}" if last_ckpt else "no checkpoint was saved"
    return TrainingDiverged(f"loss became NaN or infinite at step {step}; stopped without saving; {where}")


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
    """Save the run at `step`, with what a resume needs beyond the weights and the optimizer."""
    eng = run.eng
    extra = {"bytes_seen": bytes_seen, DATA_IDENTITY: run.identity}
    if eng.ema is not None:
        extra["ema_updates"] = int(eng.ema.n_averaged)
    average = eng.ema.module if eng.ema is not None else None
    return save_run_checkpoint(run.run_dir, step, eng.model, eng.optimizer, run.cfg, extra, eng.env, average)


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
    every rank calls it; rank 0 alone writes the run folder (learntok.run.distributed). Each step
    of the set-up is one call into the package that owns it. Step 2 locks the folder; nothing
    else is written there before step 3 has checked the data against the batch and memory and
    step 5 a resume against its checkpoint."""
    check_trackers(run_cfg.log)  # a missing tracker package: one line, nothing written
    env, owns_group, amp = start_process(run_cfg)  # 1. this process: rank, threads, seeds, precision
    run_cfg, run_dir = open_folder(run_cfg, out_dir, resume, env.is_main)  # 2. the run folder, locked and ours
    try:  # every exit from here on, a raise included, gives the folder back
        data, identity, warnings = training_data(run_cfg, env)  # 3. the data, checked before anything is written
        eng, fitted = build_engine(run_cfg, data, env, amp, resume)  # 4. the model, its optimizer, its average
        start, bytes_seen = resume_state(run_cfg, run_dir, eng.model, eng.optimizer, resume, identity, eng.ema)  # 5.
        tracker = open_run(run_cfg, run_dir, env, start, fitted, warnings, progress)  # 6. config.toml, trackers
        objective = objective_for(run_cfg.objective, eng.model.strategy.has_policy)
        run = Run(run_cfg, run_dir, eng, data, objective, tracker, progress, identity)
        last_ckpt = latest_checkpoint(run_dir) if resume else checkpoint_run(run, 0, 0)
        summary = {"run_dir": str(run_dir), "params": eng.model.num_params(), **fitted}
        try:  # 7. the loop
            end = min(until or run_cfg.train.steps, run_cfg.train.steps)
            summary = train_steps(run, start, end, bytes_seen, last_ckpt, summary)
        finally:
            tracker.close()
    finally:
        if owns_group:
            shutdown(env)
        if env.is_main:
            release(run_dir)
    return summary
