"""Run configuration: component configs composed into one RunConfig (DESIGN §7).

Layered and strict: dataclass defaults <- a preset TOML (packaged under learntok/configs, or
any file) <- `section.key=value` overrides. Unknown sections or keys, values of the wrong type
and values outside the range their field declares (learntok.ranges; NaN, infinities and ints
beyond int64 never pass) fail at start-up with the offending name and value. The resolved config is dumped to
TOML (run folder) or JSON (checkpoints).
"""
from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from learntok.boundaries import strategy_class, strategy_names
from learntok.data import DataConfig
from learntok.errors import ConfigError
from learntok.model.config import ModelConfig
from learntok.objective import ObjectiveConfig
from learntok.ranges import INT64, SEED, THREADS, Range, field_range, ranged
from learntok.structured import FormatError, parse_json, parse_toml


@dataclass
class TrainConfig:
    """What is trained on: the budget, the batch and the seed."""
    steps: int = ranged(10000, ge=0)                     # optimizer steps in the run (0: from train_bytes)
    train_bytes: float = ranged(0.0, ge=0, le=INT64[1])  # budget in bytes (batch_size x seq_len per step) when steps = 0, e.g. 8.3e8
    batch_size: int = ranged(32, ge=1)                   # sequences per step (global: summed over ranks and micro-batches)
    micro_batch_size: int = ranged(0, ge=0)              # sequences per forward/backward; batch_size / world / this = accumulation steps (0 = no accumulation)
    seq_len: int = ranged(4096, ge=2)                    # T: bytes per sequence, BOS and at least one byte
    seed: int = ranged(0, SEED)                          # seed of the init, the batch order and the boundary samples

    def __post_init__(self) -> None:
        if self.steps == 0 and self.train_bytes > 0:
            self.steps = math.ceil(self.train_bytes / (self.batch_size * self.seq_len))
        if self.steps < 1:
            raise ValueError(f"train.steps {self.steps} must be >= 1 (or set train.train_bytes)")
        if self.micro_batch_size and self.batch_size % self.micro_batch_size:
            raise ValueError(f"train.micro_batch_size {self.micro_batch_size} does not divide train.batch_size {self.batch_size}")

    @property
    def bytes_per_step(self) -> int:
        return self.batch_size * self.seq_len


@dataclass
class OptimConfig:
    """AdamW and its learning-rate schedule (linear warm-up, cosine decay)."""
    lr: float = ranged(3e-3, gt=0)                                # peak learning rate (after warm-up)
    min_lr_ratio: float = ranged(0.1, ge=0, le=1)                 # final learning rate of the cosine decay, as a fraction of lr
    warmup_steps: int = ranged(500, ge=0)                         # linear warm-up steps from 0 to lr (0: from warmup_bytes)
    warmup_bytes: float = ranged(0.0, ge=0, le=INT64[1])          # warm-up in bytes when warmup_steps = 0, e.g. 6.2e7
    warmup_start: float = ranged(0.0, ge=0, le=1)                 # the warm-up rises linearly from warmup_start x lr (the authors' code: 0.1)
    weight_decay: float = ranged(0.1, ge=0)                       # AdamW decoupled weight decay
    decay_all: bool = False                                       # decay every parameter (the authors' code: PyTorch's AdamW on all) instead of matrices only (not norms, biases, embeddings)
    betas: tuple[float, float] = ranged((0.9, 0.95), ge=0, lt=1)  # AdamW (beta1, beta2)
    eps: float = ranged(1e-8, gt=0)                               # AdamW epsilon
    grad_clip: float = ranged(1.0, ge=0)                          # max global gradient norm (0 = no clipping)
    policy_lr_mult: float = ranged(1.0, ge=0)                     # learning-rate multiplier of the learned policy's parameters (strategies with a score-function policy only)


@dataclass
class LogConfig:
    """What the run records and how often (each record is one host sync)."""
    log_every: int = ranged(10, ge=1)          # steps between metrics.jsonl lines (and host syncs)
    eval_every: int = ranged(500, ge=0)        # steps between validations (0 = only at the end)
    eval_bytes: int = ranged(1_000_000, ge=1)  # cap on validation bytes per periodic evaluation
    segment_every: int = ranged(500, ge=0)     # steps between sample segmentations in segments.txt (0 = never)


@dataclass
class CheckpointConfig:
    every: int = ranged(1000, ge=0)  # steps between checkpoints (0 = only at the end)
    keep: int = ranged(3, ge=1)      # how many of the latest checkpoints to keep on disk


@dataclass
class SystemConfig:
    """Where and how the run executes; none of it changes the result on CPU."""
    device: str = "auto"               # auto | cpu | cuda | cuda:N
    dtype: str = "auto"                # autocast dtype: auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16
    compile: bool = False              # wrap the model in torch.compile (automatic dynamic shapes for the token count)
    fsdp: bool = False                 # under torchrun: shard parameters, gradients and optimizer state (FSDP2) instead of DDP
    threads: int = ranged(0, THREADS)  # CPU threads for torch (0: torch's default, all cores); 1 when runs share a machine

    def __post_init__(self) -> None:
        if self.dtype not in ("auto", "fp32", "bf16"):
            raise ValueError(f"system.dtype {self.dtype!r} is not one of auto, fp32, bf16")


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
    check_values(cls, given, STRATEGY)
    try:
        return dataclasses.asdict(cls(**given))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{STRATEGY}: {e}") from None


def build(d: dict[str, dict[str, Any]]) -> RunConfig:
    """Instantiate each section, every value checked against its declared range first (so that
    no invariant divides by zero) and the derived ones (steps from a byte budget) after;
    invariant failures (__post_init__) become ConfigError."""
    parts = {}
    for name, cls in SECTIONS.items():
        values = d[name]
        check_values(cls, values, name)
        if name == "model":
            values = {**values, STRATEGY: strategy_options(values["boundary"], d.get(STRATEGY, {}))}
        try:
            parts[name] = cls(**values)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{name}: {e}") from None
    cfg = RunConfig(**parts)
    if cfg.optim.warmup_steps == 0 and cfg.optim.warmup_bytes > 0:
        cfg.optim.warmup_steps = math.ceil(cfg.optim.warmup_bytes / cfg.train.bytes_per_step)
    for name, cls in SECTIONS.items():
        check_values(cls, dataclasses.asdict(getattr(cfg, name)), name)
    return cfg


def check_values(cls: type, values: dict[str, Any], section: str) -> None:
    """Every value of a config section against its field's declared range (learntok.ranges;
    a field that declares none still needs a finite float or an int64), every string against
    UTF-8 (configs are saved as text). The first bad value raises ConfigError naming the key."""
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        value, name = values[f.name], f"{section}.{f.name}"
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                problem = (field_range(f) or Range()).problem(v)
                if problem:
                    raise ConfigError(f"{name} {shown(value)} {problem}")
            elif isinstance(v, str) and not is_utf8(v):
                raise ConfigError(f"{name} {v!r} is not UTF-8 text (a config is saved as text; give a name "
                                  f"in UTF-8, e.g. rename the file or link it under such a name)")


def shown(value: Any) -> str:
    """A value for a message: an int of more than 24 digits by its first digits and length."""
    text = repr(value)
    return f"{text[:12]}... ({len(text)} digits)" if isinstance(value, int) and len(text) > 24 else text


def is_utf8(text: str) -> bool:
    """Whether `text` encodes to UTF-8: not so for an argument's bytes that were not UTF-8
    (Python keeps them as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
            try:
                return float(value)
            except OverflowError:
                raise ConfigError(f"{name}: an integer of {len(str(value))} digits is too large for a number") from None
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
    model = update.get("model")
    if isinstance(model, dict) and "boundary" in model and model["boundary"] != out["model"]["boundary"]:
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
    return parse_toml(path.read_text(encoding="utf-8"))


def read_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
        return parse_json(text) if path.suffix == ".json" else parse_toml(text)
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {e.start}: {e.reason})") from None
    except FormatError as e:
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
    path.write_text(to_json(cfg) if path.suffix == ".json" else to_toml(cfg), encoding="utf-8")


def from_model_dict(d: dict[str, Any]) -> ModelConfig:
    """A strict ModelConfig from a dict (checkpoint config.json)."""
    if not isinstance(d, dict):
        raise ConfigError(f"a model config must be a table, got {type(d).__name__}")
    return build(merge(defaults(), {"model": d}, "model config")).model
