"""What to trace: a callable with its arguments, plus a description of it.

Target protocol for ``--target pkg.module:factory``: ``factory()`` returns
``(fn, args)`` or ``(fn, args, kwargs)``, or a :class:`Target`. The factory
is called inside the selected device (see graphbreak_doctor.emulation), so a
factory that writes ``torch.empty(..., device="cuda")`` gets a fake CUDA
tensor on an emulated GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Target:
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    # Where it came from ("fixtures.breaks.subprocess_call:target", "glm5:dense").
    spec: str = ""
    # What was traced, recorded in the findings (layer kind, shapes, formats...).
    meta: dict[str, Any] = field(default_factory=dict)
    # Names of registered ops that piecewise mode splits the graph at.
    split_ops: tuple[str, ...] = ()


class TargetError(Exception):
    """A target that cannot be loaded or called: bad input, reported in one line."""


def load_factory(spec: str) -> Callable[[], Any]:
    """Resolve ``pkg.module:factory``."""
    import importlib
    import os
    import sys

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise TargetError(f"--target must look like pkg.module:factory, got {spec!r}")
    # Like `python -m`, targets in the current directory are importable.
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise TargetError(f"cannot import target module {module_name!r}: no module named {e.name!r}") from e
        raise TargetError(f"importing {module_name!r} failed: {type(e).__name__}: {e}") from e
    except Exception as e:
        raise TargetError(f"importing {module_name!r} failed: {type(e).__name__}: {e}") from e
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise TargetError(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise TargetError(f"{spec} is not callable (a factory returns (fn, args) or (fn, args, kwargs))")
    return obj


def call_factory(spec: str, factory: Callable[[], Any]) -> Target:
    """Call a factory and check what it returned against the target protocol."""
    try:
        made = factory()
    except Exception as e:
        raise TargetError(f"target factory {spec} raised {type(e).__name__}: {e}") from e
    if isinstance(made, Target):
        made.spec = made.spec or spec
        return made
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise TargetError(
            f"target factory {spec} must return (fn, args) or (fn, args, kwargs), got {type(made).__name__}"
        )
    fn, args, *rest = made
    kwargs = rest[0] if rest else {}
    if not callable(fn):
        raise TargetError(f"target factory {spec}: first item must be callable, got {type(fn).__name__}")
    if not isinstance(args, (tuple, list)):
        raise TargetError(f"target factory {spec}: args must be a tuple or list, got {type(args).__name__}")
    if not isinstance(kwargs, dict):
        raise TargetError(f"target factory {spec}: kwargs must be a dict, got {type(kwargs).__name__}")
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return Target(fn=fn, args=tuple(args), kwargs=kwargs, spec=spec, meta={"function": name})
