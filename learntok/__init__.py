"""learntok: byte-level language models that learn their own tokenization end to end.

The public names are loaded on first use (PEP 562), so that `import learntok` (and the command
line's parsing) does not load torch."""

import importlib

__version__ = "0.1.0"

# each public name and the module that defines it
_EXPORTS = {
    "AUNet": "learntok.model.aunet",
    "ModelOutput": "learntok.model.aunet",
    "ModelConfig": "learntok.model.config",
    "ObjectiveConfig": "learntok.model.objective",
    "Encoding": "learntok.text.tokenizer",
    "Tokenizer": "learntok.text.tokenizer",
}

__all__ = ["AUNet", "Encoding", "ModelConfig", "ModelOutput", "ObjectiveConfig", "Tokenizer"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'learntok' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
