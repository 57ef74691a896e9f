"""Controlled comparisons start from one backbone: at a given seed, every parameter outside the
strategy's own module is bit-identical for every registered strategy (one added later included),
and the strategy's own parameters do not depend on which backbone tensors exist."""

import pytest
import torch

from learntok.boundaries import strategy_names
from learntok.model.aunet import AUNet
from learntok.model.config import ModelConfig


def backbone(boundary: str, seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    model = AUNet(ModelConfig(boundary=boundary, d_model=32, n_heads=2))
    return {k: v for k, v in model.state_dict().items() if not k.startswith("strategy.")}


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("boundary", strategy_names())
def test_backbone_identical_for_every_strategy(boundary, seed):
    ref, mine = backbone("uniform", seed), backbone(boundary, seed)
    assert ref.keys() == mine.keys()
    for k in ref:
        assert torch.equal(ref[k], mine[k]), f"{boundary}: {k} differs from uniform's at seed {seed}"


def test_seed_changes_the_backbone():
    a, b = backbone("learned", 0), backbone("learned", 1)
    assert not torch.equal(a["embed.weight"], b["embed.weight"])


def test_frozen_policy_starts_as_the_learned_policy():
    torch.manual_seed(3)
    learned = AUNet(ModelConfig(boundary="learned", d_model=32, n_heads=2)).state_dict()
    torch.manual_seed(3)
    frozen = AUNet(ModelConfig(boundary="frozen", d_model=32, n_heads=2)).state_dict()
    assert learned.keys() == frozen.keys()
    assert all(torch.equal(learned[k], frozen[k]) for k in learned)


def test_construction_leaves_the_global_stream_alone():
    """After building any strategy's model, the global RNG is where one draw leaves it, so what
    training draws next is the same for every arm."""
    after = []
    for boundary in ("uniform", "learned", "hnet", "nawrot"):
        torch.manual_seed(0)
        AUNet(ModelConfig(boundary=boundary, d_model=32, n_heads=2))
        after.append(torch.rand(4))
    assert all(torch.equal(after[0], a) for a in after)
