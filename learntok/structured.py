"""JSON and TOML read one way, from any file a user or a run wrote (configs, checkpoint
config.json, index.json, JSON lines of data, tasks and metrics, done markers).

Every way such text can fail to parse is one `FormatError` (a ValueError) with a one-line
message: bad syntax, nesting deeper than the parser's recursion allows (a file of 200,000
brackets), an integer longer than Python converts (4,300 digits). The caller adds which file.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any


class FormatError(ValueError):
    """Text that is not the JSON or TOML it should be (one-line message, no file name)."""


def parse_json(text: str | bytes) -> Any:
    """json.loads (NaN and infinities are read as floats; the config refuses them where they
    make no sense), every failure a FormatError."""
    return _parse(json.loads, text, "JSON")


def parse_toml(text: str) -> dict[str, Any]:
    """tomllib.loads, every failure a FormatError."""
    return _parse(tomllib.loads, text, "TOML")


def _parse(loads, text, kind: str) -> Any:
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
