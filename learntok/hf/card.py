"""The model card (README.md) of a folder `learntok export` and `save_pretrained` write: YAML front
matter the Hugging Face Hub reads (library_name, license, tags, pipeline_tag, datasets where the
data is a Hub dataset, and a model-index with the figures the run recorded), then what the model
is, how it was trained (the command and commit when the folder says them) and how to load it.

The figures are the run's own records, each named with its split: a comparison's test figures
(`done.json`, `learntok compare`), else the last validation of `metrics.jsonl`. A folder without
them gets a card without figures, which says how to measure them (`learntok eval`).
"""

from __future__ import annotations

import json
from pathlib import Path

from learntok import __version__
from learntok.run import metrics_log
from learntok.util.errors import DataError

CARD = "README.md"
LICENSE = "mit"  # learntok's own (pyproject.toml); the weights are released under it
TAGS = ["learntok", "byte-level", "tokenizer-free", "dynamic-chunking", "autoregressive-u-net", "reinforce"]
PAPER = "You Can Learn Tokenization End-to-End with Reinforcement Learning (Dauncey & Wattenhofer, ICML 2026)"


def yaml_value(value) -> str:
    """A scalar or a list of scalars as YAML (JSON's quoting is valid YAML)."""
    return json.dumps(value)


def recorded_figures(folder: Path | None) -> dict | None:
    """The figures a run recorded about itself, from its run folder (a checkpoint's grandparent):
    {"split", "bpb", "boundary_rate", "step", "source"}; None when there are none."""
    if folder is None:
        return None
    run = folder.parent.parent if folder.parent.name == "checkpoints" else folder
    done = run / "done.json"
    try:
        if done.is_file():
            d = json.loads(done.read_text())
            return {
                "split": "test",
                "bpb": d["test_bpb"],
                "boundary_rate": d["test_boundary_rate"],
                "source": "done.json",
            }
        r = metrics_log.last_logged(run, "val")
        if r is not None and "val_bpb" in r:
            return {
                "split": "validation",
                "bpb": r["val_bpb"],
                "boundary_rate": r.get("val_boundary_rate"),
                "step": r.get("step"),
                "source": metrics_log.log_path(run).name,
            }
    except (OSError, ValueError, KeyError, TypeError, DataError):
        return None  # a card never stops an export: it goes without figures
    return None


def model_card(config: dict, name: str, figures: dict | None = None) -> str:
    """The card of a model whose folder's config.json is `config` (a run config or a model config).
    `name` (a folder's name, a repo id) is shown as UTF-8 text: a name in another encoding keeps
    its bytes as escapes."""
    name = name.encode("utf-8", "backslashreplace").decode("utf-8")
    model = config.get("model", config) if isinstance(config.get("model"), dict) else config
    train = config.get("train", {}) if isinstance(config.get("train"), dict) else {}
    data = config.get("data", {}) if isinstance(config.get("data"), dict) else {}
    source = data.get("source")
    boundary = model.get("boundary", "learned")
    front = [
        "---",
        f"library_name: {yaml_value('learntok')}",
        f"license: {yaml_value(LICENSE)}",
        f"pipeline_tag: {yaml_value('text-generation')}",
        "tags:",
        *[f"- {yaml_value(t)}" for t in [*TAGS, f"boundaries-{boundary}"]],
    ]
    if isinstance(source, str) and source.count("/") == 1 and not Path(source).exists():
        front += ["datasets:", f"- {yaml_value(source)}"]  # a Hub dataset id
    if figures:
        dataset = {"name": str(source or "unknown"), "type": str(source or "unknown"), "split": figures["split"]}
        metrics = [
            {
                "type": "bits_per_byte",
                "value": round(float(figures["bpb"]), 4),
                "name": f"{figures['split']} bits per byte",
            }
        ]
        if figures.get("boundary_rate") is not None:
            rate = round(float(figures["boundary_rate"]), 4)
            metrics.append({"type": "boundary_rate", "value": rate, "name": f"{figures['split']} boundary rate"})
        front += [
            "model-index:",
            f"- name: {yaml_value(name)}",
            "  results:",
            "  - task:",
            f"      type: {yaml_value('text-generation')}",
            f"    dataset: {json.dumps(dataset)}",
            "    metrics:",
            *[f"    - {json.dumps(m)}" for m in metrics],
        ]
    front.append("---")
    sizes = ", ".join(f"{k} {model[k]}" for k in ("d_model", "n_down", "n_mid", "n_up") if k in model)
    trained = (
        f"{train.get('steps')} steps of {train.get('batch_size')} windows of {train.get('seq_len')} bytes"
        if train
        else "its run's recipe"
    )
    if figures:
        where = f"step {figures['step']}, " if figures.get("step") is not None else ""
        rate = f", boundary rate {figures['boundary_rate']:.3f}" if figures.get("boundary_rate") is not None else ""
        measured = (
            f"{figures['split']} bits per byte {figures['bpb']:.4f}{rate} ({where}the run's `{figures['source']}`)."
        )
    else:
        measured = "no figures recorded in this folder: measure them with `learntok eval FOLDER --split test`."
    text = f"""
# {name}

A byte-level autoregressive U-Net from [learntok](https://pypi.org/project/learntok/) ({__version__}),
whose boundaries are decided by the `{boundary}` strategy (docs/strategies.md); with `learned`, a
policy trained end to end with a score-function (REINFORCE) estimator, as in {PAPER}.

- sizes: {sizes}; target boundary rate {model.get("target_rate", 0.2)}
- trained on: `{source}`, {trained}
- figures: {measured}
- config.json holds the whole config it was trained with; the weights are safetensors, no pickle.

## Use

```python
import learntok.hf  # pip install 'learntok[hf]'
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("{name}", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("{name}", trust_remote_code=True)
```

or with learntok alone: `learntok segment {name} "some text"`, `learntok eval {name} --split test`.
"""
    return "\n".join(front) + "\n" + text


def card_for(folder: Path | None, config: dict, name: str) -> str:
    """The card of an export of `folder`: its own card when it has one with front matter (a
    shipped model's, written by hand on the same template), else `model_card` with its run's figures."""
    own = folder / CARD if folder is not None else None
    if own is not None and own.is_file():
        text = own.read_text(encoding="utf-8")
        if text.startswith("---\n"):
            return text
    return model_card(config, name, recorded_figures(folder))
