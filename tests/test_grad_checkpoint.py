"""Gradient checkpointing (AUNet.set_gradient_checkpointing, `train.grad_checkpoint`, and
`transformers`' gradient_checkpointing_enable): the same loss and the same gradients as without it,
for every strategy with weights, and a run's metrics the same with it on and off."""

import json

import pytest
import torch
import torch.nn.functional as F

from learntok.model.aunet import AUNet
from learntok.model.config import ModelConfig
from learntok.train.loop import train


def loss_and_grads(model: AUNet, x: torch.Tensor) -> tuple[torch.Tensor, dict]:
    model.zero_grad()
    out = model(x, greedy=True)
    loss = F.cross_entropy(out.logits[:, :-1].reshape(-1, out.logits.size(-1)), x[:, 1:].reshape(-1))
    loss.backward()
    return loss.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", ["learned", "hnet", "nawrot", "whitespace"])
def test_checkpointing_gives_the_same_loss_and_gradients(name):
    torch.manual_seed(0)
    x = torch.randint(0, 256, (2, 48))
    x[:, 0] = 256
    model = AUNet(ModelConfig(d_model=32, n_heads=2, boundary=name)).train()
    plain = loss_and_grads(model, x)
    model.set_gradient_checkpointing(True)
    checkpointed = loss_and_grads(model, x)
    assert torch.allclose(plain[0], checkpointed[0], atol=1e-6)
    assert plain[1].keys() == checkpointed[1].keys() and plain[1]
    for k in plain[1]:
        assert torch.allclose(plain[1][k], checkpointed[1][k], atol=1e-6), k


def test_a_run_with_grad_checkpoint_logs_the_same_losses(train_cfg, tmp_path):
    losses = []
    for on in ("false", "true"):
        train(train_cfg(f"train.grad_checkpoint={on}", "train.steps=4"), tmp_path / on)
        rows = [json.loads(line) for line in (tmp_path / on / "metrics.jsonl").read_text().splitlines()]
        losses.append([r["loss"] for r in rows if "loss" in r])
    assert losses[0] and losses[0] == pytest.approx(losses[1], abs=1e-5)


def test_transformers_gradient_checkpointing_enable():
    pytest.importorskip("transformers")
    from learntok.hf import LearntokForCausalLM

    model = LearntokForCausalLM.from_pretrained("tiny-shakespeare").train()
    x = torch.randint(0, 256, (2, 40))
    grads = []
    for on in (False, True):
        model.gradient_checkpointing_enable() if on else model.gradient_checkpointing_disable()
        assert model.is_gradient_checkpointing == on
        model.zero_grad()
        model(input_ids=x, labels=x).loss.backward()
        grads.append({k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})
    assert all(torch.allclose(grads[0][k], grads[1][k], atol=1e-6) for k in grads[0])
