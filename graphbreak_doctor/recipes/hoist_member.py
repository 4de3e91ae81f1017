"""hoist-call on a class's method: the break's own line calls a classmethod
or staticmethod through a module global (a class, or an instance of one:
``current_platform.is_arch_support_pdl()``) that Dynamo cannot enter (a
method cached with ``functools.cache`` is a C wrapper), and that neither
takes nor returns tensors. The method runs in a warm-up, eagerly, and
while tracing answers the calls the warm-up saw from its table.

The class that defines the method (the first in the instance's method
resolution order) gets a method of the same kind that answers from the
table and calls the original for any other arguments; the written patch
appends the same to that class's module (fix/emit.py)."""

from __future__ import annotations

import re
import sys
import types
from typing import Any

from graphbreak_doctor.frames import INFRASTRUCTURE, package_of, short_path
from graphbreak_doctor.model import Break, Frame
from graphbreak_doctor.patching import PatchSet
from graphbreak_doctor.recipes import adapters
from graphbreak_doctor.recipes.common import call_text, has_tensor, module_of_file, warm_up
from graphbreak_doctor.recipes.recipe import Change, FixContext, NotApplicable, Plan

# The kinds of class attribute the recipe replaces: neither takes the instance.
KINDS = {classmethod: "classmethod", staticmethod: "staticmethod"}


def site_members(site: Frame) -> tuple[str, list[tuple[type, Any]]] | None:
    """(name, [(owner, attribute), ...]): the classes that may answer a
    classmethod or staticmethod the site's line calls. Called as
    ``GLOBAL.name(...)`` (GLOBAL a class or an instance in the site's
    module): the class that defines it. Called as ``cls.name(...)`` or
    ``self.name(...)`` in a method: every class that defines it as such,
    among the method's class, its bases and its subclasses (which of them
    answers is the warm-up's to see)."""
    if package_of(site.file) in INFRASTRUCTURE:
        return None
    module = module_of_file(site.file)
    if module is None:
        return None
    own = site.qualname.rsplit(".", 1)[0] if "." in (site.qualname or "") else ""
    for text in re.findall(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)\s*\(", site.code or ""):
        *path, name = text.split(".")
        if path in (["cls"], ["self"]) and own.isidentifier() and isinstance(getattr(module, own, None), type):
            home = getattr(module, own)
            classes = list(dict.fromkeys([*home.__mro__, *_subclasses(home)]))
        else:
            obj: Any = module
            for part in path:
                obj = getattr(obj, part, None)
            if obj is None or isinstance(obj, types.ModuleType):
                continue
            cls = obj if isinstance(obj, type) else type(obj)
            classes = [next((c for c in cls.__mro__ if name in vars(c)), object)]
        found = [(c, vars(c)[name]) for c in classes if type(vars(c).get(name)) in KINDS]
        if found:
            return name, found
    return None


def _subclasses(cls: type) -> list[type]:
    out, todo = [], [cls]
    while todo:
        for sub in type.__subclasses__(todo.pop()):
            if sub not in out:
                out.append(sub)
                todo.append(sub)
    return out


def _with_function(kind: str, function: Any) -> Any:
    """``function`` as a class attribute of ``kind``; it takes (cls, ...) for a classmethod."""
    return classmethod(function) if kind == "classmethod" else staticmethod(function)


def _recorded(ctx: FixContext, name: str, members: list[tuple[type, Any]]) -> list[tuple[type, tuple, dict, Any]]:
    """The calls of each member (its class, args without the class, kwargs,
    result) in one eager run of the target."""
    calls: list = []

    def recorder(owner: type, static: Any) -> Any:
        kind, inner = KINDS[type(static)], static.__func__

        def record(*args: Any, **kwargs: Any) -> Any:
            result = inner(*args, **kwargs)
            calls.append((owner, args[1:] if kind == "classmethod" else args, kwargs, result))
            return result

        return _with_function(kind, record)

    with PatchSet("warm-up") as ps:
        for owner, static in members:
            ps.setattr(owner, name, recorder(owner, static))
        warm_up(ctx)
    return calls


def plan(brk: Break, ctx: FixContext, *, recipe: str) -> Plan | None:
    """The member the break's line calls, answered from a warm-up; None where the line calls none."""
    site = brk.site
    found = site_members(site) if site is not None else None
    if found is None:
        return None
    name, members = found
    recorded = _recorded(ctx, name, members)
    if not recorded:
        raise NotApplicable(f"{name}: not called in a warm-up run")
    owners = list(dict.fromkeys(owner for owner, *_rest in recorded))
    if len(owners) > 1:
        raise NotApplicable(f"{name}: answered by {len(owners)} classes in a warm-up run "
                            f"({', '.join(o.__qualname__ for o in owners)})")
    owner, static = owners[0], vars(owners[0])[name]
    label = f"{owner.__qualname__}.{name}"
    calls = [(a, k, r) for _owner, a, k, r in recorded]
    if any(has_tensor(a) or has_tensor(k) or has_tensor(r) for a, k, r in calls):
        raise NotApplicable(f"{label} takes or returns tensors: it cannot run before capture")
    answers: dict = {}
    try:
        for a, k, r in calls:
            answers.setdefault((a, tuple(k.items())), set()).add(repr(r))
    except TypeError:
        raise NotApplicable(f"{label}: its arguments are not hashable") from None
    if any(len(seen) > 1 for seen in answers.values()):
        raise NotApplicable(f"{label}: the same call answered differently within one warm-up")
    table = {(a, tuple(k.items())): r for a, k, r in calls}
    kind, inner = KINDS[type(static)], static.__func__
    shown = ", ".join(call_text(name, None, a, dict(k)) for a, k in table)
    defining = sys.modules.get(owner.__module__)
    if defining is None or "." in owner.__qualname__ or getattr(defining, owner.__name__, None) is not owner:
        raise NotApplicable(f"{label}: its class is not a global of its module")

    # The function under a classmethod takes its class first: so do its keys
    # (a subclass calling it through ``cls`` runs the original, as its cache would).
    keyed = {((owner, *a) if kind == "classmethod" else a, k): r for (a, k), r in table.items()}
    answer = adapters.memo_adapter(inner, keyed, f"warm-up of {label}")

    def apply(ps: PatchSet) -> str:
        ps.setattr(owner, name, _with_function(kind, answer))
        return f"{label} answers from a warm-up ({shown}); replaced the {kind} on {owner.__module__}.{label}"

    file = getattr(defining, "__file__", "") or site.file
    patch = "\n".join([
        f"--- {short_path(file)} ({label})",
        f"+_WARM = {{}}   # filled once, before torch.compile: {shown}",
        f"     @{kind}",
        f"     def {name}(...):",
        "+        if (args, kwargs) in _WARM:   # no work while tracing",
        "+            return _WARM[(args, kwargs)]",
        "         ...",
        f"# the call at {short_path(site.file)}:{site.line} ({site.code}) then reads the table",
    ]) + "\n"
    change = Change("memo", owner.__module__, name, file, static, keys=list(table), owner=owner.__name__,
                    member=kind, holds=f"the calls {shown}, answered from the warm-up (any other call runs "
                                       f"{label} as before)")
    return Plan(recipe, f"{owner.__module__}.{label}", f"{short_path(file)}:{label}", patch, apply, change=change)
