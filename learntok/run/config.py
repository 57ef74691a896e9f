"""Run configuration: component configs composed into one RunConfig (docs/design.md §7).

Layered and strict: dataclass defaults <- a preset TOML (packaged under learntok/configs, or
any file) <- `section.key=value` overrides. Unknown sections or keys, values of the wrong type
and values outside the range their field declares (learntok.util.ranges; NaN, infinities and ints
beyond int64 never pass) fail at start-up with the offending name and value. The resolved config is dumped to
TOML (run folder) or JSON (checkpoints).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from learntok.boundaries.base import strategy_class
from learntok.boundaries.options import STRATEGY, kept_options, option_types, strategy_options, upgraded, upgraded_key
from learntok.data.dataset import DataConfig
from learntok.util.errors import ConfigError, FormatError
from learntok.util.typed_fields import check_fields, check_values, field_types, parse_value
from learntok.util.files import read_input, write_text_atomic
from learntok.model.config import ModelConfig
from learntok.model.objective import ObjectiveConfig, objective_for
from learntok.model.sizes import check_model_sizes
from learntok.util.ranges import INT64, SEED, THREADS, ranged
from learntok.util.json_toml import expect, parse_json, parse_toml


@dataclass
class TrainConfig:
    """What is trained on: the budget, the batch and the seed."""

    steps: int = ranged(10000, ge=0)  # optimizer steps in the run (0: from train_bytes)
    # budget in bytes (batch_size x seq_len per step) when steps = 0, e.g. 8.3e8
    train_bytes: float = ranged(0.0, ge=0, le=INT64[1])
    batch_size: int = ranged(32, ge=1)  # sequences per step (global: summed over ranks and micro-batches)
    # sequences per forward/backward; batch_size / world / this = accumulation steps (0 = no accumulation)
    micro_batch_size: int = ranged(0, ge=0)
    seq_len: int = ranged(4096, ge=2)  # T: bytes per sequence, BOS and at least one byte
    seed: int = ranged(0, SEED)  # seed of the init, the batch order and the boundary samples
    # recompute each block's activations in the backward instead of keeping them: less memory,
    # about a third more compute, the same loss and gradients (AUNet.set_gradient_checkpointing)
    grad_checkpoint: bool = False

    def __post_init__(self) -> None:
        if self.steps == 0 and self.train_bytes > 0:
            self.steps = math.ceil(self.train_bytes / (self.batch_size * self.seq_len))
        if self.steps < 1:
            raise ValueError(f"train.steps {self.steps} must be >= 1 (or set train.train_bytes)")
        if self.micro_batch_size and self.batch_size % self.micro_batch_size:
            raise ValueError(
                f"train.micro_batch_size {self.micro_batch_size} does not divide train.batch_size {self.batch_size}"
            )

    @property
    def bytes_per_step(self) -> int:
        return self.batch_size * self.seq_len


@dataclass
class OptimConfig:
    """AdamW and its learning-rate schedule (linear warm-up, cosine decay)."""

    # peak learning rate (after warm-up); with policy_lr_mult at most 1e8, which a float32 step holds
    lr: float = ranged(3e-3, gt=0, le=1e4)
    min_lr_ratio: float = ranged(0.1, ge=0, le=1)  # final learning rate of the cosine decay, as a fraction of lr
    warmup_steps: int = ranged(500, ge=0)  # linear warm-up steps from 0 to lr (0: from warmup_bytes)
    warmup_bytes: float = ranged(0.0, ge=0, le=INT64[1])  # warm-up in bytes when warmup_steps = 0, e.g. 6.2e7
    # the warm-up rises linearly from warmup_start x lr (the authors' code: 0.1)
    warmup_start: float = ranged(0.0, ge=0, le=1)
    weight_decay: float = ranged(0.1, ge=0)  # AdamW decoupled weight decay
    # decay every parameter (the authors' code: PyTorch's AdamW on all) instead of matrices only
    # (not norms, biases, embeddings)
    decay_all: bool = False
    betas: tuple[float, float] = ranged((0.9, 0.95), ge=0, lt=1)  # AdamW (beta1, beta2)
    eps: float = ranged(1e-8, gt=0)  # AdamW epsilon
    grad_clip: float = ranged(1.0, ge=0)  # max global gradient norm (0 = no clipping)
    # learning-rate multiplier of the learned policy's parameters (strategies with a score-function policy only)
    policy_lr_mult: float = ranged(1.0, ge=0, le=1e4)
    # decay of an exponential moving average of the weights (and the rate controller's state),
    # updated after every step and saved beside each checkpoint as a model folder
    # (checkpoints/step_N/ema) for evaluation; 0: none
    ema: float = ranged(0.0, ge=0, lt=1)


@dataclass
class LogConfig:
    """What the run records and how often (each record is one host sync)."""

    log_every: int = ranged(10, ge=1)  # steps between metrics.jsonl lines (and host syncs)
    eval_every: int = ranged(500, ge=0)  # steps between validations (0 = only at the end)
    eval_bytes: int = ranged(1_000_000, ge=1)  # cap on validation bytes per periodic evaluation
    segment_every: int = ranged(500, ge=0)  # steps between sample segmentations in segments.txt (0 = never)
    tensorboard: bool = False  # also write TensorBoard event files into the run folder (package `tensorboard`)
    wandb: str | None = None  # also log to this Weights & Biases project (extra `wandb`; offline works)


@dataclass
class CheckpointConfig:
    every: int = ranged(1000, ge=0)  # steps between checkpoints (0 = only at the end)
    keep: int = ranged(3, ge=1)  # how many of the latest checkpoints to keep on disk


@dataclass
class SystemConfig:
    """Where and how the run executes; none of it changes the result on CPU."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "auto"  # autocast dtype: auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16 (CUDA, or a CPU with AMX or AVX-512 BF16)
    compile: bool = False  # wrap the model in torch.compile (automatic dynamic shapes for the token count)
    fsdp: bool = False  # under torchrun: shard parameters, gradients and optimizer state (FSDP2) instead of DDP
    threads: int = ranged(0, THREADS)  # CPU threads for torch (0: its default, all cores); 1 when runs share a machine

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
        base = defaults()
        return build(merge(base, upgraded(d, base["model"]["boundary"]), "config"))  # a file's dict, read


SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "objective": ObjectiveConfig,
    "data": DataConfig,
    "train": TrainConfig,
    "optim": OptimConfig,
    "log": LogConfig,
    "checkpoint": CheckpointConfig,
    "system": SystemConfig,
}


def defaults() -> dict[str, dict[str, Any]]:
    return RunConfig().to_dict()


def build(d: dict[str, dict[str, Any]]) -> RunConfig:
    """Instantiate each section, every value checked against its declared range first (so that
    no invariant divides by zero) and the derived ones (steps from a byte budget) after;
    invariant failures (__post_init__) become ConfigError."""
    parts = {}
    for name, cls in SECTIONS.items():
        values = d[name]
        check_values(cls, values, name)
        if name == "model":
            values = {
                **values,
                STRATEGY: strategy_options(
                    values["boundary"], d.get(STRATEGY, {}), conditioned=bool(values.get("rate_conditioned"))
                ),
            }
        try:
            parts[name] = cls(**values)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{name}: {e}") from None
    cfg = RunConfig(**parts)
    if cfg.optim.warmup_steps == 0 and cfg.optim.warmup_bytes > 0:
        cfg.optim.warmup_steps = math.ceil(cfg.optim.warmup_bytes / cfg.train.bytes_per_step)
    for name, cls in SECTIONS.items():
        check_values(cls, dataclasses.asdict(getattr(cfg, name)), name)
    check_meaning(cfg)
    return cfg


MAX_ROWS = 2**24  # train.batch_size: the plan tries each divisor of the per-GPU batch


def config_warnings(cfg: RunConfig) -> list[str]:
    """Settings that are valid but most likely not meant, a line each (train prints them at its
    start): a warm-up longer than the run keeps the learning rate below optim.lr all along."""
    o, steps = cfg.optim, cfg.train.steps
    out = []
    if o.warmup_steps > steps:
        out.append(
            f"optim.warmup_steps {o.warmup_steps} is more than train.steps {steps}: the learning rate "
            f"never reaches optim.lr {o.lr:g} (give fewer warm-up steps, or more steps)"
        )
    return out


def check_meaning(cfg: RunConfig) -> None:
    """The values of a config that each pass their own range but not together: the one place
    of such invariants across sections (within a section: its __post_init__), run at every
    config's build, before any work. Each is one ConfigError naming the keys and values."""
    check_sizes(cfg)
    check_early_head(cfg)
    m, tc = cfg.model, cfg.train
    rows = tc.micro_batch_size or tc.batch_size
    if m.rate_conditioned and rows % m.rows_per_rate:
        raise ConfigError(
            f"model.rows_per_rate {m.rows_per_rate} does not divide the {rows} rows of a micro-batch "
            f"(train.micro_batch_size or train.batch_size): the last group of rows would share a target "
            f"with fewer rows than the batch baseline compares"
        )
    if cfg.optim.ema and cfg.system.fsdp:
        raise ConfigError(
            f"optim.ema {cfg.optim.ema:g} with system.fsdp: the weights' average is kept unsharded, "
            f"beside a plain or DDP model only; set optim.ema=0 or system.fsdp=false"
        )


def check_sizes(cfg: RunConfig) -> None:
    """Refuse sizes no run can build: the model's (learntok.model.sizes, the bounds of `config
    --plan`, checked for every command and every saved folder read), more than MAX_ROWS rows a step,
    and a policy window longer than the training window (the past it reads is zeros beyond a row's
    start, so a longer one adds weights and activations and nothing else)."""
    check_model_sizes(cfg.model)
    if cfg.train.batch_size > MAX_ROWS:
        raise ConfigError(
            f"train.batch_size {cfg.train.batch_size}, more than {MAX_ROWS} rows: give smaller sizes "
            f"(learntok config --plan shows what a config needs)"
        )
    if cfg.model.token_pad_multiple > cfg.train.seq_len:
        raise ConfigError(
            f"model.token_pad_multiple {cfg.model.token_pad_multiple} is more than train.seq_len {cfg.train.seq_len}: "
            f"a window has at most that many tokens, so the padding would be all waste; give at most train.seq_len"
        )
    window = cfg.model.strategy.get("window")
    if type(window) is int and window > cfg.train.seq_len:
        raise ConfigError(
            f"{STRATEGY}.window {window} is longer than train.seq_len {cfg.train.seq_len}: the policy would read "
            f"past decisions that no row has; give a window <= train.seq_len"
        )


WEIGHT_BYTES = 16  # a trained fp32 weight: itself, its gradient and AdamW's two moments


def check_memory(cfg: RunConfig, device_type: str) -> None:
    """The weights with their gradients and AdamW state (WEIGHT_BYTES each) must fit the memory
    this process can get, on the CPU, checked before the model is built."""
    check_model_sizes(cfg.model, WEIGHT_BYTES, device_type)


def check_early_head(cfg: RunConfig) -> None:
    """A strategy that cuts on the early-exit head's output (`reads_early_head`: entropy) needs
    that head trained; an objective that trains it at weight 0 for this strategy (the paper
    presets' early_for = "policy" for a strategy without a policy, or lambda_early = 0) is refused."""
    cls = strategy_class(cfg.model.boundary)
    if cls.reads_early_head and objective_for(cfg.objective, cls.has_policy).lambda_early == 0:
        raise ConfigError(
            f"model.boundary {cfg.model.boundary!r} cuts where the early-exit head is unsure, and this objective "
            f"leaves that head untrained (objective.early_for {cfg.objective.early_for!r}, lambda_early "
            f"{cfg.objective.lambda_early:g}): give objective.early_for=all with lambda_early > 0, or another strategy"
        )


# ---------------------------------------------------------------- layering


def merge(base: dict[str, dict[str, Any]], update: dict[str, Any], source: str) -> dict[str, dict[str, Any]]:
    """base with update's values checked against the dataclass field types; strict on names.
    `update` is in today's layout: each reader upgrades a table once, where it reads it
    (learntok.boundaries.options.upgraded)."""
    out = {k: dict(v) for k, v in base.items()}
    expect(update, "an object", f"{source}: the table of sections", ConfigError)
    boundary = out["model"]["boundary"]
    if isinstance(update.get("model"), dict):
        boundary = update["model"].get("boundary", boundary)
    if boundary != out["model"]["boundary"]:
        out[STRATEGY] = kept_options(out[STRATEGY], boundary)  # another strategy: the options it lacks go
    for section, values in update.items():
        if section not in SECTIONS and section != STRATEGY:
            raise ConfigError(f"{source}: unknown section [{section}]; known: {', '.join([*SECTIONS, STRATEGY])}")
        expect(values, "an object", f"{source}: [{section}]", ConfigError)
        if section == STRATEGY:  # checked against the strategy in build()
            out[STRATEGY].update(values)
        else:
            out[section].update(check_fields(SECTIONS[section], values, section, source))
    return out


def parse_overrides(base: dict[str, dict[str, Any]], overrides: list[str]) -> dict[str, dict[str, Any]]:
    """`section.key=value` strings as sections, each value parsed by its field's type (a strategy
    option by the config class of the strategy chosen after every override: `model.boundary` first).
    A key that moved is read at its new place, and ignored by a strategy without it (as before)."""
    update: dict[str, dict[str, Any]] = {}
    boundary_first = sorted(overrides, key=lambda item: not item.strip().startswith("model.boundary="))
    for item in boundary_first:
        key, eq, text = item.partition("=")
        key = key.strip()
        boundary = update.get("model", {}).get("boundary", base["model"]["boundary"])
        new = upgraded_key(key, boundary)
        if new is None:  # an old key this strategy never read
            continue
        section, dot, name = new.partition(".")
        if not eq or not dot:
            raise ConfigError(f"override {item!r} is not of the form section.key=value")
        if section == STRATEGY:
            hints = option_types(boundary)
            if name not in hints:
                raise ConfigError(
                    f"override {item!r}: {name!r} is not an option of strategy {boundary!r} "
                    f"(its options: {', '.join(hints) or 'none'})"
                )
            update.setdefault(section, {})[name] = parse_value(text.strip(), hints[name], key)
            continue
        if section not in SECTIONS:
            raise ConfigError(
                f"override {item!r}: unknown section {section!r}; known: {', '.join([*SECTIONS, STRATEGY])}"
            )
        hints = field_types(SECTIONS[section])
        if name not in hints:
            raise ConfigError(f"override {item!r}: unknown key {section}.{name}")
        update.setdefault(section, {})[name] = parse_value(text.strip(), hints[name], key)
    return update


def preset_names() -> list[str]:
    folder = resources.files("learntok").joinpath("configs")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def read_preset(name: str) -> dict[str, Any]:
    path = resources.files("learntok").joinpath("configs", f"{name}.toml")
    if not path.is_file():
        raise ConfigError(f"unknown preset {name!r}; known: {', '.join(preset_names())}")
    return parse_toml(path.read_text(encoding="utf-8"))


CONFIG_BYTES = 16 << 20  # a config file larger than this is not a config (read bound)


def read_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    data = read_input(path, "config file", CONFIG_BYTES, ConfigError)  # a regular file, bounded
    try:
        text = data.decode("utf-8")
        table = parse_json(text) if path.name.removesuffix(".gz").endswith(".json") else parse_toml(text)
        return expect(table, "an object", f"config file {path}", ConfigError)  # JSON may hold a list
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {e.start}: {e.reason})") from None
    except FormatError as e:
        raise ConfigError(f"config file {path}: {e}") from None


Layer = tuple[str, dict[str, dict[str, Any]], dict[str, dict[str, Any]]]  # (source, what it gives, the config after it)


def layers(
    preset: str | None = None, file: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> list[Layer]:
    """defaults <- preset <- file <- overrides, checked at each layer: for each layer, its source
    (default, preset, file, override), the sections and keys it gives, and the sections after it."""
    d = defaults()
    out: list[Layer] = [("default", d, d)]
    for source, name, read in (("preset", preset, read_preset), ("file", file, read_file)):
        if name is not None:
            given = upgraded(read(name), d["model"]["boundary"])  # old keys upgraded once, where read
            d = merge(d, given, f"preset {name}" if source == "preset" else str(name))
            out.append((source, given, d))
    given = parse_overrides(d, list(overrides))
    return out + [("override", given, merge(d, given, "override"))]


def load_config(
    preset: str | None = None, file: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> RunConfig:
    """defaults <- preset <- file <- overrides, checked at each layer."""
    return build(layers(preset, file, overrides)[-1][2])


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


def to_toml(cfg: RunConfig, comments: dict[str, str] | None = None) -> str:
    """Flat sections of scalars; None values are left out (TOML has no null: the default stands).
    `comments`: a trailing comment for some keys ("section.key"), aligned within each section."""
    lines, comments = [], comments or {}
    for section, values in cfg.to_dict().items():
        pairs = [
            (f"{k} = {_toml_value(v)}", comments.get(f"{section}.{k}")) for k, v in values.items() if v is not None
        ]
        width = max((len(p) for p, _ in pairs), default=0)
        lines += [f"[{section}]", *(f"{p:<{width}}  # {c}" if c else p for p, c in pairs), ""]
    return "\n".join(lines)


def to_json(cfg: RunConfig) -> str:
    return json.dumps(cfg.to_dict(), indent=2)


def save_config(cfg: RunConfig, path: str | Path) -> None:
    path = Path(path)
    write_text_atomic(path, to_json(cfg) if path.suffix == ".json" else to_toml(cfg))
