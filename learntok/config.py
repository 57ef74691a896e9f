"""Run configuration: component configs composed into one RunConfig (DESIGN §7).

Layered and strict: dataclass defaults <- a preset TOML (packaged under learntok/configs, or
any file) <- `section.key=value` overrides. Unknown sections or keys and values of the wrong
type fail at start-up with the offending name and value. The resolved config is dumped to
TOML (run folder) or JSON (checkpoints).
"""
from __future__ import annotations

import dataclasses
import json
import math
import tomllib
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from learntok.boundaries import strategy_class, strategy_names
from learntok.data import DataConfig
from learntok.errors import ConfigError
from learntok.files import read_input, write_text_atomic
from learntok.model.config import ModelConfig
from learntok.objective import ObjectiveConfig




@dataclass
class TrainConfig:
    """What is trained on: the budget, the batch and the seed."""
    steps: int = 10000                 # optimizer steps in the run (0: from train_bytes)
    train_bytes: float = 0.0           # budget in bytes (batch_size x seq_len per step) when steps = 0, e.g. 8.3e8
    batch_size: int = 32               # sequences per step (global: summed over ranks and micro-batches)
    micro_batch_size: int = 0          # sequences per forward/backward; batch_size / world / this = accumulation steps (0 = no accumulation)
    seq_len: int = 4096                # T: bytes per sequence, BOS included
    seed: int = 0                      # seed of the init, the batch order and the boundary samples

    def __post_init__(self) -> None:
        if self.steps == 0 and self.train_bytes > 0:
            self.steps = math.ceil(self.train_bytes / (self.batch_size * self.seq_len))
        for name in ("steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} {getattr(self, name)} must be >= 1"
                                 + (" (or set train.train_bytes)" if name == "steps" else ""))
        if self.micro_batch_size < 0 or (self.micro_batch_size and self.batch_size % self.micro_batch_size):
            raise ValueError(f"train.micro_batch_size {self.micro_batch_size} does not divide train.batch_size {self.batch_size}")
        if self.seq_len < 2:
            raise ValueError(f"train.seq_len {self.seq_len} must be >= 2 (BOS and one byte)")

    @property
    def bytes_per_step(self) -> int:
        return self.batch_size * self.seq_len


@dataclass
class OptimConfig:
    """AdamW and its learning-rate schedule (linear warm-up, cosine decay)."""
    lr: float = 3e-3                   # peak learning rate (after warm-up)
    min_lr_ratio: float = 0.1          # final learning rate of the cosine decay, as a fraction of lr
    warmup_steps: int = 500            # linear warm-up steps from 0 to lr (0: from warmup_bytes)
    warmup_bytes: float = 0.0          # warm-up in bytes when warmup_steps = 0, e.g. 6.2e7
    warmup_start: float = 0.0          # the warm-up rises linearly from warmup_start x lr (the authors' code: 0.1)
    weight_decay: float = 0.1          # AdamW decoupled weight decay
    decay_all: bool = False            # decay every parameter (the authors' code: PyTorch's AdamW on all) instead of matrices only (not norms, biases, embeddings)
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW (beta1, beta2)
    eps: float = 1e-8                  # AdamW epsilon
    grad_clip: float = 1.0             # max global gradient norm (0 = no clipping)
    policy_lr_mult: float = 1.0        # learning-rate multiplier of the learned policy's parameters (strategies with a score-function policy only)

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"optim.min_lr_ratio {self.min_lr_ratio} must be in [0, 1]")
        if len(self.betas) != 2:
            raise ValueError(f"optim.betas {self.betas} must have two values")
        if self.warmup_steps < 0 or self.warmup_bytes < 0:
            raise ValueError("optim.warmup_steps and optim.warmup_bytes must be >= 0")


@dataclass
class LogConfig:
    """What the run records and how often (each record is one host sync)."""
    log_every: int = 10                # steps between metrics.jsonl lines (and host syncs)
    eval_every: int = 500              # steps between validations (0 = only at the end)
    eval_bytes: int = 1_000_000        # cap on validation bytes per periodic evaluation
    segment_every: int = 500           # steps between sample segmentations in segments.txt (0 = never)

    def __post_init__(self) -> None:
        if self.log_every < 1:
            raise ValueError(f"log.log_every {self.log_every} must be >= 1")


@dataclass
class CheckpointConfig:
    every: int = 1000                  # steps between checkpoints (0 = only at the end)
    keep: int = 3                      # how many of the latest checkpoints to keep on disk

    def __post_init__(self) -> None:
        if self.keep < 1:
            raise ValueError(f"checkpoint.keep {self.keep} must be >= 1")


@dataclass
class SystemConfig:
    """Where and how the run executes; none of it changes the result on CPU."""
    device: str = "auto"               # auto | cpu | cuda | cuda:N
    dtype: str = "auto"                # autocast dtype: auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16
    compile: bool = False              # wrap the model in torch.compile (automatic dynamic shapes for the token count)
    fsdp: bool = False                 # under torchrun: shard parameters, gradients and optimizer state (FSDP2) instead of DDP
    threads: int = 0                   # CPU threads for torch (0: torch's default, all cores); 1 when runs share a machine

    def __post_init__(self) -> None:
        if self.dtype not in ("auto", "fp32", "bf16"):
            raise ValueError(f"system.dtype {self.dtype!r} is not one of auto, fp32, bf16")
        if self.threads < 0:
            raise ValueError(f"system.threads {self.threads} must be >= 0")


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    log: LogConfig = field(default_factory=LogConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    system: SystemConfig = field(default_factory=SystemConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Every section; the strategy's options are their own [strategy] section."""
        d = {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}
        d[STRATEGY] = d["model"].pop(STRATEGY)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """Strict: every section and key must exist; missing ones take their defaults."""
        return build(merge(defaults(), d, "config"))


SECTIONS: dict[str, type] = {"model": ModelConfig, "objective": ObjectiveConfig, "data": DataConfig,
                             "train": TrainConfig, "optim": OptimConfig, "log": LogConfig,
                             "checkpoint": CheckpointConfig, "system": SystemConfig}


STRATEGY = "strategy"  # the section of the chosen strategy's own options (model.boundary's config class)


def defaults() -> dict[str, dict[str, Any]]:
    return RunConfig().to_dict()


def strategy_options(boundary: str, values: dict[str, Any], source: str = "strategy") -> dict[str, Any]:
    """The [strategy] section checked against model.boundary's config class: every option, with
    defaults for those not given. An unknown strategy, or a key of another strategy, is an error."""
    if boundary not in strategy_names():
        raise ConfigError(f"model.boundary {boundary!r} is not a boundary strategy; known: {', '.join(strategy_names())}")
    cls = strategy_class(boundary).Config
    hints = _field_types(cls)
    for key in values:
        if key not in hints:
            known = ", ".join(hints) or "none"
            raise ConfigError(f"{source}: {STRATEGY}.{key} is not an option of strategy {boundary!r} (its options: {known})")
    given = {k: _check(v, hints[k], f"{STRATEGY}.{k}") for k, v in values.items()}
    try:
        return dataclasses.asdict(cls(**given))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{STRATEGY}: {e}") from None


def build(d: dict[str, dict[str, Any]]) -> RunConfig:
    """Instantiate each section; invariant failures (__post_init__) become ConfigError."""
    parts = {}
    for name, cls in SECTIONS.items():
        values = d[name]
        if name == "model":
            values = {**values, STRATEGY: strategy_options(values["boundary"], d.get(STRATEGY, {}))}
        try:
            parts[name] = cls(**values)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{name}: {e}") from None
    cfg = RunConfig(**parts)
    if cfg.optim.warmup_steps == 0 and cfg.optim.warmup_bytes > 0:
        cfg.optim.warmup_steps = math.ceil(cfg.optim.warmup_bytes / cfg.train.bytes_per_step)
    return cfg


# ---------------------------------------------------------------- types


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _union(convert, value: Any, tp: Any, name: str) -> Any:
    """The first member of a Union (Optional) type that `convert` accepts, None aside."""
    for arg in typing.get_args(tp):
        if arg is not type(None):
            try:
                return convert(value, arg, name)
            except ConfigError:
                pass
    raise ConfigError(f"{name} = {value!r}: expected {tp}")


def _check(value: Any, tp: Any, name: str) -> Any:
    """Check a structured value (TOML / JSON) against a field type; ints are accepted as floats
    and lists as tuples. Returns the value converted to the field's type."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return None if value is None and type(None) in args else _union(_check, value, tp, name)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name} = {value!r}: expected a list")
        elem = args[0] if args else Any
        if len(args) > 1 and args[1] is not Ellipsis and len(value) != len(args):
            raise ConfigError(f"{name} = {value!r}: expected {len(args)} values")
        return tuple(_check(v, elem, name) for v in value)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is Any:
        return value
    raise ConfigError(f"{name} = {value!r}: expected {getattr(tp, '__name__', tp)}")


_BOOLS = {"true": True, "1": True, "false": False, "0": False}


def parse_value(text: str, tp: Any, name: str) -> Any:
    """Parse an override's text by the field's type: bool (true/false/1/0), int, float, str,
    optional (none/null), tuple (comma-separated, brackets optional)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return None if text.lower() in ("none", "null") and type(None) in args else _union(parse_value, text, tp, name)
    if origin is tuple:
        items = [s.strip() for s in text.strip().strip("[]()").split(",") if s.strip()]
        return _check([parse_value(s, args[0], name) for s in items], tp, name)
    try:
        if tp is bool:
            return _BOOLS[text.lower()]
        if tp is int:
            return int(text.replace("_", ""))
        if tp is float:
            return float(text)
    except (KeyError, ValueError):
        raise ConfigError(f"{name}={text}: expected {tp.__name__}") from None
    return text


# ---------------------------------------------------------------- layering


def merge(base: dict[str, dict[str, Any]], update: dict[str, Any], source: str) -> dict[str, dict[str, Any]]:
    """base with update's values checked against the dataclass field types; strict on names."""
    out = {k: dict(v) for k, v in base.items()}
    if not isinstance(update, dict):
        raise ConfigError(f"{source}: expected a table of sections, got {type(update).__name__}")
    if isinstance(update.get("model"), dict) and STRATEGY in update["model"]:  # a model's config.json
        update = {**update, "model": {k: v for k, v in update["model"].items() if k != STRATEGY},
                  STRATEGY: update["model"][STRATEGY]}
    if "boundary" in update.get("model", {}) and update["model"]["boundary"] != out["model"]["boundary"]:
        out[STRATEGY] = {}                                       # another strategy: the old one's options go
    for section, values in update.items():
        if section not in SECTIONS and section != STRATEGY:
            raise ConfigError(f"{source}: unknown section [{section}]; known: {', '.join([*SECTIONS, STRATEGY])}")
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: [{section}] must be a table, got {values!r}")
        if section == STRATEGY:                                  # checked against the strategy in build()
            out[STRATEGY].update(values)
            continue
        hints = _field_types(SECTIONS[section])
        for key, value in values.items():
            if key not in hints:
                raise ConfigError(f"{source}: unknown key {section}.{key}; known: {', '.join(out[section])}")
            out[section][key] = _check(value, hints[key], f"{section}.{key}")
    return out


def apply_overrides(base: dict[str, dict[str, Any]], overrides: list[str]) -> dict[str, dict[str, Any]]:
    """Apply `section.key=value` strings, each parsed by its field's type (a strategy option by the
    config class of the strategy chosen after every override: `model.boundary` is applied first)."""
    update: dict[str, dict[str, Any]] = {}
    boundary_first = sorted(overrides, key=lambda item: not item.strip().startswith("model.boundary="))
    for item in boundary_first:
        key, eq, text = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not eq or not dot:
            raise ConfigError(f"override {item!r} is not of the form section.key=value")
        if section == STRATEGY:
            boundary = update.get("model", {}).get("boundary", base["model"]["boundary"])
            if boundary not in strategy_names():
                raise ConfigError(f"model.boundary {boundary!r} is not a boundary strategy; known: {', '.join(strategy_names())}")
            hints = _field_types(strategy_class(boundary).Config)
            if name not in hints:
                raise ConfigError(f"override {item!r}: {name!r} is not an option of strategy {boundary!r} "
                                  f"(its options: {', '.join(hints) or 'none'})")
            update.setdefault(section, {})[name] = parse_value(text.strip(), hints[name], key.strip())
            continue
        if section not in SECTIONS:
            raise ConfigError(f"override {item!r}: unknown section {section!r}; known: {', '.join([*SECTIONS, STRATEGY])}")
        hints = _field_types(SECTIONS[section])
        if name not in hints:
            raise ConfigError(f"override {item!r}: unknown key {section}.{name}")
        update.setdefault(section, {})[name] = parse_value(text.strip(), hints[name], key.strip())
    return merge(base, update, "override")


def preset_names() -> list[str]:
    folder = resources.files("learntok").joinpath("configs")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def read_preset(name: str) -> dict[str, Any]:
    path = resources.files("learntok").joinpath("configs", f"{name}.toml")
    if not path.is_file():
        raise ConfigError(f"unknown preset {name!r}; known: {', '.join(preset_names())}")
    return tomllib.loads(path.read_text(encoding="utf-8"))


CONFIG_BYTES = 16 << 20  # a config file larger than this is not a config (read bound)


def read_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    data = read_input(path, "config file", CONFIG_BYTES, ConfigError)   # a regular file, bounded
    try:
        if path.name.removesuffix(".gz").endswith(".json"):
            return json.loads(data.decode("utf-8"))
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {e.start}: {e.reason})") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"config file {path}: {e}") from None


def load_config(preset: str | None = None, file: str | Path | None = None,
                overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """defaults <- preset <- file <- overrides, checked at each layer."""
    d = defaults()
    if preset is not None:
        d = merge(d, read_preset(preset), f"preset {preset}")
    if file is not None:
        d = merge(d, read_file(file), str(file))
    return build(apply_overrides(d, list(overrides)))


# ---------------------------------------------------------------- dumping


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")) if not math.isfinite(v) else repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, (int, str)):
        return json.dumps(v)  # JSON strings are valid TOML basic strings
    raise TypeError(f"cannot write {v!r} to TOML")


def to_toml(cfg: RunConfig) -> str:
    """Flat sections of scalars; None values are left out (TOML has no null: the default stands)."""
    lines = []
    for section, values in cfg.to_dict().items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items() if v is not None]
        lines.append("")
    return "\n".join(lines)


def to_json(cfg: RunConfig) -> str:
    return json.dumps(cfg.to_dict(), indent=2)


def save_config(cfg: RunConfig, path: str | Path) -> None:
    path = Path(path)
    write_text_atomic(path, to_json(cfg) if path.suffix == ".json" else to_toml(cfg))


def from_model_dict(d: dict[str, Any]) -> ModelConfig:
    """A strict ModelConfig from a dict (checkpoint config.json)."""
    if not isinstance(d, dict):
        raise ConfigError(f"a model config must be a table, got {type(d).__name__}")
    return build(merge(defaults(), {"model": d}, "model config")).model
