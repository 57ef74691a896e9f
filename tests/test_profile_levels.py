"""benchmarks/profile_levels.py times every level of a step for every kind of strategy: one with a
trained policy (learned), one without (uniform) and one with prescribed boundaries (whitespace)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
_spec = importlib.util.spec_from_file_location("profile_levels", BENCH / "profile_levels.py")
profile_levels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(profile_levels)


@pytest.mark.parametrize("strategy", ["learned", "uniform", "whitespace"])
def test_profile_times_every_level_for_each_kind_of_strategy(strategy):
    r = profile_levels.profile("tiny", 2, 64, 1, strategy, 0.2, None)
    table = profile_levels.table(r)
    for level in ("byte encoder", "policy", "mid transformer", "byte decoder", "optimizer"):
        assert level in table
    assert r["step_ms"] > 0
