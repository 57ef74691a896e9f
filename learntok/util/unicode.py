"""Unicode text, checked one way: why a str is no Unicode text (`not_unicode`: the one check of
every text reader) and a text argument of the Python API as its bytes (`text`, `texts`)."""

from __future__ import annotations

from typing import Any

from learntok.util.errors import not_unicode, wrong_type


def text(where: str, name: str, value: Any) -> bytes:
    """A text as its bytes: a str (UTF-8) or bytes / bytearray as they are. A str with any
    surrogate (U+D800..U+DFFF, surrogateescape's U+DC80..U+DCFF too) is refused: bytes that are
    not UTF-8 are given as bytes."""
    if isinstance(value, str):
        problem = not_unicode(value)
        if problem:
            raise ValueError(f"{where}: {name} must be Unicode text (a str) or bytes; it is a str with {problem}")
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise wrong_type(where, name, "a str or bytes", value)


def texts(where: str, name: str, value: Any) -> tuple[list[bytes], bool]:
    """One text or a list (tuple) of them: (their bytes, whether one text was given)."""
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        return [text(where, name, value)], True
    if not isinstance(value, (list, tuple)):
        raise wrong_type(where, name, "a str or bytes, or a list of them", value)
    out = []
    for i, v in enumerate(value):
        if not isinstance(v, (str, bytes, bytearray, memoryview)):
            raise wrong_type(where, f"{name}[{i}]", "a str or bytes", v)
        out.append(text(where, f"{name}[{i}]", v))
    return out, False
