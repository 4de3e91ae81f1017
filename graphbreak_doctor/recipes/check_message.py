"""check-without-message: a torch check keeps its message outside
torch.compile only.

``torch._check(cond, message)`` and its kin (``_check_with``,
``_check_tensor_all_with``, ...) are checks Dynamo keeps in the graph (an
assertion on a size it learns from). Their message is a function that makes
the error text; Dynamo runs it only if the check fails, so it must turn the
function into one it can call later, and it cannot when the function's
closure holds a value that is not a constant (a count computed from a
tensor, a string formatted from such counts): "Can't convert torch._check*()
message closure" (GB9158), in every mode. The check is what matters in a
graph; its text is not. The change is the one a person makes at the call:
``check(cond) if torch.compiler.is_compiling() else check(cond, message)``,
in the function that holds the call (recipes/rewrite.py), so a check that
fails outside torch.compile still says the caller's message. (The message
is left out, not passed as None: Dynamo refuses a None message too.)

torch's own function is left alone: Dynamo knows its check functions by
identity (a table it builds from their names, and builds again after a
process joins a process group), so a replacement of ``torch._check`` would be
taken for the original and refused again."""

from __future__ import annotations

import ast
import inspect

from graphbreak_doctor.frames import short_path
from graphbreak_doctor.model import Break
from graphbreak_doctor.patching import PatchSet
from graphbreak_doctor.recipes import rewrite
from graphbreak_doctor.recipes.common import source_of, where_of
from graphbreak_doctor.recipes.examples import indent_of
from graphbreak_doctor.recipes.recipe import Advice, Change, FixContext, Names, NotApplicable, Plan, Recipe

# GB9158: "Can't convert torch._check*() message closure".
GB_IDS = frozenset({"GB9158"})


def _message_index(name: str) -> int | None:
    """Where torch's check ``name`` takes its message, positionally."""
    import torch

    fn = getattr(torch, name, None) if name.startswith("_check") else None
    try:
        params = list(inspect.signature(fn).parameters) if callable(fn) else []
    except (TypeError, ValueError):
        return None
    return params.index("message") if "message" in params else None


def _drop_message(call: ast.Call, globals_: dict) -> ast.expr | None:
    """``check(...)`` as ``check(<no message>) if torch.compiler.is_compiling()
    else check(...)``; None where ``call`` is no torch check with a message.
    The message is left out, not passed as None: Dynamo takes a message that
    is there, None too, for a function it must convert."""
    import copy

    import torch

    name = rewrite.dotted(call.func)
    root, _, attr = name.rpartition(".")
    if not root or "." in root:
        return None
    # The call names torch by a name bound to it (a local ``import torch``
    # inside the function spells it the same way).
    if root != "torch" and globals_.get(root) is not torch:
        return None
    index = _message_index(attr)
    if index is None:
        return None
    quiet = copy.deepcopy(call)
    kept = [k for k in quiet.keywords if k.arg != "message"]
    if len(kept) < len(quiet.keywords):
        quiet.keywords = kept
    elif len(quiet.args) > index and not any(isinstance(a, ast.Starred) for a in quiet.args[:index + 1]):
        del quiet.args[index]
    else:
        return None
    compiling = ast.Call(ast.Attribute(ast.Attribute(ast.Name(root, ast.Load()), "compiler", ast.Load()),
                                       "is_compiling", ast.Load()), [], [])
    return ast.IfExp(compiling, quiet, call)


def plan(brk: Break, ctx: FixContext) -> Plan:
    if brk.gb_id not in GB_IDS:
        raise NotApplicable("not a torch check whose message Dynamo cannot convert (GB9158)")
    site = brk.site
    module, fn = rewrite.function_at(site)
    calls: list[str] = []

    def edit(call: ast.Call) -> ast.expr | None:
        made = _drop_message(call, fn.__globals__)
        if made is not None:
            calls.append(ast.unparse(made))
        return made

    source, new = rewrite.rewrite(fn, site.line, edit)
    line = source_of(site, f"    {brk.culprit}(cond, message)")
    pad = indent_of(line)
    patch = (f"--- {short_path(site.file)} ({site.qualname or site.function})\n"
             f"-{line}\n" + "".join(f"+{pad}{c}   # the check stays; its message only outside torch.compile\n"
                                    for c in calls))
    name = fn.__name__
    change = Change("rewrite", module.__name__, name, inspect.getsourcefile(fn) or site.file, fn, source=source,
                    holds="every call: the checks run as before; under torch.compile they have no message",
                    every_size=True)

    def apply(ps: PatchSet) -> str:
        names = ps.rebind(fn, new)
        if not names:
            raise NotApplicable(f"no module global names {module.__name__}.{name}")
        return f"{brk.culprit} is called without its message under torch.compile; rebound {', '.join(names)}"

    return Plan("check-without-message", f"{module.__name__}.{name}", where_of(site), patch, apply, change=change)


def _example(n: Names) -> str:
    if not n.line.strip():
        return ""
    return (f"# before ({n.where})\n{n.line.strip()}\n\n# after: the message only outside torch.compile\n"
            f"{n.culprit or 'torch._check'}(cond) if torch.compiler.is_compiling() else "
            f"{n.culprit or 'torch._check'}(cond, message)")


RECIPE = Recipe(
    "check-without-message",
    Advice(
        "Pass the message of {call} only outside torch.compile, in {function}",
        "Dynamo keeps a torch check in the graph, but must turn its message function into one it can call "
        "later, and cannot when the function's closure holds a value that is not a constant. Keep the check; "
        "pass the message only outside torch.compile.",
        "torch._check(n == m) if torch.compiler.is_compiling() else torch._check(n == m, lambda: f\"{n} != {m}\")",
        unnamed_call="the torch check",
        example=_example,
    ),
    plan=plan,
)
