"""`learntok config`: the resolved config with each key's source, round-tripping through
--config; `--keys` with every field of every section; `learntok --version`."""

import dataclasses
import os
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

import learntok
from learntok.boundaries import strategy_class, strategy_names
from learntok.cli import main
from learntok.run.config import SECTIONS, STRATEGY, load_config, preset_names
from learntok.run.config_info import all_keys, field_help, resolve

ROOT = Path(__file__).resolve().parents[1]


def config_output(capsys, *args) -> str:
    assert main(["config", *map(str, args)]) == 0
    return capsys.readouterr().out


def annotations(text: str) -> dict[str, str]:
    """ "section.key" -> its trailing comment, from the printed TOML."""
    out, section = {}, None
    for line in text.splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif section and "=" in line:
            key, _, rest = line.partition("=")
            out[f"{section}.{key.strip()}"] = rest.partition("  # ")[2]
    return out


def test_each_key_says_where_it_comes_from(tmp_path, capsys):
    file = tmp_path / "mine.toml"
    file.write_text("[optim]\nlr = 1\n[data]\npacked = true\n")
    text = config_output(
        capsys,
        "--preset",
        "147M",
        "--config",
        file,
        "train.steps=100",
        "model.boundary=nawrot",
        "strategy.temperature=0.5",
    )
    got = annotations(text)
    assert got["model.d_model"] == "preset" and got["train.micro_batch_size"] == "preset"
    assert got["optim.lr"] == "file" and got["data.packed"] == "file"
    assert got["train.steps"] == "override" and got["model.boundary"] == "override"
    assert got["strategy.temperature"] == "override" and got["strategy.prior_weight"] == "default"
    assert got["model.attn_window"] == "default" and got["system.device"] == "default"
    assert got["optim.warmup_steps"] == "derived (preset: 0)"  # from optim.warmup_bytes
    assert "# budget: 100 steps x 128 rows x 4096 bytes" in text and "training FLOPs" in text


def test_a_later_strategy_starts_its_options_afresh(tmp_path):
    file = tmp_path / "nawrot.toml"
    file.write_text('[model]\nboundary = "nawrot"\n[strategy]\ntemperature = 0.5\n')
    cfg, sources = resolve(None, file, ["model.boundary=hnet"])
    assert cfg.model.strategy == {"ratio_weight": 0.03} and sources["strategy.ratio_weight"] == "default"
    assert resolve(None, file)[1]["strategy.temperature"] == "file"


@pytest.mark.parametrize("preset", preset_names())
def test_the_printed_config_loads_back_to_the_same_config(tmp_path, capsys, preset):
    overrides = ["optim.lr=0.01", "optim.betas=0.8,0.9", "model.boundary=nawrot", "strategy.temperature=0.5"]
    printed = tmp_path / "printed.toml"
    printed.write_text(config_output(capsys, "--preset", preset, *overrides))
    expected = load_config(preset, overrides=overrides)
    assert load_config(file=printed) == expected
    again = config_output(capsys, "--config", printed)  # through the command's own --config
    assert tomllib.loads(again) == tomllib.loads(printed.read_text())
    assert set(annotations(again).values()) == {"file"}  # every key stated by the file now


def test_keys_lists_every_field_of_every_section(capsys):
    lines = config_output(capsys, "--keys").splitlines()
    names = [line.split()[0] for line in lines]
    expected = [
        f"{section}.{f.name}"
        for section, cls in SECTIONS.items()
        for f in dataclasses.fields(cls)
        if not (section == "model" and f.name == STRATEGY)
    ]
    expected += [f"{STRATEGY}.{f.name}" for s in strategy_names() for f in dataclasses.fields(strategy_class(s).Config)]
    assert names == expected
    row = lines[names.index("train.seq_len")].split(None, 3)
    assert row[1:3] == ["int", "4096"] and row[3].startswith("T: bytes per sequence")


def test_every_key_has_its_one_line_help():
    missing = [k.name for k in all_keys() if not k.help]
    assert not missing, f"fields without a trailing comment (meaning, unit): {missing}"


@dataclass
class Example:
    width: int = 3  # the width, in bytes
    name: str = "a # not a comment"  # a string with a hash
    ratios: tuple[float, float] = (1.0, 2.0)
    last: float = 0.5  # short
    # a comment above a field whose line would be too long
    above: int = 1


def test_field_help_reads_each_fields_trailing_comment():
    assert field_help(Example) == {
        "width": "the width, in bytes",
        "name": "a string with a hash",
        "ratios": "",
        "last": "short",
        "above": "a comment above a field whose line would be too long",
    }


def test_version():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-m", "learntok", "--version"], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and r.stdout.strip() == f"learntok {learntok.__version__}"
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"] == learntok.__version__
