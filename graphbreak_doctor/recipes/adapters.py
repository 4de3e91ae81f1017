"""Functions the fix recipes install in place of a library function.

Each adapter is generated from the replaced function's own signature (so a
caller that passes arguments by position or by name binds exactly as before,
and code that inspects the signature -- the GLM-5 target's FlashInfer plan
does -- sees the same parameters). Dynamo traces an adapter as ordinary
Python: it is never on the skip list, so the only thing it sees is the call
to a registered op or a dictionary lookup.
"""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass
from typing import Any, Callable

_EMPTY = inspect.Parameter.empty
_VAR = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def signature(fn: Callable) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def type_hints(fn: Callable) -> dict[str, Any]:
    target = inspect.unwrap(fn)
    try:
        return typing.get_type_hints(target)
    except Exception:  # postponed annotations naming things that do not resolve
        return {}


# ------------------------------------------------------------ schema types

def _scalars() -> dict[type, str]:
    import torch

    return {int: "int", float: "float", bool: "bool", str: "str", torch.dtype: "ScalarType", torch.device: "Device"}


def schema_type(annotation: Any, observed: list[Any]) -> str | None:
    """The torch schema type of one parameter, from its annotation, else from
    the values seen in a warm-up run; None when a schema cannot carry it."""
    if annotation is not _EMPTY and annotation is not None:
        t = _from_annotation(annotation)
        if t is not None:
            return t
    kinds = {_from_value(v) for v in observed if v is not None}
    optional = any(v is None for v in observed)
    if len(kinds) != 1 or None in kinds:
        return None
    (t,) = kinds
    return f"{t}?" if optional else t


def _from_annotation(ann: Any) -> str | None:
    import torch

    if ann is torch.Tensor:
        return "Tensor"
    scalars = _scalars()
    if ann in scalars:
        return scalars[ann]
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1 and type(None) in args:
            t = _from_annotation(inner[0])
            return f"{t}?" if t and not t.endswith("?") else None
        return None
    if origin in (list, tuple) and args:
        t = _from_annotation(args[0])
        return f"{t}[]" if t in ("Tensor", "int", "float", "bool") else None
    return None


def _from_value(value: Any) -> str | None:
    import torch

    if isinstance(value, torch.Tensor):
        return "Tensor"
    if isinstance(value, bool):
        return "bool"
    for tp, name in _scalars().items():
        if isinstance(value, tp):
            return name
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return "Tensor[]"
    return None


def return_schema(outputs: Any) -> str | None:
    import torch

    if isinstance(outputs, torch.Tensor):
        return "Tensor"
    if isinstance(outputs, tuple) and outputs and all(isinstance(o, torch.Tensor) for o in outputs):
        return "(" + ", ".join("Tensor" for _ in outputs) + ")"
    return None


# ------------------------------------------------------------ generation


@dataclass
class Forward:
    """How an adapter forwards one call.

    ``target`` receives the parameters in ``passed`` by keyword; every other
    parameter must hold its default or one of ``accepted[name]`` -- otherwise
    the adapter calls ``original`` unchanged, and the break stays."""

    original: Callable
    target: Callable
    passed: list[str]
    accepted: dict[str, tuple]


def forwarding_adapter(fwd: Forward, sig: inspect.Signature, label: str) -> Callable | None:
    lines = forwarding_lines(sig, fwd.passed, set(fwd.accepted), getattr(fwd.original, "__name__", "adapter"))
    if lines is None:
        return None
    params = list(sig.parameters.values())
    defaults = {p.name: p.default for p in params if p.default is not _EMPTY}
    accepted = {p.name: tuple(fwd.accepted.get(p.name, ())) + ((defaults[p.name],) if p.name in defaults else ())
                for p in params if p.name not in fwd.passed}
    namespace = {"_d": defaults, "_acc": accepted, "_original": fwd.original, "_target": fwd.target}
    return _define(lines, namespace, _identifier(getattr(fwd.original, "__name__", "adapter")), label, fwd.original)


def forwarding_lines(sig: inspect.Signature, passed: list[str], accepted: set[str], name: str, *,
                     eager_original: bool = False) -> list[str] | None:
    """The source of a forwarding adapter named ``name`` with ``sig``'s
    parameters; it reads ``_d`` (the defaults), ``_acc`` (the values each
    parameter not in ``passed`` may hold), ``_original`` and ``_target``.
    ``eager_original``: outside torch.compile it calls the original (the
    function a registered op's own implementation calls by name). None when
    the signature cannot be forwarded."""
    params = list(sig.parameters.values())
    if any(p.kind in _VAR for p in params):
        return None
    checks = []
    for p in params:
        if p.name in passed:
            continue
        if p.default is _EMPTY and p.name not in accepted:
            return None  # a required argument the target cannot take
        checks.append(f"({p.name} is _d[{p.name!r}] or {p.name} in _acc[{p.name!r}])")
    forward_original = _call_list(params)
    forward_target = ", ".join(f"{n}={n}" for n in passed)
    name = _identifier(name)
    lines = [f"def {name}({_parameter_list(params)}):"]
    if eager_original:
        checks.insert(0, "_is_compiling()")
    if checks:
        lines.append(f"    if not ({' and '.join(checks)}):")
        lines.append(f"        return _original({forward_original})")
    lines.append(f"    return _target({forward_target})")
    return lines


def memo_adapter(original: Callable, table: dict, label: str) -> Callable:
    """Return the warm-up's answer for arguments seen then; call through otherwise."""
    name = _identifier(getattr(original, "__name__", "cached"))
    lines = [
        f"def {name}(*args, **kwargs):",
        "    key = (args, tuple(kwargs.items()))",
        "    if key in _table:",
        "        return _table[key]",
        "    return _original(*args, **kwargs)",
    ]
    return _define(lines, {"_table": table, "_original": original}, name, label, original)


def recorder(original: Callable, calls: list) -> Callable:
    """Call through and remember (args, kwargs, result): the warm-up's eyes."""

    def record(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        calls.append((args, kwargs, result))
        return result

    return record


def _parameter_list(params: list[inspect.Parameter]) -> str:
    out: list[str] = []
    star = False
    for i, p in enumerate(params):
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not star:
            out.append("*")
            star = True
        out.append(p.name if p.default is _EMPTY else f"{p.name}=_d[{p.name!r}]")
        nxt = params[i + 1] if i + 1 < len(params) else None
        if p.kind is inspect.Parameter.POSITIONAL_ONLY and (nxt is None or nxt.kind is not inspect.Parameter.POSITIONAL_ONLY):
            out.append("/")
    return ", ".join(out)


def _call_list(params: list[inspect.Parameter]) -> str:
    return ", ".join(
        p.name if p.kind is inspect.Parameter.POSITIONAL_ONLY else f"{p.name}={p.name}" for p in params
    )


def _identifier(name: str) -> str:
    return name if name.isidentifier() else "adapter"


def _define(lines: list[str], namespace: dict, name: str, label: str, original: Callable) -> Callable:
    # Everything the adapter uses is a closure cell, not a global: Dynamo
    # reaches an inlined function's globals through its module (by name), and
    # generated code has no module of its own.
    names = sorted(namespace) + ["_tuple"]
    source = "\n".join([f"def _factory({', '.join(names)}):"] + ["    " + line for line in lines] + [f"    return {name}"]) + "\n"
    source = source.replace("tuple(kwargs.items())", "_tuple(kwargs.items())")
    # The file name shows up in a stack only if the adapter itself breaks.
    code = compile(source, f"<graphbreak-doctor fix: {label}>", "exec")
    scope: dict = {"__name__": __name__}
    exec(code, scope)
    fn = scope["_factory"](**namespace, _tuple=tuple)
    fn.__qualname__ = getattr(original, "__qualname__", name)
    fn.__doc__ = getattr(original, "__doc__", None)
    return fn
