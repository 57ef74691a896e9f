"""Where a run's figures go: RUN/metrics.jsonl always, and the same figures in TensorBoard
(`log.tensorboard = true`) or Weights & Biases (`log.wandb = "PROJECT"`) when asked.

metrics.jsonl's rows, their kinds and their readers are learntok.run.metrics_log's.

TensorBoard gets each number as the scalar `KIND/NAME` (`train/bpb`, `val/bpb`, `train/lr`,
`train/bytes_per_s`, ...) and the sample segmentations as text, in event files in the run
folder, so `tensorboard --logdir runs/` shows every run by its folder. A resumed run hides the
events after its checkpoint's step (SummaryWriter's purge_step), as metrics.jsonl is cut back.
A W&B run logs the same scalars and text, keyed by an id kept in RUN/wandb/, so a resume
continues it; `WANDB_MODE=offline` (wandb's own setting) logs without a network.
"""

from __future__ import annotations

import importlib.util
import math
import uuid
from collections.abc import Sequence
from pathlib import Path

from learntok.run.config import LogConfig, RunConfig, to_toml
from learntok.run.distributed import DistEnv, barrier
from learntok.util.errors import ConfigError
from learntok.util.files import write_text_atomic
from learntok.run import metrics_log
from learntok.run.folder import WANDB
from learntok.util.progress import note
from learntok.util.runtime import rng_state, set_rng_state


def check_trackers(cfg: LogConfig) -> None:
    """Refuse at start-up, in one line, a tracker whose package is not installed."""
    if cfg.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError("log.tensorboard = true needs the tensorboard package: pip install tensorboard")
    if cfg.wandb and importlib.util.find_spec("wandb") is None:
        raise ConfigError(f"log.wandb = {cfg.wandb!r} needs the wandb package: pip install -e '.[wandb]'")


def scalars(kind: str, row: dict) -> dict[str, float]:
    """The row's numbers as tracker scalars `KIND/NAME` (a `val_` prefix dropped under val)."""
    return {
        f"{kind}/{k.removeprefix(kind + '_')}": float(v)
        for k, v in row.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"
    }


class Tracker:
    """One run's figures: `log` writes a metrics.jsonl row and the trackers' scalars, `text` the
    trackers' text (segments.txt stays the caller's). With enabled False (ranks other than 0)
    nothing is written. `start` is the step a resumed run continues from (0 for a fresh one)."""

    def __init__(self, run_dir: str | Path, cfg: LogConfig, config: dict, start: int = 0, enabled: bool = True):
        self.run_dir, self.enabled = Path(run_dir), enabled
        self.tb = self.wb = None
        if not enabled:
            return
        check_trackers(cfg)
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # every writer marks its session start, so the reader sees a resume's start as a restart
            # and drops the earlier events from the step after the checkpoint on
            self.tb = SummaryWriter(str(self.run_dir), purge_step=start + 1 if start else 0, flush_secs=30)
        if cfg.wandb:
            self.wb = _wandb_run(self.run_dir, cfg.wandb, config, fresh=start == 0)

    def log(self, kind: str, step: int, row: dict) -> None:
        if not self.enabled:
            return
        metrics_log.append(self.run_dir, kind, step, row)
        values = {k: v for k, v in scalars(kind, row).items() if math.isfinite(v)}
        if self.tb is not None:
            for tag, v in values.items():
                self.tb.add_scalar(tag, v, step)
        if self.wb is not None:
            self.wb.log(values, step=step)

    def text(self, step: int, tag: str, text: str) -> None:
        if not self.enabled:
            return
        if self.tb is not None:  # markdown: an indented block keeps the lines
            self.tb.add_text(tag, "\n".join("    " + line for line in text.splitlines()), step)
        if self.wb is not None:
            import wandb

            self.wb.log({tag: wandb.Html(f"<pre>{_escape(text)}</pre>")}, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wb is not None:
            self.wb.finish()
        self.tb = self.wb = None


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _wandb_run(run_dir: Path, project: str, config: dict, fresh: bool):
    """A W&B run for this run folder: a new id for a fresh run, the saved one on resume. The
    RNG states are restored after wandb.init, so tracking never shifts a run's random draws."""
    import wandb

    folder = run_dir / WANDB
    folder.mkdir(parents=True, exist_ok=True)
    id_file = folder / "learntok-run-id"
    if fresh or not id_file.is_file():
        write_text_atomic(id_file, uuid.uuid4().hex[:16])
    state = rng_state()
    try:
        return wandb.init(
            project=project,
            dir=str(run_dir),
            name=run_dir.name,
            id=id_file.read_text().strip(),
            resume="allow",
            config=config,
        )
    finally:
        set_rng_state(state)


def open_run(
    run_cfg: RunConfig,
    run_dir: Path,
    env: DistEnv,
    start: int,
    fitted: dict,
    warnings: Sequence[str] = (),
    progress: bool = True,
) -> Tracker:
    """Step 6 of training: the run folder written (rank 0: its config.toml, then the run's
    `warnings` said) and its tracker opened at step `start`, the strategy's fit logged."""
    barrier(env)  # every rank has read the folder before rank 0 writes
    text, config = to_toml(run_cfg), run_cfg.to_dict()
    if env.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(run_dir / "config.toml", text)
        for warning in warnings:
            note(f"warning: {warning}", progress)
    tracker = Tracker(run_dir, run_cfg.log, config, start, enabled=env.is_main)
    if fitted:
        tracker.log("fit", 0, {"bytes_seen": 0, **fitted})
    return tracker
