"""``--target pkg.module:factory``: any code a user names.

Target protocol: ``factory()`` returns ``(fn, args)`` or ``(fn, args, kwargs)``,
or a :class:`Target`. The factory is called inside the selected device
(graphbreak_doctor.emulation), so a factory that writes
``torch.empty(..., device="cuda")`` gets a fake CUDA tensor on an emulated GPU.
The current directory is importable while the factory loads, as with
``python -m``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import re
from typing import Any, Callable, Mapping

from graphbreak_doctor.model import TargetInfo
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target, TargetError
from graphbreak_doctor.targets.provider import Option, Selection, TargetProvider, size_label
from graphbreak_doctor.text import one_line


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "target"


_DOTTED = re.compile(r"[^\W\d]\w*(?:\.[^\W\d]\w*)*")


def check_spec(spec: str) -> tuple[str, str]:
    """(module, attribute) of ``pkg.module:factory``; a ValueError (one line)
    unless both are dotted Python names -- a path (``../../etc:passwd``), a
    relative import or a file name is not a module, and is never imported."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--target must look like pkg.module:factory, got {spec!r}")
    if not _DOTTED.fullmatch(module_name):
        raise ValueError(f"--target {spec!r}: {module_name!r} is not a module name (dotted Python names, like "
                         "pkg.module; run from the folder that holds the package)")
    if not _DOTTED.fullmatch(attr):
        raise ValueError(f"--target {spec!r}: {attr!r} is not a Python name")
    return module_name, attr


def load_factory(spec: str, log: UndoLog) -> Callable[[], Any]:
    """Resolve ``pkg.module:factory``; the current directory goes on
    ``sys.path`` through ``log`` (undone with it)."""
    try:
        module_name, attr = check_spec(spec)
    except ValueError as e:
        raise TargetError(str(e)) from e
    log.prepend_sys_path(os.getcwd())
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


def callable_name(fn: Any) -> str:
    """A callable's qualified name, or its type's name when it has none (or
    when asking for it fails: a hostile ``__qualname__`` property)."""
    try:
        name = getattr(fn, "__qualname__", None)
    except Exception:  # the target's own property raised: fall back to its type
        name = None
    return name if isinstance(name, str) and name else type(fn).__name__


def call_factory(spec: str, factory: Callable[[], Any]) -> Target:
    """Call a factory and check what it returned against the target protocol."""
    try:
        made = factory()
    except Exception as e:
        raise TargetError(f"target factory {spec} raised {type(e).__name__}: {one_line(str(e))}") from e
    if isinstance(made, Target):
        made.info.spec = made.info.spec or spec
        made.info.provider = made.info.provider or PROVIDER.name
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
    info = TargetInfo(spec=spec, provider=PROVIDER.name, function=callable_name(fn))
    return Target(fn=fn, args=tuple(args), kwargs=kwargs, info=info)


class FactoryProvider(TargetProvider):
    name = "factory"
    title = "a target of your own"
    in_matrix = True
    shaped_sizes = True
    options = (
        Option("--target", "a factory pkg.module:factory returning (fn, args[, kwargs]); repeat it to "
               "trace several targets, each in workers of its own", metavar="M:F", selects=True, repeat=True),
    )

    def select(self, options: Mapping[str, Any]) -> list[Selection]:
        specs = options["target"]
        specs = [specs] if isinstance(specs, str) else list(dict.fromkeys(specs))
        for spec in specs:
            check_spec(spec)  # a ValueError: a usage error before anything runs
        return [Selection(self.name, slug(spec.replace(":", ".")), {"spec": spec}, spec=spec) for spec in specs]

    def build(self, selection: Selection, device: str, log: UndoLog) -> Target:
        spec = selection.options["spec"]
        factory = load_factory(spec, log)
        size = selection.options.get("size")
        if isinstance(size, list):  # a shape, back from JSON
            size = tuple(size)
        if size is not None:  # --sizes: the factory takes the size by name
            return call_factory(f"{spec} (size={size})", functools.partial(factory, size=size))
        return call_factory(spec, factory)

    def at_size(self, selection: Selection, size: int | tuple[int, ...]) -> Selection | None:
        """The factory called with ``size=N``, or ``size=(A, B, ...)`` for a
        shape (``--sizes``)."""
        return dataclasses.replace(selection, name=f"{selection.name}-size-{size_label(size)}",
                                   options={**selection.options, "size": size})


PROVIDER = FactoryProvider()
