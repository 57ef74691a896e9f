"""Model folders on disk (docs/design.md §7): the file format under `save_pretrained` / `from_pretrained`.

A model folder: `model.safetensors` (weights) + `config.json` (the ModelConfig, or the resolved
RunConfig in a training checkpoint), stamped with the format version. A run folder names its
newest checkpoint in `checkpoints/latest`. Training checkpoints (learntok.run.checkpoint) build on
these files; nothing here knows about optimizers or runs beyond finding the latest checkpoint.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load, load_file, save_file

from learntok import __version__
from learntok.boundaries.options import STRATEGY, strategy_options, upgraded
from learntok.util.errors import CheckpointError, ConfigError, NotFiniteError, OutputError
from learntok.util.typed_fields import check_fields, is_utf8
from learntok.util.files import check_name, read_input, replaceable_folder, resolved
from learntok.model.config import ModelConfig
from learntok.model.sizes import FP32, check_model_sizes
from learntok.util.ranges import INT64
from learntok.util.shipped import named_folder, unknown_name
from learntok.util.json_toml import expect, parse_json

WEIGHTS, CONFIG, LATEST = "model.safetensors", "config.json", "latest"
MODEL_FILES = frozenset((WEIGHTS, CONFIG))  # a model folder holds these and nothing else

FORMAT_KEY, FORMAT_VERSION = "format_version", 1  # bump when weights or config.json change incompatibly
# config.json's keys for `transformers` (learntok.hf): every folder written says it is a learntok model,
# so that AutoConfig / AutoModelForCausalLM read it; an exported folder adds its classes. Ignored here.
MODEL_TYPE = "learntok"
TRANSFORMERS_KEYS = ("model_type", "architectures", "auto_map", "transformers_version")


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def os_error_of(e: BaseException, path: Path) -> OSError | None:
    """The OS error behind a failed read or write of `path`: `e` itself, or the one safetensors
    reports only inside its message ("... (os error 28)"); None if it was no OS error."""
    if isinstance(e, OSError):
        return e
    found = re.search(r"\(os error (\d+)\)", str(e))
    return OSError(int(found[1]), os.strerror(int(found[1])), str(path)) if found else None


def read_failure(e: BaseException, path: Path) -> Exception:
    """What to raise when reading `path` failed with `e`: a missing file says so, another OS
    error (permission denied, an I/O error) stays that OSError (the command line says it in one
    line), anything else is a file that does not parse."""
    err = os_error_of(e, path)
    if err is not None and err.errno == errno.ENOENT:
        return CheckpointError(f"{path} is missing")
    if err is not None:
        return err
    return CheckpointError(f"cannot read {path} (corrupt?): {one_line(e)}")


def write_model_files(model: torch.nn.Module, folder: Path, config: dict) -> None:
    # Clone every tensor: safetensors refuses tensors that share storage (tied weights).
    tensors = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in model.state_dict().items()}
    try:
        save_file(tensors, str(folder / WEIGHTS))
    except Exception as e:  # safetensors' own error: keep the OS's (disk full)
        raise (os_error_of(e, folder / WEIGHTS) or e) from None
    stamped = {FORMAT_KEY: FORMAT_VERSION, "learntok_version": __version__, "model_type": MODEL_TYPE, **config}
    (folder / CONFIG).write_text(json.dumps(stamped, indent=2), encoding="utf-8")


def check_format(config: dict, where: Path) -> dict:
    """Refuse a checkpoint written in another format (saying which); return the config without
    the stamp. Files without a stamp are read as the current format."""
    if not isinstance(config, dict):
        raise CheckpointError(f"{where} holds a JSON {type(config).__name__}, not an object (a config)")
    if config.get("model_type", MODEL_TYPE) != MODEL_TYPE:
        raise CheckpointError(
            f"{where} is the config of a {config['model_type']!r} model (transformers), not of a learntok model"
        )
    found = config.get(FORMAT_KEY, FORMAT_VERSION)
    if found != FORMAT_VERSION:
        by = config.get("learntok_version", "another version")
        raise CheckpointError(
            f"{where} has checkpoint format {found} (written by learntok {by}); "
            f"this learntok reads format {FORMAT_VERSION}"
        )
    return {k: v for k, v in config.items() if k not in (FORMAT_KEY, "learntok_version", *TRANSFORMERS_KEYS)}


def atomic_dir(target: Path) -> Path:
    """A fresh temporary folder beside `target`; call `commit(tmp, target)` when it is complete.
    It gets the permissions of any new folder (the umask's), not tempfile.mkdtemp's 0700, which
    would lock everyone but its owner out of the checkpoint it becomes."""
    target.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = target.parent / f".{target.name}.tmp-{secrets.token_hex(6)}"
        try:
            tmp.mkdir()
            return tmp
        except FileExistsError:
            continue


def commit(tmp: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    os.replace(tmp, target)


# A model folder's config.json key for the window its weights were trained at (train.seq_len): a
# model folder holds no run config, and evaluation defaults to this length (the same weights give
# another bpb at another length).
TRAINED_SEQ_LEN = "trained_seq_len"


def model_folder_config(model: torch.nn.Module) -> dict:
    """The model config, with the window the model was trained at when it is known."""
    trained = getattr(model, TRAINED_SEQ_LEN, None)
    return {**asdict(model.cfg), **({TRAINED_SEQ_LEN: trained} if trained else {})}


def trained_seq_len(config: dict, where: Path) -> int | None:
    """The training window a folder's config records: a run config's train.seq_len, or a model
    folder's TRAINED_SEQ_LEN (removed from `config`, which is then the model config alone)."""
    if "model" in config:
        train = config.get("train")
        key, n = "train.seq_len", train.get("seq_len") if isinstance(train, dict) else None
    else:
        key, n = TRAINED_SEQ_LEN, config.pop(TRAINED_SEQ_LEN, None)
    if n is not None and (type(n) is not int or not 2 <= n <= INT64[1]):
        raise CheckpointError(f"{where}: {key} {n!r} must be an integer >= 2 (bytes a window, BOS included)")
    return n


def save_model(model: torch.nn.Module, path: str | Path, config: dict | None = None) -> Path:
    """Write `model.safetensors` + `config.json` (`config`: a run config's dict, read back as a
    run's; default the model config) into folder `path`, atomically. The folder it replaces must
    be a model folder (these two files alone), empty or missing: a run folder, a checkpoint or
    any other folder is refused (OutputError) rather than deleted."""
    target = replaceable_folder(path, MODEL_FILES, "save_pretrained:", OutputError)
    tmp = atomic_dir(target)
    try:
        write_model_files(model, tmp, model_folder_config(model) if config is None else config)
        commit(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve(path: str | Path) -> Path:
    """A model or checkpoint folder from: that folder, a run folder (its latest checkpoint), a
    run's `checkpoints` folder, or a shipped model's name (learntok.util.shipped). A run reads only inside itself: `latest` must name a
    checkpoint folder that is, symlinks resolved, inside the folder given."""
    check_name(path, "model path")  # a name the system refuses: one line, not the OS's traceback
    # a shipped name or a Hub repo id (learntok.util.shipped) stands for its folder
    p = named_folder(path) or Path(path)
    if not p.exists():
        raise CheckpointError(f"{p} does not exist{unknown_name(os.fspath(path))}")
    if (p / WEIGHTS).is_file():
        return p
    for ckpts in (p / "checkpoints", p):
        pointer = ckpts / LATEST
        if pointer.is_file():
            name = read_input(pointer, "checkpoint pointer", 4096, CheckpointError).decode("utf-8", "replace").strip()
            target = ckpts / name
            # a folder's name: one line of printable text (no NUL, newline or other control character)
            if not name or Path(name).name != name or name in (".", "..") or not name.isprintable():
                raise CheckpointError(
                    f"{pointer} names {name!r}, which is not a checkpoint folder's name: "
                    f"a run reads only its own checkpoints"
                )
            real = resolved(target, f"{pointer} names", CheckpointError)
            if not real.is_relative_to(resolved(p, "model path", CheckpointError)):
                raise CheckpointError(
                    f"{pointer} names {name}, a link to {real} outside {p}: a run reads only its own checkpoints"
                )
            if not (target / WEIGHTS).is_file():
                raise CheckpointError(f"{pointer} names {target.name}, which has no {WEIGHTS}")
            return target
    raise CheckpointError(f"{p} is neither a model folder (no {WEIGHTS}) nor a run folder with checkpoints")


CONFIG_BYTES = 64 << 20  # a config.json larger than this is not a model's config (read bound)


def read_json(path: Path) -> dict:
    if not path.exists():
        raise CheckpointError(f"{path} is missing")
    try:
        return parse_json(read_input(path, "model config", CONFIG_BYTES, CheckpointError).decode("utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot read {path}: {one_line(e)}") from None


def read_config(folder: Path) -> dict:
    """A model or checkpoint folder's config.json, its format checked and its stamp removed."""
    return check_format(read_json(folder / CONFIG), folder / CONFIG)


def read_weights(path: Path, map_location: str | torch.device) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing")
    try:
        if is_utf8(str(path)):
            weights = load_file(str(path), device=str(map_location))
        else:  # safetensors opens UTF-8 paths only: a folder named in another encoding is read here
            weights = {k: v.to(map_location) for k, v in load(path.read_bytes()).items()}
    except Exception as e:  # safetensors raises its own error types for truncated/garbled files
        raise read_failure(e, path) from None
    return check_finite(weights, path)


def check_finite(weights: dict[str, torch.Tensor], path: Path) -> dict[str, torch.Tensor]:
    """`weights`, refused when a floating tensor holds NaN or an infinity: every model and
    checkpoint is read here, so no command evaluates, samples or segments with weights that are
    not numbers (a run that diverged, a damaged file), nor prints `bpb nan` for them."""
    for name, tensor in weights.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            found = "NaN" if bool(torch.isnan(tensor).any()) else "an infinity"
            raise NotFiniteError(
                f"{path}: weight {name} holds {found}; weights must be finite numbers "
                f"(a run that diverged, or a damaged file?): use an earlier checkpoint"
            )
    return weights


def model_config(d: dict) -> ModelConfig:
    """A strict ModelConfig from a config.json's model table, its strategy's options under
    `strategy`: unknown keys and wrong types are errors, keys that moved are read at their new
    place (learntok.boundaries.options.MOVED_KEYS), missing ones take their defaults; its sizes
    checked as `train` checks them, and its weights against this machine's memory
    (learntok.model.sizes), so that no reader of a folder starts building a model it cannot hold."""
    expect(d, "an object", "model config", ConfigError)
    expect(d.get(STRATEGY, {}), "an object", f"[{STRATEGY}]", ConfigError)
    table = upgraded({"model": d}, ModelConfig.boundary)  # old keys at their place today, once
    given, options = table["model"], table[STRATEGY]
    values = check_fields(ModelConfig, given, "model", "model config")
    options = strategy_options(
        values.get("boundary", ModelConfig.boundary), options, conditioned=bool(values.get("rate_conditioned"))
    )
    try:
        cfg = ModelConfig(**values, strategy=options)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"model: {e}") from None
    check_model_sizes(cfg, FP32)  # before anything is built: the bounds `train` applies, and this machine's memory
    return cfg


@dataclass
class ModelFiles:
    """A model, checkpoint or run folder read once: what `AUNet.from_files` builds a model from."""

    folder: Path  # the model or checkpoint folder (a run folder's latest checkpoint)
    config: dict  # its config.json, the stamp removed (a run config or a model config)
    model: ModelConfig  # the model config in it
    weights: dict[str, torch.Tensor]  # model.safetensors
    trained_seq_len: int | None = None  # the window it was trained at, when the folder says (`trained_seq_len`)


def read_model(path: str | Path, map_location: str | torch.device = "cpu") -> ModelFiles:
    """The files of a model folder, a checkpoint folder or a run folder (latest checkpoint)."""
    folder = resolve(path)
    return read_model_files(folder, read_config(folder), map_location)


def read_model_files(folder: Path, config: dict, map_location: str | torch.device = "cpu") -> ModelFiles:
    """The files of the model or checkpoint `folder` whose config.json (`read_config`) is `config`
    (taken over: its training window is removed), the weights read here."""
    trained = trained_seq_len(config, folder / CONFIG)
    model = config
    if "model" in config:  # a run config: its model and strategy sections
        expect(config["model"], "an object", f"{folder / CONFIG}: [model]", CheckpointError)
        model = {**config["model"], STRATEGY: config.get(STRATEGY, {})}
    try:
        cfg = model_config(model)
    except ConfigError as e:
        raise CheckpointError(f"{folder / CONFIG}: {e}") from None
    return ModelFiles(folder, config, cfg, read_weights(folder / WEIGHTS, map_location), trained)


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], where: Path) -> None:
    """model.load_state_dict, a mismatch with the config said in one line: a missing or extra
    weight, a shape, or a dtype of the wrong kind (integers where the model has floats, which
    load_state_dict would convert without a word)."""
    own = model.state_dict()
    for name, tensor in weights.items():
        if name in own and tensor.is_floating_point() != own[name].is_floating_point():
            raise CheckpointError(f"{where}: weight {name} is {tensor.dtype}, the model's is {own[name].dtype}")
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        raise CheckpointError(f"{where} does not match its config: {one_line(e)}") from None
