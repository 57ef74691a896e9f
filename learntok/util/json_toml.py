"""JSON and TOML read one way, from any file a user or a run wrote (configs, checkpoint
config.json, index.json, JSON lines of data, tasks and metrics, done markers).

Every way such text can fail to parse is one `FormatError` (a ValueError) with a one-line
message: bad syntax, nesting deeper than the parser's recursion allows (a file of 200,000
brackets), an integer longer than Python converts (4,300 digits). A byte-order mark before the text is
read as the encoding mark it is, as a UTF-8 reader with `utf-8-sig` would. The caller adds which file.

What was parsed is then checked for type in one way too: `expect` (one value) and `expect_fields`
(an object's fields by a schema) refuse a value of the wrong type, or a number that is NaN or
infinite, in one line naming where it is and the type found, in JSON's words ("a string", "null").
"""

from __future__ import annotations

import json
import math
import tomllib
from typing import Any

from learntok.util.errors import FormatError
from learntok.util.errors import not_unicode


def parse_json(text: str | bytes) -> Any:
    """json.loads (NaN and infinities are read as floats; the config refuses them where they
    make no sense), every failure a FormatError, and every string in it Unicode text: JSON's
    escapes can spell a lone surrogate ("\\ud800"), which no encoder writes (`not_unicode`)."""
    value = _parse(json.loads, text, "JSON")
    _check_strings(value)
    return value


def _check_strings(value: Any) -> None:
    """Every string of a parsed JSON value (keys too) is Unicode text; else a FormatError."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            strings = (v,)
        elif isinstance(v, dict):
            strings = v.keys()
            stack += v.values()
        elif isinstance(v, list):
            strings = ()
            stack += v
        else:
            continue
        for s in strings:
            problem = not_unicode(s)
            if problem:
                raise FormatError(f"not valid text: a string holds {problem}")


def parse_toml(text: str) -> dict[str, Any]:
    """tomllib.loads, every failure a FormatError."""
    return _parse(tomllib.loads, text, "TOML")


def _parse(loads, text, kind: str) -> Any:
    if isinstance(text, str):  # a byte-order mark (editors on Windows write one) marks the encoding: no content
        text = text.removeprefix("\ufeff")
    try:
        return loads(text)
    except RecursionError:
        raise FormatError(f"not valid {kind}: nested too deeply") from None
    except UnicodeDecodeError as e:  # bytes given to json.loads
        raise FormatError(f"not UTF-8 text (byte {e.start}: {e.reason})") from None
    except json.JSONDecodeError as e:
        raise FormatError(f"not valid {kind} ({e.msg} at line {e.lineno} column {e.colno})") from None
    except ValueError as e:  # TOMLDecodeError, or a number too long to convert
        raise FormatError(f"not valid {kind} ({' '.join(str(e).split())})") from None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:  # finite: NaN and the infinities are no figure
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


# The kinds a field may be asked to hold, by the words a message says them in.
KINDS = {
    "a string": lambda v: isinstance(v, str),
    "an object": lambda v: isinstance(v, dict),
    "a list": lambda v: isinstance(v, list),
    "a list of strings": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "an integer": _is_int,
    "a finite number": _is_number,
    "true or false": lambda v: isinstance(v, bool),
}

_FOUND = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"))
_FOUND += ((list, "a list"), (dict, "an object"), (type(None), "null"))


def type_found(value: Any) -> str:
    """What a parsed value is, in JSON's words; NaN and the infinities by name."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    return next((name for tp, name in _FOUND if isinstance(value, tp)), type(value).__name__)


def expect(value: Any, kind: str, where: str, error: type[Exception] = FormatError, optional: bool = False) -> Any:
    """`value` when it is of `kind` (a key of KINDS; `optional`: or null), else `error`
    "WHERE is FOUND, not KIND" (`where` names the file and the field)."""
    if (optional and value is None) or KINDS[kind](value):
        return value
    raise error(f"{where} is {type_found(value)}, not {kind}{' or null' if optional else ''}")


def expect_fields(record: Any, schema: dict[str, str], where: str, error: type[Exception] = FormatError) -> dict:
    """`record`, an object holding every field of `schema` ({name: kind}; a kind ending in "?"
    may be null), each of its kind (`expect`); anything else is `error` naming `where` and the field."""
    expect(record, "an object", where, error)
    for name, kind in schema.items():
        if name not in record:
            raise error(f"{where}: no field {name!r} ({kind.rstrip('?')})")
        expect(record[name], kind.rstrip("?"), f"{where}: field {name!r}", error, optional=kind.endswith("?"))
    return record
