"""A folder both learntok and `transformers` read: `learntok export` and `save_pretrained`.

It is a learntok model folder (model.safetensors with learntok's names, config.json with the
model's or the run's config: learntok.model.pretrained) whose config.json also names the
`transformers` classes (`architectures`, and `auto_map` for a process that has not imported
learntok.hf: the small modules it names import them from the installed learntok), with the byte
tokenizer's files. learntok reads it back, the same weights bit for bit (tests/test_hf.py).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from learntok.hf.card import CARD, card_for, model_card
from learntok.util.errors import OutputError
from learntok.util.files import replaceable_folder
from learntok.hf.tokenizer import LearntokByteTokenizer
from learntok.model.aunet import AUNet
from learntok.run.checkpoint import load_run_folder
from learntok.model.pretrained import (
    CONFIG,
    WEIGHTS,
    atomic_dir,
    commit,
    model_folder_config,
    write_model_files,
)

# each class's module in an exported folder: one import from the installed learntok
SHIMS = {
    "configuration_learntok": ("learntok.hf.config", "LearntokConfig"),
    "modeling_learntok": ("learntok.hf.modeling", "LearntokForCausalLM"),
    "tokenization_learntok": ("learntok.hf.tokenizer", "LearntokByteTokenizer"),
}
AUTO_MAP = {
    "AutoConfig": "configuration_learntok.LearntokConfig",
    "AutoModelForCausalLM": "modeling_learntok.LearntokForCausalLM",
}
TOKENIZER_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja")
EXPORT_FILES = frozenset((WEIGHTS, CONFIG, CARD, *TOKENIZER_FILES, *(f"{m}.py" for m in SHIMS)))
# what `transformers`' Trainer writes into its output_dir beside the model that `trainer.save_model()`
# saves there: its checkpoints, TensorBoard logs, arguments, state and results
TRAINER_OUTPUTS = re.compile(
    r"checkpoint-\d+|runs|training_args\.bin|trainer_state\.json|(?:all|train|eval|test|predict)_results\.json"
)


def trainer_output(name: str) -> bool:
    """Whether `name` in a folder is one of a Trainer's own outputs (`TRAINER_OUTPUTS`)."""
    return TRAINER_OUTPUTS.fullmatch(name) is not None


def write_export(model: AUNet, config: dict, path, card: str | None = None, what: str = "export:", beside=None) -> Path:
    """Write `model` with `config` (a run config, kept whole, or a model config) and its model
    card (`card`, else one made from the config: learntok.hf.card) into folder `path`, atomically.
    The folder it replaces must be one this wrote, empty or missing, or hold beside those files
    only entries `beside` names (another writer's: a Trainer's checkpoints, `TRAINER_OUTPUTS`),
    which stay as they are while each of this writer's files is replaced whole, the weights first
    and the config last. Any other folder is refused (OutputError), nothing touched."""
    target = replaceable_folder(path, EXPORT_FILES, what, OutputError, beside)
    native = config if isinstance(config.get("model"), dict) else model_folder_config(model)
    tmp = atomic_dir(target)
    try:
        write_model_files(model, tmp, {**native, "architectures": ["LearntokForCausalLM"], "auto_map": AUTO_MAP})
        (tmp / CARD).write_text(card or model_card(native, Path(path).name), encoding="utf-8")
        tokenizer = LearntokByteTokenizer()
        tokenizer.init_kwargs["auto_map"] = {"AutoTokenizer": ["tokenization_learntok.LearntokByteTokenizer", None]}
        tokenizer.save_pretrained(tmp)
        for module, (source, name) in SHIMS.items():
            (tmp / f"{module}.py").write_text(f"from {source} import {name}  # noqa: F401\n", encoding="utf-8")
        if beside and target.is_dir() and any(map(beside, os.listdir(target))):
            for name in sorted(os.listdir(tmp), key=lambda n: (n == CONFIG, n != WEIGHTS)):
                os.replace(tmp / name, target / name)
        else:
            commit(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def export(source, out) -> Path:
    """`learntok export SOURCE --out OUT`: a run folder (latest checkpoint), checkpoint or model folder,
    or shipped name, written to OUT as `write_export` writes. It is read as every command reads
    one (learntok.run.checkpoint.load_run_folder: a run config checked whole before the model is
    built), so that no folder is exported that would not load."""
    model, _, run = load_run_folder(source)
    return write_export(model, run.config, out, card_for(run.folder, run.config, Path(out).name))
