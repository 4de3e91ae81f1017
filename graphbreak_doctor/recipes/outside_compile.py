"""skip-when-compiling: a call torch forbids inside a graph runs only outside
torch.compile.

torch marks some functions as never to be traced (``forbid_in_graph``):
``torch._dynamo.mark_static_address``, ``mark_dynamic`` and the other
functions that tell the compiler about an input before it compiles. They
return nothing; called from the traced code, Dynamo stops with an
AssertionError in every mode, a plain ``torch.compile`` included. Their work
is for the eager run (the compiler reads the mark when it compiles the next
time), so the fix is to skip the call while compiling:
``if not torch.compiler.is_compiling(): ...`` at the call site. In this
process, and in a written patch, the function itself becomes one that does
nothing under torch.compile and calls the original otherwise."""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any, Callable

from graphbreak_doctor.frames import short_path
from graphbreak_doctor.model import Break
from graphbreak_doctor.patching import PatchSet
from graphbreak_doctor.recipes.common import source_of, where_of
from graphbreak_doctor.recipes.examples import indent_of
from graphbreak_doctor.recipes.recipe import Advice, Change, FixContext, Names, NotApplicable, Plan, Recipe


def outside_compile(fn: Callable) -> Callable:
    """``fn`` made to do nothing (return None) under torch.compile. Its
    name and docstring are kept, not its attributes: the mark that forbids
    it in a graph stays on the original."""
    import torch

    def skipped_when_compiling(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return None
        return fn(*args, **kwargs)

    return functools.update_wrapper(skipped_when_compiling, fn, updated=())


def _forbidden(culprit: str) -> Any:
    """The function named "module.qualname", from the modules already
    imported (never importing one); None when it is not a forbidden one."""
    parts = culprit.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        obj: Any = module
        for name in parts[cut:]:
            obj = inspect.getattr_static(obj, name, None)
        if callable(obj) and inspect.getattr_static(obj, "_dynamo_forbidden", False) is True:
            return obj
        return None
    return None


def _returns_nothing(fn: Callable) -> bool:
    try:
        annotation = inspect.signature(fn).return_annotation
    except (TypeError, ValueError):
        return False
    return annotation in (None, "None")


def plan(brk: Break, ctx: FixContext) -> Plan:
    fn = _forbidden(brk.culprit)
    if fn is None:
        raise NotApplicable(f"{brk.culprit or 'the refused call'} is not a function torch forbids in a graph")
    if not _returns_nothing(fn):
        raise NotApplicable(f"{brk.culprit} returns a value: skipping it under torch.compile would change the "
                            "traced code's result")
    site = brk.site
    line = source_of(site, f"    {brk.culprit}(...)")
    pad = indent_of(line)
    patch = (f"--- {short_path(site.file)} ({site.qualname or site.function})\n"
             f"-{line}\n"
             f"+{pad}if not torch.compiler.is_compiling():   # torch forbids this call in a graph\n"
             f"+{pad}    {line.strip()}\n")
    module, name = fn.__module__, fn.__name__
    change = Change("outside_compile", module, name, inspect.getsourcefile(fn) or "", fn,
                    holds="every call: the function does nothing under torch.compile and runs as before outside it",
                    every_size=True)

    def apply(ps: PatchSet) -> str:
        # Its package exports it (torch._dynamo.mark_static_address): the
        # modules of that package are scanned too.
        names = ps.rebind(fn, outside_compile(fn), within=(module.rsplit(".", 1)[0],))
        if not names:
            raise NotApplicable(f"no module global names {brk.culprit}")
        return f"{brk.culprit} does nothing under torch.compile; rebound {', '.join(names)}"

    return Plan("skip-when-compiling", brk.culprit, where_of(site), patch, apply, change=change)


def _example(n: Names) -> str:
    if not n.line.strip():
        return ""
    return (f"# before ({n.where})\n{n.line.strip()}\n\n# after\n"
            f"if not torch.compiler.is_compiling():\n    {n.line.strip()}")


RECIPE = Recipe(
    "skip-when-compiling",
    Advice(
        "Call {call} only outside torch.compile, in {function}",
        "torch forbids this function inside a compiled graph: it tells the compiler about a tensor before "
        "it compiles (a static address, a dynamic dimension), and Dynamo stops on it in every mode. Its "
        "work belongs to the eager run; skip the call while compiling.",
        "if not torch.compiler.is_compiling():\n"
        "    torch._dynamo.mark_static_address(cache)",
        unnamed_call="the function torch forbids in a graph",
        example=_example,
    ),
    plan=plan,
)
