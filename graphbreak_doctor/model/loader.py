"""One typed JSON loader for every file the doctor reads back: a value is
rebuilt from its ``dataclasses.asdict`` form with every field's type checked,
so a file of the wrong shape is one ValueError here, never a crash later."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any


def build(tp: Any, value: Any, where: str = "findings") -> Any:
    """Rebuild a value of type ``tp`` from its ``dataclasses.asdict`` form,
    checking every field's type: a file of the wrong shape is a ValueError
    here, not a crash in a renderer later."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return build(inner[0], value, where)
    if tp is Any:
        return value
    if origin is list:
        expect(value, list, where)
        (item,) = typing.get_args(tp)
        return [build(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        expect(value, dict, where)
        return dict(value)
    if dataclasses.is_dataclass(tp):
        expect(value, dict, where)
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        required = [f.name for f in dataclasses.fields(tp)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [n for n in required if n not in value]
        if missing:
            raise ValueError(f"{where}: missing field(s) {', '.join(missing)}")
        return tp(**{k: build(hints[k], v, f"{where}.{k}") for k, v in value.items() if k in names})
    if tp is float:
        expect(value, (int, float), where)
    elif tp is int:
        expect(value, int, where)
    elif isinstance(tp, type):
        expect(value, tp, where)
    return value


def expect(value: Any, kind: type | tuple[type, ...], where: str) -> None:
    # bool is an int in Python; a field declared int must not take true/false.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ValueError(f"{where}: expected {names}, got {type(value).__name__}")


