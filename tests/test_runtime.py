"""runtime.set_threads: the thread count a `--threads` option sets."""
from __future__ import annotations

import pytest
import torch

from learntok.config import ConfigError
from learntok.runtime import set_threads


def test_set_threads_sets_and_none_keeps():
    before = torch.get_num_threads()
    try:
        assert set_threads(1) == 1 == torch.get_num_threads()
        assert set_threads(None) == 1                            # None: leave as is
        assert set_threads(2) == 2 == torch.get_num_threads()
        assert torch.get_num_interop_threads() >= 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_set_threads_refuses_bad_counts(bad):
    before = torch.get_num_threads()
    with pytest.raises(ConfigError, match="threads"):
        set_threads(bad)
    assert torch.get_num_threads() == before
