"""Training checkpoints and run loading (docs/design.md §7), built on the model files of
learntok.model.pretrained (a model folder: `model.safetensors` + `config.json`).

A training checkpoint `RUN/checkpoints/step_NNNNNNN/`: `model.safetensors`, `state.pt`
(optimizer, step, RNG states, anything else the loop needs for an exact resume) and
`config.json` (the resolved RunConfig). Each is written into a temporary folder and then
renamed into place, and `RUN/checkpoints/latest` names the newest one (also replaced
atomically), so a crash never leaves a half-written checkpoint behind the pointer.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel

from learntok.boundaries import strategy_class, strategy_names
from learntok.run.config import RunConfig
from learntok.util.errors import CheckpointError, ConfigError, NotFiniteError
from learntok.util.files import write_text_atomic
from learntok.model.aunet import AUNet
from learntok.model.pretrained import (
    CONFIG,
    LATEST,
    WEIGHTS,
    atomic_dir,
    commit,
    read_config,
    read_failure,
    read_model_files,
    read_weights,
    resolve,
    write_model_files,
)
from learntok.util.runtime import rng_state, set_rng_state
from learntok.data.identity import DATA_IDENTITY, check_identity
from learntok.run.distributed import DistEnv, barrier, checkpoint_views, load_state
from learntok.run.folder import check_resume, check_same_settings, trim_logs
from learntok.util.json_toml import expect

STATE = "state.pt"
EMA = "ema"  # a checkpoint's model folder of the weights' moving average (optim.ema), beside its own
STATE_KEYS = ("step", "optimizer", "rng")  # what every state.pt holds (save_checkpoint)

# Optimizer steps a learned boundary policy needs before its boundaries settle (its validation
# whitespace rate within 0.05 of its final value): 500-750 at `tiny` on Shakespeare at three
# seeds, 500 on the French Debian Reference (debref-fr, one seed; docs/results/compare-tiny-seeds.md).
# `segment` and `eval` say so when a run has trained fewer.
SETTLE_STEPS = 750


class _KeepWriteError:
    """A binary file that keeps what stopped a write: torch.save reports it as a bare RuntimeError
    ("unexpected pos ..."), without the errno that says the disk is full, or the Ctrl-C that
    came during the write."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except BaseException as e:  # OSError (disk full), KeyboardInterrupt
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def save_torch(obj: Any, path: Path) -> None:
    """torch.save to `path`; a write that fails raises what stopped it: the OS's error (ENOSPC,
    EFBIG) or a KeyboardInterrupt."""
    with open(path, "wb") as f:
        kept = _KeepWriteError(f)
        try:
            torch.save(obj, kept)
        except RuntimeError:
            if kept.error is not None:
                raise kept.error from None
            raise


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The run's newest checkpoint folder, or None if it has none yet."""
    pointer = Path(run_dir) / "checkpoints" / LATEST
    return resolve(run_dir) if pointer.is_file() else None


@dataclass
class Checkpoint:
    path: Path  # the checkpoint folder
    step: int  # optimizer steps completed
    model_state: dict[str, torch.Tensor]  # weights, for model.load_state_dict
    state: dict[str, Any]  # state.pt: optimizer, rng and the loop's extra state
    config: dict[str, Any]  # the resolved RunConfig as a dict


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    run_cfg,
    extra: dict[str, Any] | None = None,
    keep: int = 3,
    average: torch.nn.Module | None = None,
) -> Path:
    """Write RUN/checkpoints/step_{step:07d} atomically, point `latest` at it, keep the newest
    `keep` checkpoints. The RNG states are captured here, so call it at a step boundary.
    `average` (the weights' moving average) is written inside it as a model folder, `EMA`."""
    ckpts = Path(run_dir) / "checkpoints"
    target = ckpts / f"step_{step:07d}"
    tmp = atomic_dir(target)
    try:
        write_model_files(model, tmp, run_cfg.to_dict())
        if average is not None:
            (tmp / EMA).mkdir()
            write_model_files(average, tmp / EMA, run_cfg.to_dict())
        state = {"step": step, "optimizer": optimizer.state_dict(), "rng": rng_state(), **(extra or {})}
        save_torch(state, tmp / STATE)
        commit(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_text_atomic(ckpts / LATEST, target.name)
    for old in sorted(ckpts.glob("step_*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def load_checkpoint(
    path: str | Path, map_location: str | torch.device = "cpu", needs: tuple[str, ...] = ()
) -> Checkpoint:
    """Read a training checkpoint (folder, or a run folder for its latest one). Its state.pt must
    hold the keys every checkpoint has (STATE_KEYS) and those in `needs` (the loop's extra state)."""
    folder = resolve(path)
    if not (folder / STATE).is_file():
        raise CheckpointError(f"{folder} is a model folder, not a training checkpoint (no {STATE})")
    try:
        state = torch.load(folder / STATE, map_location=map_location, weights_only=True)
    except Exception as e:  # pickle, zip and EOF errors from a truncated or garbled file
        raise read_failure(e, folder / STATE) from None
    missing = [k for k in (*STATE_KEYS, *needs) if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(
            f"{folder / STATE} is incomplete: it lacks {', '.join(missing)} (not a checkpoint "
            f"this learntok wrote, or a damaged one); resume from another checkpoint"
        )
    check_state(state, folder)
    weights = read_weights(folder / WEIGHTS, map_location)
    return Checkpoint(folder, state["step"], weights, state, read_config(folder))


RNG_KEYS = ("python", "numpy", "torch")  # the generators every state.pt's rng holds (runtime.rng_state)


def check_state(state: dict[str, Any], folder: Path) -> None:
    """What the loop and `compare --runs` read from a state.pt, by type before any use: the
    counts are integers >= 0, the step is the one its folder is named for (a state.pt copied
    from another checkpoint would silently train from there and cut the logs to it), and the
    RNG state is an object of the generators it restores."""
    where = folder / STATE
    for key in ("step", "bytes_seen"):
        if key in state:
            expect(state[key], "an integer", f"{where}: {key!r}", CheckpointError)
            if state[key] < 0:
                raise CheckpointError(f"{where}: {key!r} is {state[key]}, not a count (>= 0)")
    named = f"step_{state['step']:07d}"
    if folder.name.startswith("step_") and folder.name != named:
        raise CheckpointError(
            f"{where}: 'step' is {state['step']}, but its folder is {folder.name} (a state.pt of "
            f"another checkpoint?); resume from another checkpoint"
        )
    expect(state["rng"], "an object", f"{where}: 'rng'", CheckpointError)
    missing = [k for k in RNG_KEYS if k not in state["rng"]]
    if missing:
        raise CheckpointError(f"{where}: 'rng' lacks {', '.join(missing)} (a damaged checkpoint?)")


@dataclass(frozen=True)
class RunRef:
    """A run, checkpoint or model folder located once (`locate_run`): the checkpoint a run's
    `latest` named when it was read, with that checkpoint's config.json. Every later step of a
    command (the model load, the short-run hint, the report) reads this and never `latest` again,
    so that a training run rotating its checkpoints meanwhile cannot make them describe two."""

    path: Path  # as given: a run, checkpoint or model folder
    folder: Path  # the checkpoint or model folder it names
    config: dict[str, Any]  # its config.json, the stamp removed (a run config or a model config); read-only

    @property
    def step(self) -> int | None:
        """The optimizer steps behind it (its checkpoint's name says them); None for a model folder."""
        digits = self.folder.name[len("step_") :]
        return int(digits) if self.folder.name.startswith("step_") and digits.isdigit() else None

    @property
    def boundary(self) -> str | None:
        """The strategy of a run's checkpoint (its run config's model.boundary); None for a model folder."""
        model = self.config.get("model")
        return model.get("boundary") if isinstance(model, dict) else None


def locate_run(path: str | Path | RunRef) -> RunRef:
    """`path` located: `latest` read once and the checkpoint's config.json once (a RunRef is
    returned as it is). A run's latest checkpoint that a training run rotates away between the two
    reads (checkpoint.keep) is not an error: the newer latest is read instead, once."""
    if isinstance(path, RunRef):
        return path
    folder = resolve(path)
    try:
        return RunRef(Path(path), folder, _version_checked(read_config, folder))
    except (CheckpointError, FileNotFoundError):
        newer = _relocated(Path(path), folder)
        if newer is None:
            raise
        return RunRef(Path(path), newer, _version_checked(read_config, newer))


def _relocated(path: Path, folder: Path) -> Path | None:
    """The checkpoint `path` names now, when that is another than `folder` (a rotation); else None."""
    try:
        newer = resolve(path)
    except CheckpointError:
        return None
    return None if newer == folder else newer


def load_run(path: str | Path | RunRef, device: str | torch.device = "cpu") -> tuple[AUNet, RunConfig | None]:
    """The one way to load a run for evaluation: (model in eval mode, its RunConfig, or None for a
    bare model folder) from a run, checkpoint or model folder (`load_run_folder`, without the run)."""
    model, run_cfg, _ = load_run_folder(path, device)
    return model, run_cfg


def load_run_folder(
    path: str | Path | RunRef, device: str | torch.device = "cpu"
) -> tuple[AUNet, RunConfig | None, RunRef]:
    """`load_run` and the run it read (`locate_run`), each file read once. A config or weights that
    do not fit this version's model say that the checkpoint may be from another version. A run's
    latest checkpoint that a training run rotates away while it is read is not an error: the newer
    latest is located and read instead, once, and it is the run returned."""
    run = locate_run(path)
    try:
        return (*_load_located(run, device), run)
    except (CheckpointError, FileNotFoundError):
        newer = _relocated(run.path, run.folder)
        if newer is None:
            raise
        run = RunRef(run.path, newer, _version_checked(read_config, newer))
        return (*_load_located(run, device), run)


def _load_located(run: RunRef, device: str | torch.device) -> tuple[AUNet, RunConfig | None]:
    files = _version_checked(read_model_files, run.folder, copy.deepcopy(run.config), device)
    run_cfg = _version_checked(run_config_of, run)  # checked whole, as `train` checks it, before the model is built
    model = _version_checked(AUNet.from_files, files, map_location=device)
    return model.eval(), run_cfg


def _version_checked(read, *args, **kwargs):
    """`read(*args, **kwargs)`; a file that reads but does not fit this version's model says that
    it may be from another version (a file that could not be read, or holds numbers that are not
    numbers, has nothing to say of its version)."""
    try:
        return read(*args, **kwargs)
    except (CheckpointError, ConfigError) as e:
        if getattr(e, "os_fault", False) or isinstance(e, NotFiniteError):
            raise
        raise CheckpointError(f"{e} (a checkpoint from an incompatible learntok version?)") from None


def run_config_of(run: RunRef) -> RunConfig | None:
    """The run config in a located checkpoint's config.json (None for a bare model folder, whose
    config is the model's alone), without reading its weights: what `load_run` returns with the
    model, and what a command declares it reads from a run (its data). A bad section or value
    names the file."""
    if not isinstance(run.config.get("model"), dict):
        return None
    try:
        return RunConfig.from_dict(copy.deepcopy(run.config))
    except ConfigError as e:
        raise ConfigError(f"{run.folder / CONFIG}: {e}") from None


@contextmanager
def figures_of(folder: str | Path) -> Iterator[None]:
    """A figure that comes out NaN or infinite in the block (NotFiniteError) names `folder`, the
    checkpoint whose model gave it."""
    try:
        yield
    except NotFiniteError as e:
        raise NotFiniteError(f"{folder}: {e}") from None


def short_run_hint(run: str | Path | RunRef) -> str | None:
    """One line when `run` is a learned policy (a score-function strategy) trained for fewer than
    SETTLE_STEPS steps; None otherwise. A RunRef is described as it was located (nothing is read):
    the checkpoint a command evaluated, even if `latest` has moved on since."""
    run = locate_run(run)
    steps, boundary = run.step, run.boundary
    if steps is None or steps >= SETTLE_STEPS:
        return None
    if boundary not in strategy_names() or not strategy_class(boundary).has_policy:
        return None
    return (
        f"hint: this run has trained {steps} steps; a learned boundary policy needs about {SETTLE_STEPS} "
        f"to settle, so its boundaries (and whitespace rate) may still be moving"
    )


def save_run_checkpoint(
    run_dir: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    run_cfg: RunConfig,
    extra: dict[str, Any],
    env: DistEnv,
    average: nn.Module | None = None,
) -> Path:
    """Save a training run at `step` from every rank: rank 0 writes (`save_checkpoint`, keeping
    checkpoint.keep), every rank waits (FSDP: a collective gather of the whole state first)."""
    m, o = checkpoint_views(model, optimizer, run_cfg.system.fsdp)
    path = Path(run_dir) / "checkpoints" / f"step_{step:07d}"
    if env.is_main:
        path = save_checkpoint(run_dir, step, m, o, run_cfg, extra, keep=run_cfg.checkpoint.keep, average=average)
    barrier(env)
    return path


def resume_state(
    run_cfg: RunConfig,
    run_dir: Path,
    model: nn.Module,
    optimizer,
    resume: bool,
    identity: dict,
    ema: AveragedModel | None = None,
) -> tuple[int, int]:
    """Step 5 of training, fresh run or resume: returns (completed steps, bytes seen) and
    restores state in place (the weights' average `ema` too). A resume is refused when its data
    source now holds other bytes than `identity` recorded."""
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
