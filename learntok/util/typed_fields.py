"""Typed values of config dataclasses, read strictly: a TOML / JSON value checked against a field's
type and the range the field declares (learntok.util.ranges), an override's text parsed by it, and a
section's keys checked against a dataclass. Every config layer (the run config, a model folder's
config.json, a strategy's options) reads through these, so a wrong name, type or value fails the
same way everywhere: a ConfigError naming it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from learntok.util.errors import ConfigError, wrong_type
from learntok.util.ranges import Range, field_range
from learntok.util.errors import not_unicode


def field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def union(convert, value: Any, tp: Any, name: str) -> Any:
    """The first member of a Union (Optional) type that `convert` accepts, None aside."""
    for arg in typing.get_args(tp):
        if arg is not type(None):
            try:
                return convert(value, arg, name)
            except ConfigError:
                pass
    raise ConfigError(f"{name} = {value!r}: expected {tp}")


def check_value(value: Any, tp: Any, name: str) -> Any:
    """Check a structured value (TOML / JSON) against a field type; ints are accepted as floats
    and lists as tuples. Returns the value converted to the field's type."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return None if value is None and type(None) in args else union(check_value, value, tp, name)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name} = {value!r}: expected a list")
        elem = args[0] if args else Any
        if len(args) > 1 and args[1] is not Ellipsis and len(value) != len(args):
            raise ConfigError(f"{name} = {value!r}: expected {len(args)} values")
        return tuple(check_value(v, elem, name) for v in value)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:
                raise ConfigError(f"{name}: an integer of {len(str(value))} digits is too large for a number") from None
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is Any:
        return value
    raise ConfigError(f"{name} = {value!r}: expected {getattr(tp, '__name__', tp)}")


BOOLS = {"true": True, "1": True, "false": False, "0": False}


def parse_value(text: str, tp: Any, name: str) -> Any:
    """Parse an override's text by the field's type: bool (true/false/1/0), int, float, str,
    optional (none/null), tuple (comma-separated, brackets optional)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return None if text.lower() in ("none", "null") and type(None) in args else union(parse_value, text, tp, name)
    if origin is tuple:
        items = comma_list(text.strip().strip("[]()"), name)
        return check_value([parse_value(s, args[0], name) for s in items], tp, name)
    try:
        if tp is bool:
            return BOOLS[text.lower()]
        if tp is int:
            return int(text.replace("_", ""))
        if tp is float:
            return float(text)
    except (KeyError, ValueError):
        raise ConfigError(f"{name}={text}: expected {tp.__name__}") from None
    return text


def comma_list(text: str, what: str) -> list[str]:
    """The items of a comma-separated list (`0.9,0.95`, `learned,uniform`), each stripped: the
    one reader of such lists (an override of a tuple field, `--strategies`, `--rates`,
    `--seeds`). One trailing comma is allowed (`7,`: a list of one); an empty item anywhere
    else (`1,,2`, `,1`, `1, ,2`) is a typo, a ConfigError naming `what`, never dropped."""
    items = [s.strip() for s in text.split(",")]
    if "" in items[:-1]:
        raise ConfigError(f"{what} {text!r}: an empty item in the list; give the items separated by single commas")
    return items[:-1] if items[-1] == "" else items


def check_fields(cls: type, values: dict[str, Any], section: str, source: str) -> dict[str, Any]:
    """`values` of dataclass `cls` (section `section`), each checked against its field's type and
    range and converted; an unknown key is a ConfigError naming it, `source` and the known keys."""
    hints = field_types(cls)
    for key in values:
        if key not in hints:
            raise ConfigError(f"{source}: unknown key {section}.{key}; known: {', '.join(hints)}")
    given = {key: check_value(value, hints[key], f"{section}.{key}") for key, value in values.items()}
    check_values(cls, given, section)
    return given


def check_values(cls: type, values: dict[str, Any], section: str) -> None:
    """Every value of a config section against its field's declared range (learntok.util.ranges;
    a field that declares none still needs a finite float or an int64), every string against
    UTF-8 (configs are saved as text) and against being empty where empty is not the field's own
    default (an empty W&B project or device is a typo; bpe's tokenizer "" means "fit one"). The first bad value raises ConfigError naming the key."""
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        value, name = values[f.name], f"{section}.{f.name}"
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                problem = (field_range(f) or Range()).problem(v)
                if problem:
                    raise ConfigError(f"{name} {shown(value)} {problem}")
            elif isinstance(v, str) and not v.strip() and f.default != "":  # "" is a choice where it is the default
                raise ConfigError(f"{name} is empty: give a value, or leave {name} out for its default")
            elif isinstance(v, str) and not is_utf8(v):
                raise ConfigError(
                    f"{name} {v!r} is not UTF-8 text (a config is saved as text; give a name "
                    f"in UTF-8, e.g. rename the file or link it under such a name)"
                )


def shown(value: Any) -> str:
    """A value for a message: an int of more than 24 digits by its first digits and length."""
    text = repr(value)
    return f"{text[:12]}... ({len(text)} digits)" if isinstance(value, int) and len(text) > 24 else text


def is_utf8(text: str) -> bool:
    """Whether `text` encodes to UTF-8: not so for an argument's bytes that were not UTF-8
    (Python keeps them as lone surrogates)."""
    return not_unicode(text) is None


def config_fields(obj: Any) -> None:
    """A config dataclass built in Python (ModelConfig(...), ObjectiveConfig(...)): every field
    against its type and declared range, as a config file's are (learntok.util.typed_fields), converted in
    place (an int given for a float becomes one); a dict field (a strategy's options) must be a
    dict. A wrong one is a ValueError naming it (learntok.util.errors.ConfigError)."""
    cls = type(obj)
    hints, values = field_types(cls), {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if typing.get_origin(hints[f.name]) is dict:
            if not isinstance(value, dict):
                raise wrong_type(cls.__name__, f.name, "a dict", value)
        else:
            values[f.name] = value
    for key, value in check_fields(cls, values, cls.__name__, cls.__name__).items():
        object.__setattr__(obj, key, value)
