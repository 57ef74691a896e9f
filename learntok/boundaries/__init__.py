"""Boundary strategies behind one interface. Importing this package imports every module in it,
and each registers its strategies (`@register`): a new strategy is one new file here."""

import importlib
import pkgutil

from learntok.boundaries.base import (
    BoundaryOutput,
    BoundaryStrategy,
    StrategyConfig,
    build_strategy,
    register,
    strategy_class,
    strategy_names,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "BoundaryOutput",
    "BoundaryStrategy",
    "StrategyConfig",
    "build_strategy",
    "register",
    "strategy_class",
    "strategy_names",
]
