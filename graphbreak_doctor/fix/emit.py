"""A kept change as source: the block of Python appended to the module that
defines the function it replaces.

The same text serves both forms of a written patch (fix/write.py): the
unified diff appends it to the installed file, and the standalone package
runs it in the module's namespace right after the module is imported. At the
end of the module's import the global ``function`` is the replacement, so
every module that imports the name afterwards gets it.

The blocks use torch and the patched library only. Per kind (recipes.Change):

- ``memo``: the function answers the recorded calls from a table filled before
  capture -- at the start of each torch.compile, through Dynamo's compile-start
  callback, so the warm-up runs in the process that compiles, after whatever
  set-up that process made (a torch without the callback: at import).
  ``torch._dynamo.reset()`` empties the callbacks (a test suite between cases,
  a server that compiles again): the block wraps that emptying, on the
  callback handler itself, so the warm-up joins again whoever calls it;
- ``custom_op``: the function becomes ``torch.ops.graphbreak_doctor_patch.<op>``
  with the catalogue's fake (its source pasted) or the shapes a warm-up saw;
- ``registered_op``: under torch.compile the function calls the library's own
  op; outside it, the original (which the op's implementation calls by name);
- ``outside_compile``: a function torch forbids in a graph does nothing under
  torch.compile and runs as before outside it (recipes/outside_compile.py);
- ``config``: an option of ``torch._dynamo.config`` set right after that module
  is imported (recipes/config_switch.py); it replaces no function;
- ``rewrite``: the function's own source with the change made at the line
  that broke (recipes/rewrite.py), defined in its module in its place.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from graphbreak_doctor.recipes import adapters
from graphbreak_doctor.recipes.recipe import Change

# The namespace of the ops a written patch registers (the fix ladder's own
# temporary ops use another: patching.OP_NAMESPACE).
NAMESPACE = "graphbreak_doctor_patch"


class NotWritable(Exception):
    """The change cannot be written as source; the message says why."""


def block(change: Change, step: int, recipe: str, removes: str) -> str:
    """The source appended to ``change.module`` (ends with a newline)."""
    if not change.function.isidentifier() or (change.owner and not change.owner.isidentifier()):
        raise NotWritable(f"{change.owner + '.' if change.owner else ''}{change.function!r} is not a plain name")
    if change.owner and (change.kind != "memo" or change.member not in ("classmethod", "staticmethod")):
        raise NotWritable(f"{change.owner}.{change.function}: only a memo of a classmethod or staticmethod is written")
    body = {"memo": _memo, "custom_op": _custom_op, "registered_op": _registered_op,
            "outside_compile": _outside_compile, "config": _config,
            "rewrite": _rewrite}[change.kind](change)
    # A class's method is replaced on its class (a global of the module), as a method of its kind.
    target = f"{change.owner}.{change.function}" if change.owner else change.function
    factory = f"_graphbreak_doctor_{step}_{target.replace('.', '_')}"
    head = [
        f"# graphbreak-doctor patch, change {step} ({recipe}): {target} -- removes {removes}",
        f"# Holds for {change.holds}.",
        f"def {factory}():",
    ]
    made = f"{change.member}({change.function})" if change.owner else change.function
    tail = [f"    return {made}", "", "", f"{target} = {factory}()", f"del {factory}"]
    if change.kind == "config":  # the option is set through the module object: no global is replaced
        tail = ["", "", f"{factory}()", f"del {factory}"]
    return "\n".join(head + [textwrap.indent(line, "    ") if line else "" for line in body] + tail) + "\n"


def _literal(value: Any, what: str) -> str:
    text = repr(value)
    try:
        same = ast.literal_eval(text) == value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        same = False
    if not same:
        raise NotWritable(f"{what} cannot be written as Python literals ({text[:80]})")
    return text


def _wrapped(change: Change) -> list[str]:
    if change.owner:  # the function under the class's classmethod or staticmethod
        return ["import functools", "import sys", f"_original = vars({change.owner})[{change.function!r}].__func__"]
    return ["import functools", "import sys", f"_original = globals()[{change.function!r}]"]


def _memo(change: Change) -> list[str]:
    name = change.function
    # A classmethod takes its class first; the table's keys leave it out.
    cls, warm_cls = ("cls, ", f"{change.owner}, ") if change.member == "classmethod" else ("", "")
    lines = _wrapped(change) + [
        "_table = {}",
        "_failed = set()",
        f"_keys = {_literal(change.keys, 'the warm-up calls')}",
        "",
        f"def {name}({cls}*args, **kwargs):",
        "    key = (args, tuple(kwargs.items()))",
        "    if key in _table:   # no work while tracing",
        "        return _table[key]",
        f"    return _original({cls}*args, **kwargs)",
        "",
        f"functools.update_wrapper({name}, _original)",
        "",
        "def _warm_up(*_ignored):",
        "    for key in _keys:",
        "        if key in _table or key in _failed:",
        "            continue",
        "        args, kwargs = key",
        "        try:",
        f"            _table[key] = _original({warm_cls}*args, **dict(kwargs))",
        "        except Exception as e:",
        "            _failed.add(key)",
        "            sys.stderr.write(f\"graphbreak_doctor_patch: warming up " + name + "{args!r} failed \"",
        "                             f\"({type(e).__name__}: {e}); that call runs as before\\n\")",
        "",
    ]
    pre = change.precomputed
    if pre is not None:
        lines += pre.imports.splitlines() + [f"if {pre.available}:", f"    _table[((), ())] = {pre.expression}", ""]
    lines += [
        "try:",
        "    from torch._dynamo import callback_handler",
        "except ImportError:  # a torch without compile-start callbacks: warm up now",
        "    _warm_up()",
        "else:",
        "    callback_handler.register_start_callback(_warm_up)",
        "    # torch._dynamo.reset() empties the compile-start callbacks: join them again each time.",
        "    _clear = callback_handler.clear",
        "",
        "    def _clear_and_rejoin(*args, **kwargs):",
        "        result = _clear(*args, **kwargs)",
        "        callback_handler.register_start_callback(_warm_up)",
        "        return result",
        "",
        "    callback_handler.clear = _clear_and_rejoin",
    ]
    return lines


def _outside_compile(change: Change) -> list[str]:
    from graphbreak_doctor.recipes import outside_compile

    return [
        "import functools",
        "from typing import Any, Callable",
        f"_original = globals()[{change.function!r}]",
        "",
        *_pasted(outside_compile.outside_compile),
        f"{change.function} = outside_compile(_original)",
    ]


def _rewrite(change: Change) -> list[str]:
    if not change.source.startswith(f"def {change.function}("):
        raise NotWritable(f"the rewritten source is not a definition of {change.function}")
    return change.source.splitlines()


def _config(change: Change) -> list[str]:
    if not change.settings:
        raise NotWritable(f"no statements set {change.module}.{change.function}")
    # Through the module object: torch's config module keeps its options
    # behind attribute access, not in its globals. A block in another module
    # (the one that defines what the option names) imports it first.
    if change.module == "torch._dynamo.config":
        return ["import sys", "_config = sys.modules[__name__]", *change.settings]
    return ["import sys", "import torch._dynamo.config", "_config = sys.modules['torch._dynamo.config']",
            *change.settings]


def _forwarding(change: Change, *, eager_original: bool) -> list[str]:
    inner = getattr(change.original, "_torchdynamo_orig_callable", change.original)
    sig = adapters.signature(inner)
    if sig is None:
        raise NotWritable(f"the signature of {change.function} cannot be read")
    lines = adapters.forwarding_lines(sig, change.passed, set(change.accepted), change.function,
                                      eager_original=eager_original)
    if lines is None:
        raise NotWritable(f"{change.function} takes *args/**kwargs or required arguments the op lacks")
    return [
        "_inner = getattr(_original, '_torchdynamo_orig_callable', _original)",
        "_params = inspect.signature(_inner).parameters.values()",
        "_d = {p.name: p.default for p in _params if p.default is not inspect.Parameter.empty}",
        f"_passed = {_literal(list(change.passed), 'the parameters')}",
        f"_accepted = {_literal(dict(change.accepted), 'the accepted values')}",
        "_acc = {p.name: tuple(_accepted.get(p.name, ())) + ((_d[p.name],) if p.name in _d else ())",
        "        for p in _params if p.name not in _passed}",
        "",
        *lines,
        "",
        f"functools.update_wrapper({change.function}, _original)",
    ]


def _registered_op(change: Change) -> list[str]:
    package, op = change.op.split(".", 1)
    return _wrapped(change) + [
        "import inspect",
        "import torch",
        f"_target = getattr(getattr(torch.ops, {package!r}), {op!r})",
        "_is_compiling = torch.compiler.is_compiling",
    ] + _forwarding(change, eager_original=True)


def _custom_op(change: Change) -> list[str]:
    from graphbreak_doctor.recipes import custom_op  # the ladder's own helpers, pasted

    lines = _wrapped(change) + ["import inspect", "from typing import Any", "", "import torch", ""]
    lines += (_catalogue_fake(change.fake) if change.fake is not None else _rule_fake(change.rule)
              if change.rule is not None else _table_fake(change.table or {}))
    lines += [
        "",
        *_pasted(custom_op._unalias),
        "def _impl(*args):   # a custom op's outputs may not alias its inputs",
        "    inputs = [a for a in args if isinstance(a, torch.Tensor)]",
        "    return _unalias(_inner(**dict(zip(_passed, args))), inputs)",
        "",
        f"_namespace = getattr(torch.ops, {NAMESPACE!r})",
        f"if not hasattr(_namespace, {change.op!r}):",
        f"    _op = torch.library.custom_op({f'{NAMESPACE}::{change.op}'!r}, _impl, mutates_args=(),",
        f"                                  schema={change.schema!r})",
        "    _op.register_fake(_fake)",
        f"_target = getattr(_namespace, {change.op!r})",
    ]
    return lines + _forwarding(change, eager_original=False)


def _pasted(*fns: Any) -> list[str]:
    """Functions' own source lines, each followed by a blank line."""
    return [line for fn in fns for line in _source(fn).splitlines() + [""]]


def _catalogue_fake(fake: Any) -> list[str]:
    """The catalogue's fake and the helpers it calls, pasted as they are."""
    return [
        "def _fakes():",
        "    from typing import Any",
        "    import torch",
        "",
        *[textwrap.indent(line, "    ") if line else "" for line in _pasted(*_with_helpers(fake))],
        f"    return {fake.__name__}",
        "",
        "_fake_fn = _fakes()",
        "",
        "def _fake(*args):",
        "    return _fake_fn(**dict(zip(_passed, args)))",
    ]


def _with_helpers(fn: Any) -> list[Any]:
    """``fn`` and the functions of its own module it calls, each once."""
    found, todo = [], [fn]
    while todo:
        f = todo.pop()
        if f in found:
            continue
        found.append(f)
        for name in f.__code__.co_names:
            g = f.__globals__.get(name)
            if inspect.isfunction(g) and g.__module__ == fn.__module__:
                todo.append(g)
    return list(reversed(found))


def _source(fn: Any) -> str:
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise NotWritable(f"the source of {fn.__qualname__} cannot be read: {e}") from e


def _rule_fake(rule: Any) -> list[str]:
    """An inferred fake as a shape rule, as literals, made with the ladder's
    own maker (recipes/shape_rule.py)."""
    from graphbreak_doctor.recipes import shape_rule

    return [
        f"_rule = {_literal(rule, 'the shape rule')}",
        f"UNBACKED = {shape_rule.UNBACKED!r}",
        "",
        *_pasted(shape_rule.make),
        "def _fake(*args):",
        "    return make(_rule, dict(zip(_passed, args)))",
    ]


def _table_fake(table: dict) -> list[str]:
    """An inferred fake: output metadata by the inputs' shapes, as literals,
    read with the ladder's own key and maker (recipes/custom_op.py)."""
    from graphbreak_doctor.recipes import custom_op

    return [
        f"_shapes = {_literal(table, 'the warm-up shapes')}",
        "",
        *_pasted(custom_op._signature_key, custom_op._make),
        "def _fake(*args):",
        "    meta = _shapes.get(_signature_key(dict(zip(_passed, args))))",
        "    if meta is None:",
        "        raise RuntimeError('graphbreak_doctor_patch: no warm-up call had these input shapes; '",
        "                           'the fake inferred from them cannot answer')",
        "    device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device('cpu'))",
        "    return _make(meta, device)",
    ]
