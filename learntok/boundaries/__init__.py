"""Boundary strategies behind one interface; importing this package registers them."""
from learntok.boundaries import bpe, bpe_paper, dynamic_pooling, fixed, learned, ste  # noqa: F401
from learntok.boundaries.base import (BoundaryOutput, BoundaryStrategy, StrategyConfig, build_strategy, register,
                                     strategy_class, strategy_names)

__all__ = ["BoundaryOutput", "BoundaryStrategy", "StrategyConfig", "build_strategy", "register", "strategy_class",
           "strategy_names"]
