"""The JSON text of every document the doctor writes -- findings, baselines,
diffs, matrices, SARIF -- made in this one place, so that each is JSON and
encodes as UTF-8 whatever the findings hold (findings read from elsewhere are
untrusted, and their free-form fields hold anything JSON can):

- a number that is not finite (``float("nan")``, ``inf``; Python's JSON
  reader accepts ``NaN`` and ``Infinity``) is written as the string
  ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``: JSON has no such numbers;
- a lone surrogate (``"\\ud800"`` in a file read back) is written as its JSON
  escape ``\\ud800``, so the text encodes as UTF-8 and reads back the same;
- a value nested deeper than :data:`MAX_DEPTH` levels below the document's
  root is written, from that level on, as a string holding its compact JSON
  text (:func:`flat`): nothing here recurses without bound, so facts nested
  900 deep are written, not a RecursionError.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

MAX_DEPTH = 64
_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(data: Any) -> str:
    """The document's JSON text (two-space indent, non-ASCII kept, a final
    newline); the same data gives the same bytes."""
    text = json.dumps(plain(data), indent=2, ensure_ascii=False, allow_nan=False)
    return escape_surrogates(text) + "\n"


def escape_surrogates(text: str) -> str:
    """``text`` with each lone surrogate written as ``\\udXXX``: in JSON text,
    where a surrogate can only stand inside a string, that is its JSON escape."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON data: a dataclass as a dict of its fields in order
    (what ``dataclasses.asdict`` makes), tuples as lists, keys as strings, a
    number that is not finite as its name, and a list or dict at
    :data:`MAX_DEPTH` levels as its compact JSON text."""
    if isinstance(value, float):
        return _number(value)
    if value is None or isinstance(value, (str, int)):
        return value
    is_record = dataclasses.is_dataclass(value) and not isinstance(value, type)
    if not (is_record or isinstance(value, (dict, list, tuple))):
        return value  # not JSON data: json.dumps says what it is (TypeError)
    if depth >= MAX_DEPTH:
        return flat(value)
    if is_record:
        return {f.name: plain(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {_key(k): plain(v, depth + 1) for k, v in value.items()}
    return [plain(v, depth + 1) for v in value]


class _Punctuation(str):
    """JSON punctuation on :func:`flat`'s stack, told apart from the data's strings."""


def flat(value: Any) -> str:
    """The compact JSON text of ``value`` however deep it nests (a loop, no
    recursion), with the substitutions :func:`plain` makes."""
    out: list[str] = []
    todo: list[Any] = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, _Punctuation):
            out.append(item)
            continue
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            item = {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
        if isinstance(item, dict):
            parts: list[Any] = [_Punctuation("{")]
            for i, (k, v) in enumerate(item.items()):
                parts += [_Punctuation((", " if i else "") + json.dumps(_key(k), ensure_ascii=False) + ": "), v]
            parts.append(_Punctuation("}"))
        elif isinstance(item, (list, tuple)):
            parts = [_Punctuation("[")]
            for i, v in enumerate(item):
                parts += [_Punctuation(", ")] if i else []
                parts.append(v)
            parts.append(_Punctuation("]"))
        else:
            out.append(json.dumps(_number(item) if isinstance(item, float) else item, ensure_ascii=False))
            continue
        todo.extend(reversed(parts))
    return "".join(out)


def nests_deeper(value: Any, levels: int) -> bool:
    """Whether lists and dicts in ``value`` nest more than ``levels`` deep
    (a loop: safe on any depth)."""
    todo = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, (dict, list, tuple)):
            if depth >= levels:
                return True
            todo.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def as_text(value: Any) -> str:
    """A free-form value as one string: a string as it is, a number that is
    not finite as its name, anything else as its compact JSON text."""
    if isinstance(value, str):
        return value
    return str(_number(value)) if isinstance(value, float) else flat(value)


def _number(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"


def _key(key: Any) -> str:
    """A key as json.dumps writes it (``1`` -> ``"1"``, ``True`` -> ``"true"``)."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (int, float)):
        return json.dumps(_number(key) if isinstance(key, float) else key).strip('"')
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
