"""Model files and training checkpoints (DESIGN §7).

A model folder: `model.safetensors` (weights) + `config.json` (the ModelConfig).
A training checkpoint `RUN/checkpoints/step_NNNNNNN/`: `model.safetensors`, `state.pt`
(optimizer, step, RNG states, anything else the loop needs for an exact resume) and
`config.json` (the resolved RunConfig). Each is written into a temporary folder and then
renamed into place, and `RUN/checkpoints/latest` names the newest one (also replaced
atomically), so a crash never leaves a half-written checkpoint behind the pointer.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

WEIGHTS, STATE, CONFIG, LATEST = "model.safetensors", "state.pt", "config.json", "latest"


class CheckpointError(RuntimeError):
    """A missing or unreadable model file or checkpoint (one-line message)."""


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


FORMAT_KEY, FORMAT_VERSION = "format_version", 1  # bump when weights or config.json change incompatibly


def _write_model_files(model: torch.nn.Module, folder: Path, config: dict) -> None:
    # Clone every tensor: safetensors refuses tensors that share storage (tied weights).
    tensors = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, str(folder / WEIGHTS))
    from learntok import __version__
    stamped = {FORMAT_KEY: FORMAT_VERSION, "learntok_version": __version__, **config}
    (folder / CONFIG).write_text(json.dumps(stamped, indent=2), encoding="utf-8")


def check_format(config: dict, where: Path) -> dict:
    """Refuse a checkpoint written in another format (saying which); return the config without
    the stamp. Files without a stamp are read as the current format."""
    if not isinstance(config, dict):
        raise CheckpointError(f"{where} holds a JSON {type(config).__name__}, not an object (a config)")
    found = config.get(FORMAT_KEY, FORMAT_VERSION)
    if found != FORMAT_VERSION:
        by = config.get("learntok_version", "another version")
        raise CheckpointError(f"{where} has checkpoint format {found} (written by learntok {by}); "
                              f"this learntok reads format {FORMAT_VERSION}")
    return {k: v for k, v in config.items() if k not in (FORMAT_KEY, "learntok_version")}


def _atomic_dir(target: Path):
    """A fresh temporary folder beside `target`; call `_commit(tmp, target)` when it is complete."""
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))


def _commit(tmp: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    os.replace(tmp, target)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Replace `path` by `text`: write a temporary file beside it, flush it to disk, rename it
    over `path` (a reader, or a crash, sees the old file or the new one, never a mix)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def remove_stale_tmp(folder: str | Path) -> list[Path]:
    """Remove what interrupted atomic writes left in `folder` (`.NAME.tmp-*` files and folders).
    Call it only while no other process writes there (learntok.runfolder holds the lock)."""
    folder = Path(folder)
    stale = sorted(folder.glob(".*.tmp-*")) if folder.is_dir() else []
    for path in stale:
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)
    return stale


def save_model(model: torch.nn.Module, path: str | Path) -> Path:
    """Write `model.safetensors` + `config.json` (the model config) into folder `path`, atomically."""
    target = Path(path)
    tmp = _atomic_dir(target)
    try:
        _write_model_files(model, tmp, asdict(model.cfg))
        _commit(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve(path: str | Path) -> Path:
    """A model or checkpoint folder from: that folder, a run folder (its latest checkpoint), or
    a run's `checkpoints` folder."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"{p} does not exist")
    if (p / WEIGHTS).is_file():
        return p
    for ckpts in (p / "checkpoints", p):
        pointer = ckpts / LATEST
        if pointer.is_file():
            target = ckpts / pointer.read_text(encoding="utf-8").strip()
            if not (target / WEIGHTS).is_file():
                raise CheckpointError(f"{pointer} names {target.name}, which has no {WEIGHTS}")
            return target
    raise CheckpointError(f"{p} is neither a model folder (no {WEIGHTS}) nor a run folder with checkpoints")


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The run's newest checkpoint folder, or None if it has none yet."""
    pointer = Path(run_dir) / "checkpoints" / LATEST
    return resolve(run_dir) if pointer.is_file() else None


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot read {path}: {_one_line(e)}") from None


def _read_weights(path: Path, map_location: str | torch.device) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing")
    try:
        return load_file(str(path), device=str(map_location))
    except Exception as e:  # safetensors raises its own error types for truncated/garbled files
        raise CheckpointError(f"cannot read {path} (corrupt?): {_one_line(e)}") from None


def load_model(path: str | Path, map_location: str | torch.device = "cpu"):
    """An AUNet from a model folder, a checkpoint folder or a run folder (latest checkpoint)."""
    from learntok.config import ConfigError, from_model_dict
    from learntok.model.aunet import AUNet

    folder = resolve(path)
    config = check_format(_read_json(folder / CONFIG), folder / CONFIG)
    model_dict = config["model"] if isinstance(config.get("model"), dict) else config  # run config or model config
    try:
        cfg = from_model_dict(model_dict)
    except ConfigError as e:
        raise CheckpointError(f"{folder / CONFIG}: {e}") from None
    try:
        model = AUNet(cfg)
    except ValueError as e:                                      # e.g. a boundary strategy this learntok lacks
        raise CheckpointError(f"{folder / CONFIG}: {_one_line(e)}") from None
    weights = _read_weights(folder / WEIGHTS, map_location)
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        raise CheckpointError(f"{folder / WEIGHTS} does not match its config: {_one_line(e)}") from None
    return model.to(map_location)


@dataclass
class Checkpoint:
    path: Path                           # the checkpoint folder
    step: int                            # optimizer steps completed
    model_state: dict[str, torch.Tensor]  # weights, for model.load_state_dict
    state: dict[str, Any]                # state.pt: optimizer, rng and the loop's extra state
    config: dict[str, Any]               # the resolved RunConfig as a dict


def save_checkpoint(run_dir: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    run_cfg, extra: dict[str, Any] | None = None, keep: int = 3) -> Path:
    """Write RUN/checkpoints/step_{step:07d} atomically, point `latest` at it, keep the newest
    `keep` checkpoints. The RNG states are captured here, so call it at a step boundary."""
    from learntok.runtime import rng_state

    ckpts = Path(run_dir) / "checkpoints"
    target = ckpts / f"step_{step:07d}"
    tmp = _atomic_dir(target)
    try:
        _write_model_files(model, tmp, run_cfg.to_dict())
        state = {"step": step, "optimizer": optimizer.state_dict(), "rng": rng_state(), **(extra or {})}
        torch.save(state, tmp / STATE)
        _commit(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_text_atomic(ckpts / LATEST, target.name)
    for old in sorted(ckpts.glob("step_*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> Checkpoint:
    """Read a training checkpoint (folder, or a run folder for its latest one)."""
    folder = resolve(path)
    if not (folder / STATE).is_file():
        raise CheckpointError(f"{folder} is a model folder, not a training checkpoint (no {STATE})")
    try:
        state = torch.load(folder / STATE, map_location=map_location, weights_only=True)
    except Exception as e:  # pickle, zip and EOF errors from a truncated or garbled file
        raise CheckpointError(f"cannot read {folder / STATE} (corrupt?): {_one_line(e)}") from None
    weights = _read_weights(folder / WEIGHTS, map_location)
    config = check_format(_read_json(folder / CONFIG), folder / CONFIG)
    return Checkpoint(folder, int(state["step"]), weights, state, config)
