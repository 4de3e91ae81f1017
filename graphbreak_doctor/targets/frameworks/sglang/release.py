"""Where the installed SGLang keeps what the doctor calls: each lookup asks
for what the release has (never its version string), and a release that has
none of the known forms is refused in one line naming what is missing."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from typing import Any, Callable

from graphbreak_doctor.targets import TargetError


def version() -> str:
    return importlib.metadata.version("sglang")


def _lookup(path: str) -> Any:
    """'pkg.module:attr' -> the object, or None if the release lacks it."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            return None
        raise
    return getattr(module, attr, None) if attr else module


def require(*paths: str) -> tuple[int, Any]:
    """The first of ``paths`` ('module:attr') the installed SGLang has, and
    its index; TargetError naming them all when it has none."""
    for i, path in enumerate(paths):
        found = _lookup(path)
        if found is not None:
            return i, found
    raise TargetError(f"SGLang {version()} cannot be built by graphbreak-doctor: it has no "
                      + " and no ".join(f"{p.replace(':', '.')}" for p in paths))


def optional(path: str) -> Any:
    return _lookup(path)


def call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call with the keyword arguments ``fn`` accepts (releases add and drop some)."""
    params = inspect.signature(fn).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return fn(*args, **kwargs)


__all__ = ["call", "optional", "require", "version"]
