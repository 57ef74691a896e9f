"""benchmarks/bpe_lookahead.py: the lookahead measurement against rules with a known lookahead."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from learntok.boundaries.common import whitespace_boundaries
from learntok.data import encode

_spec = importlib.util.spec_from_file_location(
    "bpe_lookahead", Path(__file__).resolve().parents[1] / "benchmarks" / "bpe_lookahead.py"
)
lookahead = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lookahead)

WINDOWS = torch.stack(
    [
        encode(b"the cat sat on the mat and the dog " * 2)[:48],
        encode(b"to be or not to be, that is it, to be  or not to")[:48],
    ]
)  # (2, 48), BOS first


def before_space(x: torch.Tensor) -> torch.Tensor:
    """A rule that reads one byte ahead: a[t] = 1 iff byte t+1 is a space (and a[0] = 1)."""
    a = torch.zeros(x.shape)
    a[:, :-1] = (x[:, 1:] == ord(" ")).float()
    a[:, 0] = 1
    return a


def test_a_causal_rule_never_needs_the_future():
    stats = lookahead.lookahead_stats(whitespace_boundaries, WINDOWS)
    assert stats["needs_future"] == stats["final_at_t"] == stats["lookahead_max"] == 0


def test_one_byte_of_lookahead_is_measured_as_one():
    stats = lookahead.lookahead_stats(before_space, WINDOWS)
    scored = WINDOWS[:, 1:-1]  # decisions at t = 1 .. T-2 (a future to hide)
    spaces_next = (WINDOWS[:, 2:] == ord(" ")).float().mean().item()
    assert stats["decisions"] == scored.numel() and stats["lookahead_max"] == 1
    assert abs(stats["needs_future"] - spaces_next) < 1e-6  # exactly the bytes followed by a space
    assert abs(stats["final_at_t"] - spaces_next) < 1e-6  # each is wrong when cut right after it


def test_prefix_decisions_read_no_later_byte():
    """A causal rule's decisions are its prefix decisions; a rule that reads byte t+1 sees PAD there."""
    torch.testing.assert_close(
        lookahead.prefix_decisions(whitespace_boundaries, WINDOWS), whitespace_boundaries(WINDOWS)
    )
    a = lookahead.prefix_decisions(before_space, WINDOWS)
    assert a[:, 0].eq(1).all() and a[:, 1:].eq(0).all()
