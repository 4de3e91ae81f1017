"""Reversible in-process patches: the only place (with emulation/) that monkeypatches.

A :class:`PatchSet` is a context manager over an :class:`UndoLog`. It rebinds
every module-level reference to a function (``flashinfer.fp4_quantize`` is
reachable as ``flashinfer.fp4_quantize``, ``flashinfer.quantization.fp4_quantize``
and ``flashinfer.quantization.fp4_quantization.fp4_quantize``; a caller that did
``from flashinfer import fp4_quantize`` holds a fourth) and registers temporary
torch ops under the ``graphbreak_doctor_fix`` namespace. On exit every
attribute is put back and every temporary op is removed from the dispatcher.

What a PatchSet cannot reach, and so never patches: references held in
closures, default arguments, instance or class attributes. A caller that
stores ``self.quantize = flashinfer.fp4_quantize`` keeps the original.
Nothing here writes to disk.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Callable, Iterable

import torch

from graphbreak_doctor.emulation.undo import UndoLog

OP_NAMESPACE = "graphbreak_doctor_fix"

# Modules whose globals never hold a target's functions; skipping them keeps
# the reference scan cheap (a few thousand modules otherwise).
_SKIP_PREFIXES = ("torch", "graphbreak_doctor", "_pytest", "pytest", "sympy", "numpy", "jinja2", "networkx")


def references(obj: Any, *, exclude: Iterable[str] = ()) -> list[tuple[types.ModuleType, str]]:
    """(module, name) of every module global that is ``obj`` itself."""
    excluded = set(exclude)
    found = []
    for mod_name, module in list(sys.modules.items()):
        if module is None or mod_name in excluded or mod_name.startswith(_SKIP_PREFIXES):
            continue
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        for name, value in items:
            if value is obj:
                found.append((module, name))
    found.sort(key=lambda mn: (mn[0].__name__, mn[1]))
    return found


class PatchSet:
    """One rung's patches; undone on exit (or by :meth:`undo`)."""

    def __init__(self, label: str = "") -> None:
        self.label = label
        self._log = UndoLog()
        self.rebound: list[str] = []  # "module.name" entries, for the rung's detail
        self.ops: list[str] = []  # qualified names of temporary ops

    # ---------------------------------------------------------- attributes

    def rebind(self, original: Any, replacement: Any, *, exclude: Iterable[str] = ()) -> list[str]:
        """Point every module-level reference to ``original`` at ``replacement``."""
        names = []
        for module, name in references(original, exclude=exclude):
            self._log.setattr(module, name, replacement)
            names.append(f"{module.__name__}.{name}")
        self.rebound.extend(names)
        return names

    # ------------------------------------------------------------- torch ops

    def custom_op(self, name: str, impl: Callable, *, schema: str, fake: Callable) -> Any:
        """Register ``graphbreak_doctor_fix::name`` for the life of this PatchSet."""
        qualname = f"{OP_NAMESPACE}::{name}"
        op = torch.library.custom_op(qualname, impl, mutates_args=(), schema=schema)
        op.register_fake(fake)
        self.ops.append(qualname)
        self._log.call_on_undo(lambda: _unregister(qualname))
        return getattr(getattr(torch.ops, OP_NAMESPACE), name)

    def call_on_undo(self, fn: Callable[[], None]) -> None:
        self._log.call_on_undo(fn)

    # ------------------------------------------------------------- lifecycle

    def undo(self) -> None:
        self._log.undo()

    def __enter__(self) -> "PatchSet":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.undo()


def _unregister(qualname: str) -> None:
    """Remove a temporary custom op from the dispatcher and torch.ops.

    torch/_library/custom_ops.py keeps one Library per op in OPDEF_TO_LIB and
    the CustomOpDef in OPDEFS; Library._destroy deregisters the schema and
    kernels and drops the cached torch.ops entry. Private API: if a future
    torch renames it, the op is left registered (harmless: nothing outside
    this package calls the graphbreak_doctor_fix namespace)."""
    from torch._library import custom_ops

    lib = getattr(custom_ops, "OPDEF_TO_LIB", {}).pop(qualname, None)
    if lib is not None:
        lib._destroy()
    getattr(custom_ops, "OPDEFS", {}).pop(qualname, None)
