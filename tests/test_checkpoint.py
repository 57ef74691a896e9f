"""Model files and training checkpoints: round trips, rotation, corrupt and missing files."""

import pytest
import torch

from learntok.run.checkpoint import load_checkpoint, save_checkpoint
from learntok.run.config import RunConfig, load_config
from learntok.util.errors import CheckpointError
from learntok.model.aunet import AUNet
from learntok.model.objective import loss
from learntok.util.runtime import seed_everything, set_rng_state
from learntok.train.step import build_optimizer

CFG = load_config(overrides=["model.d_model=32", "model.n_heads=2", "model.n_mid=1", "system.device=cpu"])


def _batch(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (4, 33), generator=g)
    x[:, 0] = 256  # BOS
    return x


def _step(model, optimizer, x):
    total, _ = loss(model(x), x, CFG.objective)
    optimizer.zero_grad()
    total.backward()
    optimizer.step()
    return total.item()


def _trained(tmp_path):
    seed_everything(0)
    model = AUNet(CFG.model)
    optimizer = build_optimizer(model, CFG.optim, torch.device("cpu"))
    _step(model, optimizer, _batch(0))
    return model, optimizer, save_checkpoint(tmp_path, 1, model, optimizer, CFG, {"bytes_seen": 128})


def test_checkpoint_round_trip_gives_identical_next_step(tmp_path):
    model, optimizer, path = _trained(tmp_path)
    expected = [_step(model, optimizer, _batch(s)) for s in (1, 2)]  # two steps: the optimizer state matters

    ckpt = load_checkpoint(tmp_path)  # a run folder resolves to its latest
    assert ckpt.path == path and ckpt.step == 1 and ckpt.state["bytes_seen"] == 128
    assert RunConfig.from_dict(ckpt.config) == CFG
    model2 = AUNet(CFG.model)
    model2.load_state_dict(ckpt.model_state)
    optimizer2 = build_optimizer(model2, CFG.optim, torch.device("cpu"))
    optimizer2.load_state_dict(ckpt.state["optimizer"])
    set_rng_state(ckpt.state["rng"])
    assert [_step(model2, optimizer2, _batch(s)) for s in (1, 2)] == expected


def test_save_model_and_load_model(tmp_path):
    model, _, path = _trained(tmp_path / "run")
    x = _batch(3)
    model.save_pretrained(tmp_path / "m")
    for source in (tmp_path / "m", tmp_path / "run", path):  # model folder, run folder, checkpoint
        loaded = AUNet.from_pretrained(source)
        assert loaded.cfg == model.cfg
        a = torch.ones_like(x, dtype=torch.float)
        assert torch.equal(loaded(x, boundaries=a).logits, model(x, boundaries=a).logits)


def test_keeps_the_last_k_and_points_latest_at_the_newest(tmp_path):
    model, optimizer, _ = _trained(tmp_path)
    for step in (2, 3, 4):
        save_checkpoint(tmp_path, step, model, optimizer, CFG, {"bytes_seen": 0}, keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["latest", "step_0000003", "step_0000004"]
    assert load_checkpoint(tmp_path).step == 4


@pytest.mark.parametrize("name", ["model.safetensors", "state.pt", "config.json"])
def test_corrupt_or_missing_files_raise_checkpoint_error(tmp_path, name):
    _, _, path = _trained(tmp_path)
    target = path / name
    target.write_bytes(target.read_bytes()[: len(target.read_bytes()) // 2])  # truncated
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")) as err:
        load_checkpoint(tmp_path) if name == "state.pt" else AUNet.from_pretrained(tmp_path)
    assert "\n" not in str(err.value)
    target.unlink()
    with pytest.raises(CheckpointError, match="missing|no model"):
        load_checkpoint(tmp_path) if name == "state.pt" else AUNet.from_pretrained(path)


def test_missing_paths(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        AUNet.from_pretrained(tmp_path / "nothing")
    with pytest.raises(CheckpointError, match="neither"):
        AUNet.from_pretrained(tmp_path)


def test_checkpoint_from_another_format_says_so(tmp_path):
    import json

    from learntok import AUNet, ModelConfig

    folder = tmp_path / "m"
    AUNet(ModelConfig(d_model=32, n_heads=2)).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["format_version"] == 1 and "learntok_version" in config
    AUNet.from_pretrained(folder)  # the stamp is stripped on read
    config["format_version"] = 99
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="format 99"):
        AUNet.from_pretrained(folder)
