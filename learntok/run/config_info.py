"""Inspecting the run config without running anything (`learntok config`): where each key of the
resolved config comes from, and every key with its type, default and help.

A key's help is the one-line comment after its dataclass field, or on the line above it (every
field of a component config has one), read from the class's source; the layering is learntok.run.config's own.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
import typing
from functools import cache
from pathlib import Path
from typing import Any

from learntok.boundaries import strategy_class, strategy_names
from learntok.model.objective import ObjectiveConfig
from learntok.run.config import SECTIONS, STRATEGY, OptimConfig, RunConfig, build, layers, load_config


def resolve(
    preset: str | None = None, file: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> tuple[RunConfig, dict[str, str]]:
    """load_config's config, and where each key's value comes from: "section.key" -> default,
    preset, file or override (the last layer that gives it), or "derived (...)" where the
    config's own rules computed the value from the one given (train.steps from train.train_bytes)."""
    steps = layers(preset, file, overrides)
    given: dict[str, str] = {}
    before = steps[0][2]
    for source, update, after in steps:
        if after["model"]["boundary"] != before["model"]["boundary"]:  # another strategy: its options start afresh
            given = {k: v for k, v in given.items() if not k.startswith(f"{STRATEGY}.")}
        given.update({f"{section}.{key}": source for section, values in update.items() for key in values})
        before = after
    cfg = build(before)
    sources = {}
    for section, values in cfg.to_dict().items():
        for key, value in values.items():
            name, stated = f"{section}.{key}", before.get(section, {}).get(key, value)
            source = given.get(name, "default")
            sources[name] = source if stated == value else f"derived ({source}: {stated!r})"
    return cfg, sources


@cache
def field_help(cls: type) -> dict[str, str]:
    """The comment of each field of a dataclass, read from its source ("" where none): the one
    after the field, else the comment on the line just above it (a field whose line would be too
    long carries its comment there)."""
    source = textwrap.dedent(inspect.getsource(cls))
    tokens = [tok for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT]
    trailing = {tok.start[0]: tok.string.lstrip("#").strip() for tok in tokens if tok.line.strip() != tok.string}
    above = {tok.start[0]: tok.string.lstrip("#").strip() for tok in tokens if tok.line.strip() == tok.string}
    body = ast.parse(source).body[0].body
    return {
        node.target.id: trailing.get(node.end_lineno) or above.get(node.lineno - 1, "")
        for node in body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }


def type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) and not typing.get_args(tp) else str(tp).replace("typing.", "")


@dataclasses.dataclass
class Key:
    name: str  # section.key
    type: str  # the field's type, as written
    default: Any  # the dataclass default
    help: str  # the field's comment: meaning and unit
    strategy: str = ""  # for [strategy] keys: the strategy (model.boundary) whose option it is


def _keys_of(cls: type, section: str, strategy: str = "") -> list[Key]:
    hints, helps, defaults = typing.get_type_hints(cls), field_help(cls), cls()
    return [
        Key(f"{section}.{f.name}", type_name(hints[f.name]), getattr(defaults, f.name), helps.get(f.name, ""), strategy)
        for f in dataclasses.fields(cls)
        if not (section == "model" and f.name == STRATEGY)
    ]


def all_keys() -> list[Key]:
    """Every key of every section; [strategy] lists each strategy's own options."""
    keys = [k for section, cls in SECTIONS.items() for k in _keys_of(cls, section)]
    return keys + [k for name in strategy_names() for k in _keys_of(strategy_class(name).Config, STRATEGY, name)]


def format_keys(keys: list[Key]) -> str:
    """One key a line: name, type, default, help (a strategy's option says whose)."""
    rows = [
        (k.name, k.type, repr(k.default), f"(model.boundary={k.strategy}) " * bool(k.strategy) + k.help) for k in keys
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c:<{widths[2]}}  {d}" for a, b, c, d in rows)


# The settings a score-function policy trains under. The paper's are the defaults (the paper
# presets keep them); the `tiny` recipe changes some of them so the policy learns on a CPU budget.
POLICY_SETTINGS = {
    "objective.gamma": lambda c: c.objective.gamma,
    "objective.lambda_pi": lambda c: c.objective.lambda_pi,
    "objective.lambda_rate": lambda c: c.objective.lambda_rate,
    "objective.lambda_early": lambda c: c.objective.lambda_early,
    "objective.batch_baseline": lambda c: c.objective.batch_baseline,
    "objective.early_baseline": lambda c: c.objective.early_baseline,
    "objective.rate_gain": lambda c: c.objective.rate_gain,
    "objective.rate_settle_gain": lambda c: c.objective.rate_settle_gain,
    "optim.policy_lr_mult": lambda c: c.optim.policy_lr_mult,
}
PAPER_SETTINGS = RunConfig(objective=ObjectiveConfig(), optim=OptimConfig())


def departures(cfg: RunConfig, base: RunConfig = PAPER_SETTINGS) -> dict[str, object]:
    """The policy settings in which `cfg` departs from `base` (the paper's): {key: cfg's value}."""
    return {k: of(cfg) for k, of in POLICY_SETTINGS.items() if of(cfg) != of(base)}


@cache
def tiny_recipe() -> RunConfig:
    return load_config("tiny")


def settings_label(cfg: RunConfig) -> str | None:
    """Which settings a learned arm ran: 'paper objective', 'tiny recipe', either one with what
    this run changed on top ('tiny recipe, objective.gamma 1.0'); None for a strategy without a
    policy (the settings are the policy's)."""
    if not strategy_class(cfg.model.boundary).has_policy:
        return None
    own = {"paper objective": departures(cfg), "tiny recipe": departures(cfg, tiny_recipe())}
    name = min(own, key=lambda n: len(own[n]))  # the nearer of the two; the paper's on a tie
    return ", ".join([name, *(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in own[name].items())])
