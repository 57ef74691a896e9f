"""The [strategy] section: the chosen strategy's own options, checked against its config class,
and the keys that moved into it from [model] (so that old config files and commands still load).

A strategy registers its config class (`@register("name", config=MyConfig)`); `option_types` is
the one lookup of a strategy's options, for the run config, overrides, model folders and compare.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from learntok.boundaries.base import strategy_class, strategy_names
from learntok.util.errors import ConfigError
from learntok.util.typed_fields import check_fields, field_types

STRATEGY = "strategy"  # the section of the chosen strategy's own options (model.boundary's config class)

# Old key -> new key. The learned policy's options were model.* keys before it had its own
# section; they are read as its [strategy] options (and ignored, as they were, by strategies
# that lack them). Old run folders, model folders, checkpoints and commands load unchanged.
MOVED_KEYS: dict[str, str] = {
    "model.policy_window": f"{STRATEGY}.window",
    "model.logit_scale": f"{STRATEGY}.logit_scale",
    "model.softcap": f"{STRATEGY}.softcap",
}


def option_types(boundary: str) -> dict[str, Any]:
    """{option: type} of strategy `boundary`'s [strategy] section; an unknown strategy is an error."""
    if boundary not in strategy_names():
        raise ConfigError(
            f"model.boundary {boundary!r} is not a boundary strategy; known: {', '.join(strategy_names())}"
        )
    return field_types(strategy_class(boundary).Config)


def strategy_options(
    boundary: str, values: dict[str, Any], source: str = STRATEGY, conditioned: bool = False
) -> dict[str, Any]:
    """The [strategy] section checked against model.boundary's config class: every option, with
    defaults for those not given. An unknown strategy, a key of another strategy, or
    model.rate_conditioned (`conditioned`) for a strategy that cannot be, is an error."""
    hints = option_types(boundary)
    if conditioned and not strategy_class(boundary).conditionable:
        able = ", ".join(n for n in strategy_names() if strategy_class(n).conditionable)
        raise ConfigError(f"model.rate_conditioned: strategy {boundary!r} cannot be rate-conditioned (only {able})")
    for key in values:
        if key not in hints:
            known = ", ".join(hints) or "none"
            raise ConfigError(
                f"{source}: {STRATEGY}.{key} is not an option of strategy {boundary!r} (its options: {known})"
            )
    given = check_fields(strategy_class(boundary).Config, values, STRATEGY, source)
    try:
        return dataclasses.asdict(strategy_class(boundary).Config(**given))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{STRATEGY}: {e}") from None


def kept_options(values: dict[str, Any], boundary: str) -> dict[str, Any]:
    """The options in `values` that strategy `boundary` also has (none if it is unknown): what a
    change of strategy keeps (`learned` -> `frozen` keeps the policy's options)."""
    known = option_types(boundary) if boundary in strategy_names() else {}
    return {k: v for k, v in values.items() if k in known}


def upgraded(table: Any, boundary: str) -> Any:
    """A config table as it is read (a preset, a config file, a checkpoint's or a model folder's
    config.json) in today's layout, once, where it is read: the strategy's options that a model
    config nests in [model] moved to [strategy], and the keys that moved (MOVED_KEYS) at their new
    place where the strategy (the table's own model.boundary, else `boundary`) has them, dropped
    where it does not (they never acted there). Anything but a table of tables is returned as it
    is, for the reader's own check to name."""
    if not isinstance(table, dict) or not isinstance(table.get("model"), dict):
        return table
    model = dict(table["model"])
    nested = model.pop(STRATEGY) if isinstance(model.get(STRATEGY), dict) else None
    options = table.get(STRATEGY, {}) if nested is None else nested
    if not isinstance(options, dict):
        return table
    moved = {}
    for old, new in MOVED_KEYS.items():
        name = old.partition(".")[2]
        if name in model:
            moved[new.partition(".")[2]] = model.pop(name)
    strategy = model.get("boundary", boundary)
    strategy = strategy if isinstance(strategy, str) else boundary
    return {
        **table,
        "model": model,
        STRATEGY: {**kept_options(moved, strategy), **options},
    }  # a new key beside its old one wins


def upgraded_key(key: str, boundary: str) -> str | None:
    """An override's `section.name` at its place today (MOVED_KEYS), or None for an old key that
    strategy `boundary` never read (ignored, as it was)."""
    new = MOVED_KEYS.get(key, key)
    name = new.partition(".")[2]
    if new != key and boundary in strategy_names() and name not in option_types(boundary):
        return None
    return new
