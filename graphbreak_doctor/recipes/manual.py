"""Advice a person has to carry out: the change is in the traced code's own
logic (a branch on tensor values, a log call, a builtin object, a context
manager), so the fix ladder cannot make it for them. Each example is cut
from the break's own lines (recipes/examples.py)."""

from __future__ import annotations

import re

from graphbreak_doctor.recipes.examples import (
    before_after,
    call_expression,
    constant_name,
    if_condition,
    indent_of,
    short_name,
    with_parts,
)
from graphbreak_doctor.recipes.recipe import Advice, Names, Recipe


def _precompute_example(n: Names) -> str:
    line = n.line
    if line.strip().startswith("class "):
        return before_after(n.where, [line], "define the class once, at module level, and have the traced "
                            "function use it", [line.strip(), "    ..."])
    expr = call_expression(line, short_name(n.culprit))
    if not expr:
        return ""
    const = constant_name(n.culprit)
    return before_after(n.where, [line], f"{expr} built once, outside the compiled region (at import, in "
                        "__init__ or a warm-up), and reused", [f"{const} = {expr}", line.replace(expr, const, 1)])


# A dict's view as a builtin's first argument: what to pass instead (the
# dict itself iterates its keys; a list holds the values or items).
_VIEWS = re.compile(r"\(\s*(?P<dict>[\w.\[\]'\"]+)\.(?P<view>keys|values|items)\(\)")


def _builtin_arguments_example(n: Names) -> str:
    expr = call_expression(n.line, short_name(n.culprit))
    m = _VIEWS.search(expr) if expr else None
    if m is None or m.start() != len(expr.split("(", 1)[0]):
        return ""
    table, view = m.group("dict"), m.group("view")
    argument = table if view == "keys" else f"list({table}.{view}())"
    rewritten = f"{expr[:m.start()]}({argument}{expr[m.end():]}"
    return before_after(n.where, [n.line], "the same call over an argument Dynamo's handler takes (the view "
                        "becomes the dict itself or a list)", [n.line.replace(expr, rewritten, 1)])


def _enter_outside_example(n: Names) -> str:
    expr, alias = with_parts(n.line)
    if not expr:
        return ""
    ind = indent_of(n.line)
    return before_after(
        n.where, [n.line],
        "enter it around the compiled call (outside torch.compile), or skip it while Dynamo traces",
        [f"{ind}with (contextlib.nullcontext() if torch.compiler.is_compiling() else {expr}){alias}:"])


def _static_control_flow_example(n: Names) -> str:
    line = n.line
    cond = if_condition(line)
    ind = indent_of(line)
    if cond:
        tensor_cond = cond.replace(".item()", "")
        return before_after(
            n.where, [line], "keep the condition a tensor and compute both branches (or torch.cond for whole "
            "functions); where the branch only skips a no-op update, drop the test",
            [f"{ind}cond = {tensor_cond}", f"{ind}result = torch.where(cond, <value if true>, <value if false>)"])
    if ".item()" in line or ".tolist()" in line:
        return before_after(
            n.where, [line], "keep the value a tensor (or set torch._dynamo.config.capture_scalar_outputs = True "
            "and torch._check what the code assumes about it)",
            [line.replace(".item()", "").replace(".tolist()", "")])
    return ""


def _dynamic_size_example(n: Names) -> str:
    line = n.line
    cond = if_condition(line)
    if not cond:
        return ""
    ind = indent_of(line)
    return before_after(
        n.where, [line], "do not branch on the dynamic size -- or, if the code needs it static, let Dynamo "
        "specialize it (maybe_mark_dynamic instead of mark_dynamic)",
        [f"{ind}torch._check({cond})   # when it always holds: an assumption, not a branch",
         "# or, where the input is marked:", "torch._dynamo.maybe_mark_dynamic(x, 0)"])


def _guard_logging_example(n: Names) -> str:
    if not n.line.strip():
        return ""
    ind = indent_of(n.line)
    return before_after(n.where, [n.line], "skip it while Dynamo traces",
                        [f"{ind}if not torch.compiler.is_compiling():", f"{ind}    {n.line.strip()}"])


RECIPES = (
    Recipe(
        "precompute-builtin",
        Advice(
            "Move {call} out of {function}, or precompute its value",
            "Dynamo cannot model this builtin or stdlib object. Build it once outside the traced region "
            "(at import or in __init__) and pass the result in, or use a plain tuple/dict instead.",
            "# before\n"
            "def {function}(...):\n"
            "    cfg = types.SimpleNamespace(a=1)\n\n"
            "# after\n"
            "_CFG = types.SimpleNamespace(a=1)   # built once, outside the compiled region\n"
            "def {function}(...):\n"
            "    cfg = _CFG",
            example=_precompute_example,
        ),
    ),
    Recipe(
        "enter-outside",
        Advice(
            "Enter {call} outside the compiled region, or skip it while compiling",
            "Dynamo cannot enter this context manager: it does not model locks, memory-pool switches or "
            "generator-based context managers. Enter it around the compiled call (outside torch.compile), "
            "or skip it under torch.compiler.is_compiling() where the traced code does not need it.",
            "# before\n"
            "with self._lock:\n"
            "    ...\n\n"
            "# after\n"
            "with (contextlib.nullcontext() if torch.compiler.is_compiling() else self._lock):\n"
            "    ...",
            unnamed_call="the context manager",
            example=_enter_outside_example,
        ),
    ),
    Recipe(
        "static-control-flow",
        Advice(
            "Remove the dependence on tensor values in {function} (torch.cond, torch.where, static shapes)",
            "The branch or output shape depends on tensor data, which Dynamo does not know while tracing. "
            "Express the branch with torch.where / torch.cond, keep shapes static, or enable "
            "torch._dynamo.config.capture_scalar_outputs / capture_dynamic_output_shape_ops and add "
            "torch._check for the assumptions.",
            "# before\n"
            "if x.sum() > 0:\n"
            "    y = x + 1\n"
            "else:\n"
            "    y = x - 1\n\n"
            "# after\n"
            "y = torch.where(x.sum() > 0, x + 1, x - 1)",
            example=_static_control_flow_example,
        ),
    ),
    Recipe(
        "keep-size-dynamic",
        Advice(
            "Do not specialize the dynamic size in {function}",
            "The input's size is marked dynamic (torch._dynamo.mark_dynamic, SGLang's token dimension), and "
            "this line makes the graph depend on its value. Branch without it (torch.where, torch._check for "
            "what always holds), or mark it maybe_mark_dynamic so Dynamo may specialize.",
            "# before\n"
            "if x.shape[0] == 8:\n"
            "    ...\n\n"
            "# after\n"
            "torch._check(x.shape[0] == 8)   # or: torch._dynamo.maybe_mark_dynamic(x, 0)",
            example=_dynamic_size_example,
        ),
    ),
    Recipe(
        "guard-logging",
        Advice(
            "Skip {call} in {function} while compiling (torch.compiler.is_compiling())",
            "Logging and printing have side effects Dynamo will not put into a graph. Guard them with "
            "torch.compiler.is_compiling(), or move them outside the compiled region.",
            "if not torch.compiler.is_compiling():\n"
            "    logger.info(\"...\")",
            names="entry",
            example=_guard_logging_example,
        ),
    ),
    Recipe(
        "builtin-arguments",
        Advice(
            "Call {call} in {function} with arguments Dynamo can handle, or compute it before capture",
            "Dynamo models this builtin for some kinds of arguments only, and these are not among them "
            "(its reason names them): min() or max() with key= over a dict's keys() or values() view is one "
            "case; over the dict itself, a list or a tuple it is traced. Pass such an argument, or compute the "
            "value once before capture where it depends only on sizes and constants.",
            "# before\n"
            "best = min(configs.keys(), key=lambda k: abs(k - m))\n\n"
            "# after\n"
            "best = min(configs, key=lambda k: abs(k - m))",
            example=_builtin_arguments_example,
        ),
    ),
    Recipe(
        "read-raw-reason",
        Advice(
            "Read Dynamo's reason and the linked documentation page for this break",
            "No rule recognized this break; the explanation and hints below are Dynamo's own.",
            "# see the documentation page linked from the gb id",
        ),
    ),
)
