"""A module-level function rewritten at one line: the change a person makes
at a call site, made by the doctor.

Some fixes belong at the call that breaks (drop a message Dynamo cannot
trace, say), not inside the function it calls. ``rewrite`` takes the
function that holds the call from its module (a module global, no closure,
no decorator), parses its source, lets an ``edit`` change the calls that
span the line, and returns the new function's source and the new function.
The new function has the old one's globals, defaults, name and line numbers
(its code is compiled at the original file's lines, so what Dynamo reports
about it points where it did); its annotations are dropped, since a module
with postponed annotations may name types that only exist for a type
checker. In this process the doctor rebinds every module global that named
the old function; a written patch (fix/emit.py, change kind ``rewrite``)
defines the new source in the function's module, where the patch package
points the old function's other names at it."""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from typing import Callable

from graphbreak_doctor.model import Frame
from graphbreak_doctor.recipes.common import resolve
from graphbreak_doctor.recipes.recipe import NotApplicable


def function_at(site: Frame | None) -> tuple[types.ModuleType, types.FunctionType]:
    """(module, function) of the module-level function running at ``site``."""
    found = resolve(site) if site is not None else None
    if found is None or not isinstance(found[1], types.FunctionType):
        raise NotApplicable("the line is not in a module-level function (a method or a nested function is not "
                            "rewritten)")
    module, fn = found
    if fn.__closure__:
        raise NotApplicable(f"{fn.__qualname__} has a closure: its source alone does not make it again")
    return module, fn


def rewrite(fn: types.FunctionType, line: int,
            edit: Callable[[ast.Call], ast.expr | None]) -> tuple[str, types.FunctionType]:
    """(source, function): ``fn`` with each call whose lines span ``line``
    of its file replaced by what ``edit`` makes of it (None: left as it is)."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError) as e:
        raise NotApplicable(f"the source of {fn.__qualname__} cannot be read: {e}") from e
    node = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name != fn.__name__:
        raise NotApplicable(f"the source of {fn.__qualname__} is not one function definition")
    if node.decorator_list:
        raise NotApplicable(f"{fn.__qualname__} is decorated: the module global is not the function itself")
    at = line - fn.__code__.co_firstlineno + 1
    changed: list[ast.expr] = []

    class _Edit(ast.NodeTransformer):
        def visit_Call(self, call: ast.Call) -> ast.AST:
            self.generic_visit(call)
            if not call.lineno <= at <= (call.end_lineno or call.lineno):
                return call
            made = edit(call)
            if made is None:
                return call
            changed.append(made)
            return ast.copy_location(made, call)

    node = _Edit().visit(node)
    if not changed:
        raise NotApplicable(f"no call at line {line} of {fn.__qualname__} to change")
    node.returns = None
    for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                node.args.vararg, node.args.kwarg]:
        if arg is not None:
            arg.annotation = None
    ast.fix_missing_locations(tree)
    text = ast.unparse(node) + "\n"
    ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
    code = compile(tree, fn.__code__.co_filename, "exec")
    body = next(c for c in code.co_consts if isinstance(c, types.CodeType) and c.co_name == fn.__name__)
    new = types.FunctionType(body, fn.__globals__, fn.__name__, fn.__defaults__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__, new.__module__, new.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    return text, new


def dotted(node: ast.expr) -> str:
    """``a.b.c`` for an attribute chain on a name, "" for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([node.id, *reversed(parts)])


__all__ = ["dotted", "function_at", "rewrite"]
