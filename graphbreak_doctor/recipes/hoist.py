"""hoist-subprocess, hoist-filesystem, hoist-call: the innermost module-level
function on the break's stack that neither takes nor returns tensors runs once,
eagerly, before capture (a warm-up); while tracing it answers from that
warm-up (FlashInfer's ``get_cuda_version``: from ``torch.version.cuda``)."""

from __future__ import annotations

import functools
import inspect
import types
from dataclasses import dataclass
from typing import Any, Callable

from graphbreak_doctor.model import Break, Frame
from graphbreak_doctor.frames import INFRASTRUCTURE, package_of, short_path
from graphbreak_doctor.patching import PatchSet
from graphbreak_doctor.targets.provider import pick_sizes
from graphbreak_doctor.recipes import adapters, hoist_member
from graphbreak_doctor.recipes.common import (
    call_text,
    calls_at_sizes,
    def_lines,
    has_tensor,
    qualified,
    resolve,
    warm_calls,
)
from graphbreak_doctor.recipes.examples import (
    before_after,
    call_expression,
    constant_name,
    indent_of,
    short_name,
    with_parts,
)
from graphbreak_doctor.recipes.recipe import Advice, Change, FixContext, Names, NotApplicable, Plan, Recipe


_CUDA_VERSION_IMPORTS = "import torch\nfrom packaging.version import Version"


def _cuda_version() -> Any:
    import torch
    from packaging.version import Version

    return Version(torch.version.cuda) if torch.version.cuda else None


@dataclass(frozen=True)
class Precomputed:
    """What a tensor-free function without arguments answers, known without
    running it: ``expression`` (after ``imports``) where ``available`` holds
    (else the warm-up runs the function), and ``compute``, the same here."""

    expression: str
    compute: Callable[[], Any]
    imports: str
    available: str


PRECOMPUTED: dict[tuple[str, str], Precomputed] = {
    ("flashinfer", "get_cuda_version"): Precomputed("Version(torch.version.cuda)", _cuda_version,
                                                    _CUDA_VERSION_IMPORTS, "torch.version.cuda"),
}



def plan(brk: Break, ctx: FixContext, *, recipe: str) -> Plan:
    """Compute the innermost tensor-free module-level function once, before
    capture; or first, a class's method the break's own line calls
    (recipes/hoist_member.py)."""
    reasons = []
    try:
        member = hoist_member.plan(brk, ctx, recipe=recipe)
    except NotApplicable as e:
        reasons.append(str(e))
    else:
        if member is not None:
            return member
    stack = brk.stack
    start = stack.index(brk.actionable_frame) if brk.actionable_frame in stack else len(stack) - 1
    for j in range(start, 0, -1):  # never stack[0]: that is the traced function itself
        frame = stack[j]
        if package_of(frame.file) in INFRASTRUCTURE:
            continue
        found = resolve(frame)
        if found is None:
            continue
        module, obj = found
        calls = warm_calls(ctx, obj)
        if not calls:
            reasons.append(f"{frame.function}: not called through a module global in a warm-up run")
            continue
        if any(has_tensor(a) or has_tensor(k) or has_tensor(r) for a, k, r in calls):
            reasons.append(f"{frame.function} takes or returns tensors: it cannot run before capture")
            break  # outer frames are closer to the tensors still
        try:
            table = {(a, tuple(k.items())): r for a, k, r in calls}
            table, every_size, sized = _across_sizes(ctx, obj, table)
        except TypeError:
            reasons.append(f"{frame.function}: its arguments are not hashable")
            continue
        return _hoist_plan(recipe, brk, module, frame, obj, table, every_size, sized)
    raise NotApplicable("; ".join(reasons) or "no module-level function between the traced code and the break")



def _across_sizes(ctx: FixContext, obj: Any, table: dict) -> tuple[dict, bool | None, str]:
    """The warm-up table for every size the server uses: the calls at its
    smallest, a middle and its largest size; the same calls as at the
    target's own size: they do not depend on the size. Else the calls at each
    of the server's sizes. (table, holds at every size, in words)."""
    if not ctx.sizes:
        return table, None, ""
    picked = pick_sizes(ctx.sizes)
    try:
        seen = {(a, tuple(k.items())): r for a, k, r in calls_at_sizes(ctx, obj, picked)}
        if set(seen) <= set(table):
            return table, True, f"the same calls at sizes {', '.join(map(str, picked))}: they do not depend on the size"
        everywhere = {(a, tuple(k.items())): r for a, k, r in calls_at_sizes(ctx, obj, sorted(set(ctx.sizes)))}
    except NotApplicable as e:  # the target cannot run at those sizes here: say so, keep what was seen
        return table, None, f"recorded at the target's own size only ({e})"
    return ({**table, **everywhere}, False,
            f"its calls change with the size: warmed at each of the server's {len(set(ctx.sizes))} sizes, "
            "and any other size runs the original code")


def _hoist_plan(recipe: str, brk: Break, module: types.ModuleType, frame: Frame, obj: Any, table: dict,
                every_size: bool | None = None, sized: str = "") -> Plan:
    name = frame.function
    package = package_of(frame.file)
    # Known without running it: only for a function called without arguments.
    precomputed = PRECOMPUTED.get((package, name)) if list(table) == [((), ())] else None
    value_note = ""
    if precomputed:
        expr = precomputed.expression
        value = precomputed.compute()
        if value is not None:
            probe = table[((), ())]
            value_note = f"; {expr} = {value!r}, the probe answered {probe!r}" + ("" if value == probe else " (they differ!)")
            table = {((), ()): value}
    source_lines = def_lines(obj)
    sig = adapters.signature(obj)
    params = [p for p in (sig.parameters if sig else {})]
    lines = [f"--- {short_path(frame.file)} ({name})", "+_WARM = {}   # filled once, before torch.compile"]
    lines += [f" {line}" for line in source_lines]
    key = f"({', '.join(params)},)" if params else "()"
    lines += [f"+    if {key} in _WARM:   # no {brk.category} work while tracing", f"+        return _WARM[{key}]",
              "     ..."]
    warm = []
    for (args, kwargs) in table:
        call = call_text(name, sig, args, dict(kwargs))
        warm.append(f"+_WARM[{_bound_key(sig, args, dict(kwargs))}] = {call}")
    if precomputed and value_note:
        warm = [f"+_WARM[()] = {precomputed.expression}   # instead of running the probe"]
    lines += ["# at start-up / warm-up, outside the compiled region:"] + warm
    patch = "\n".join(lines) + "\n"

    shown = ", ".join(call_text(name, sig, a, dict(k)) for a, k in table)

    def apply(ps: PatchSet) -> str:
        names = ps.rebind(obj, adapters.memo_adapter(obj, table, f"warm-up of {name}"))
        return f"{name} answers from a warm-up ({shown}){value_note}; rebound {', '.join(names)}"

    change = Change("memo", module.__name__, name, frame.file, obj, keys=list(table), precomputed=precomputed,
                    holds=f"the calls {shown}, answered from the warm-up (any other call runs {name} as before)"
                          + (f"; {sized}" if sized else ""), every_size=every_size)
    return Plan(recipe, qualified(module, name), f"{short_path(frame.file)}:{name}", patch, apply, change=change)



def _bound_key(sig: inspect.Signature | None, args: tuple, kwargs: dict) -> str:
    if sig is None:
        return repr(args)
    try:
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
    except TypeError:
        return repr(args)
    values = tuple(bound.arguments.values())
    return repr(values)



def _example(n: Names) -> str:
    """The call of the function to change, made once before capture; else the
    refused call itself, or the file opened on the traced path."""
    expr = call_expression(n.caller_line, n.function) if n.caller_line else ""
    if expr:
        const = constant_name(n.function)
        return before_after(
            n.caller_where, [n.caller_line], f"{n.function} runs once, before torch.compile (at import or in a "
            "warm-up); the traced path reads its result",
            [f"{const} = {expr}   # outside the compiled region", n.caller_line.replace(expr, const, 1)])
    opened, alias = with_parts(n.line)
    if opened:
        return before_after(
            n.where, [n.line], "do the file work once, outside the compiled region, and keep what the traced code "
            "needs", [f"with {opened}{alias}:   # at import or in a warm-up", "    _CONTENTS = ...   # what the "
                      "traced code reads", f"{indent_of(n.line)}# in {n.function}: use _CONTENTS"])
    name = n.entry or n.culprit
    expr = call_expression(n.line, short_name(name))
    if expr:
        const = constant_name(name)
        return before_after(n.where, [n.line], "run it once, before torch.compile, and read the result",
                            [f"{const} = {expr}   # outside the compiled region", n.line.replace(expr, const, 1)])
    return ""


_BEFORE_CAPTURE_DETAIL = (
    "Compute what {call} returns once, at import or start-up, before torch.compile runs (a warm-up), "
    "cache the result in a module-level variable, and have the traced path read only the cache."
)

RECIPES = (
    Recipe(
        "hoist-subprocess",
        Advice(
            "Move {call} out of {function}: run the probe once before capture and reuse its result",
            "A child process cannot be part of a graph. Compute what the probe returns (a CUDA version, a "
            "tool path) once at import or start-up -- often torch.version.cuda already has it -- and read "
            "the cached value on the traced path.",
            "# before: runs `nvcc --version` on every call\n"
            "def {function}(...):\n"
            "    out = subprocess.check_output([nvcc, \"--version\"])\n\n"
            "# after: computed once, outside the compiled region\n"
            "CUDA_VERSION = torch.version.cuda\n"
            "def {function}(...):\n"
            "    version = CUDA_VERSION",
            names="entry",
            example=_example,
        ),
        functools.partial(plan, recipe="hoist-subprocess"),
    ),
    Recipe(
        "hoist-filesystem",
        Advice(
            "Move {call} out of {function}: resolve paths and load modules before capture",
            "Dynamo cannot trace system calls such as stat/open. Do the file-system work during a warm-up "
            "(or at import), cache the result in a module-level variable, and have the traced path read "
            "only the cache.",
            "_MODULE = None\n\n"
            "def warm_up():            # call once before torch.compile\n"
            "    global _MODULE\n"
            "    _MODULE = load_module_from_disk()\n\n"
            "def {function}(...):\n"
            "    return _MODULE        # no Path.exists()/os.stat() while tracing",
            names="entry",
            example=_example,
        ),
        functools.partial(plan, recipe="hoist-filesystem"),
    ),
    Recipe(
        "hoist-call",
        Advice(
            "Run {call} once before capture and have {function} reuse its result",
            _BEFORE_CAPTURE_DETAIL,
            "_CACHE = {{}}\n\n"
            "def warm_up():            # call once before torch.compile\n"
            "    _CACHE[\"value\"] = compute()\n\n"
            "def {function}(...):\n"
            "    value = _CACHE[\"value\"]",
            example=_example,
        ),
        functools.partial(plan, recipe="hoist-call"),
    ),
)
