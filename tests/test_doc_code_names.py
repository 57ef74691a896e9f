"""Every code name the docs quote still exists: a dotted name that starts with one of learntok's
packages (`run.folder.claim`, `learntok.evaluation.metrics.METRICS`) resolves to a module and an
attribute, is a config key (or an old key that is still upgraded), or, after `model.`, is an
attribute of a model instance (`model.save_pretrained`). A module moved or renamed fails here
until its page says where it went."""

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import learntok
from learntok.boundaries.options import MOVED_KEYS
from learntok.hf.modeling import LearntokForCausalLM
from learntok.model.aunet import AUNet
from learntok.run.config_info import all_keys

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PACKAGES = sorted(m.name for m in pkgutil.iter_modules(learntok.__path__) if not m.name.startswith("_"))
NAME = re.compile(r"^(?:learntok\.)?(?:%s)(?:\.[A-Za-z_]\w*)+$" % "|".join(PACKAGES))
FILE = re.compile(r"\.(?:py|log|json|jsonl|toml|txt|md|safetensors|png)$")  # a file's name, not code
KEYS = {k.name for k in all_keys()} | set(MOVED_KEYS)


def resolves(name: str) -> bool:
    """The longest importable module prefix of `name`, then attributes for the rest."""
    parts = name.removeprefix("learntok.").split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module("learntok." + ".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True
    return False


def on_a_model(name: str) -> bool:
    """`model.x.y` read as an attribute path of a model instance (AUNet or the transformers class)."""
    parts = name.split(".")
    if parts[0] != "model" or len(parts) < 2:
        return False
    return any(
        hasattr(cls, parts[1]) or parts[1] in getattr(cls, "__annotations__", {})
        for cls in (AUNet, LearntokForCausalLM)
    ) or parts[1] in {"strategy", "chunker"}


def stale(name: str) -> bool:
    short = name.removeprefix("learntok.")
    return not (FILE.search(name) or short in KEYS or resolves(name) or on_a_model(short))


def quoted_names(text: str) -> list[tuple[int, str]]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for span in re.findall(r"`([^`]+)`", line):
            for token in re.split(r"[\s=(),\[\]:]+", span):
                token = token.rstrip(".;")
                if NAME.match(token):
                    out.append((n, token))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_name_a_page_quotes_exists(page):
    wrong = [f"{page.name}:{n}: {name}" for n, name in quoted_names(page.read_text(encoding="utf-8")) if stale(name)]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    "name, is_stale",
    [
        ("run.folder.claim", False),
        ("learntok.evaluation.metrics.METRICS", False),
        ("model.d_model", False),  # a config key
        ("model.policy_window", False),  # an old key, still upgraded
        ("model.save_pretrained", False),  # a model instance's method
        ("train.log", False),  # a file
        ("runfolder.claim", False),  # not one of learntok's packages: not checked
        ("run.folder.no_such_function", True),
        ("util.no_such_module.thing", True),
        ("learntok.text.segment.decide", True),
        ("model.no_such_attribute", True),
    ],
)
def test_the_check_names_what_is_gone(name, is_stale):
    assert (bool(NAME.match(name)) and stale(name)) == is_stale
