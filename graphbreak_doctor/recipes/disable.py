"""compiler-disable: ``torch.compiler.disable`` on the library call -- the fix
people reach for first. Under ``fullgraph=True`` it is an error ("Skip calling
`torch.compiler.disable()`d function"), so the ladder tries it once, only to
show that fullgraph rejects it while explain mode runs, and undoes it."""

from __future__ import annotations

from typing import Any

from graphbreak_doctor.model import Break
from graphbreak_doctor.frames import package_of, short_path
from graphbreak_doctor.patching import PatchSet
from graphbreak_doctor.recipes.common import library_entry, qualified, replace_call, source_of, where_of
from graphbreak_doctor.recipes.recipe import Advice, FixContext, NotApplicable, Plan, Recipe
from graphbreak_doctor.targets import TargetError


def plan(brk: Break, ctx: FixContext) -> Plan:
    if ctx.trap_done:
        raise NotApplicable(f"already shown to fail under fullgraph ({ctx.trap_done})")
    entry = library_entry(brk.stack)
    if entry is None:
        raise NotApplicable("no library function between the traced code and the break")
    caller, frame, module, fn = entry
    package = package_of(frame.file)
    call = source_of(caller, f"    {frame.function}(...)")
    new = replace_call(call, frame.function, f"{frame.function}_eager")
    patch = (
        f"--- {short_path(caller.file)} ({caller.qualname})\n"
        f"+{frame.function}_eager = torch.compiler.disable({package}.{frame.function})\n"
        f"-{call}\n"
        f"+{new}\n"
    )

    def apply(ps: PatchSet) -> str:
        import torch

        names = ps.rebind(fn, torch.compiler.disable(fn))
        return f"torch.compiler.disable({package}.{frame.function}) in {', '.join(names)}"

    return Plan("compiler-disable", qualified(module, frame.function), where_of(caller), patch, apply,
                judge=lambda new, new_brk: _rejection(ctx, new, new_brk))


def _rejection(ctx: FixContext, new: Any, new_brk: Break | None) -> str:
    """Why the disabled call is no fix: fullgraph fails on it, explain mode runs."""
    why = f"fullgraph=True: {new_brk.gb_type}" if new_brk else f"fullgraph=True: {new.error}"
    try:
        explain, _ = ctx.trace("explain")
        ok, crashed, error, graphs = explain.ok, explain.crashed, explain.error, len(explain.graphs)
    except TargetError as e:
        ok, crashed, error, graphs = False, False, f"the target does not run eagerly here ({e})", 0
    if ok:
        ran = f"runs, {graphs} graph(s), the disabled call is a graph break"
    elif crashed:
        ran = (f"crashed inside Dynamo ({error}) -- not a graph break; `graphbreak-doctor trace "
               f"--mode explain` shows whether the target crashes there without this change too")
    else:
        ran = f"also fails: {error}"
    return (f"Rejected -- {why}: a disabled function is a graph break, and fullgraph (a server's compile: "
            f"vLLM's, SGLang's piecewise runner) forbids graph breaks. Explain mode (fullgraph=False) {ran}. "
            f"Change undone; a custom op is the fix that keeps one graph.")



RECIPE = Recipe(
    "compiler-disable",
    Advice(
        "Do not wrap {call} in torch.compiler.disable: under fullgraph it is an error",
        "torch.compiler.disable makes Dynamo break the graph at the call. Explain mode (fullgraph=False) "
        "runs, but fullgraph=True (a server's compile: vLLM's, SGLang's piecewise runner) rejects the break; "
        "register a custom op instead.",
        "# rejected under fullgraph=True:\n"
        "{function}_eager = torch.compiler.disable({function})",
    ),
    plan,
    demonstration=True,
)
