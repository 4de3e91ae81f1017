"""wrap-custom-op (and custom-op-instead-of-disable): the library function the
traced code calls becomes a ``torch.library.custom_op`` with a fake -- from the
catalogue (catalogue.py), cross-checked against a warm-up run, or inferred from
the shapes of that warm-up run. The graph keeps the call as one opaque node."""

from __future__ import annotations

import inspect
import re
import typing
from typing import TYPE_CHECKING, Any, Callable

from graphbreak_doctor.model import Break, Frame
from graphbreak_doctor.frames import package_of, short_path
from graphbreak_doctor.patching import OP_NAMESPACE, PatchSet
from graphbreak_doctor.recipes import adapters, shape_rule
from graphbreak_doctor.recipes.common import (
    bound,
    calls_at_sizes,
    disabled_callee,
    has_fake_tensor,
    library_entry,
    qualified,
    replace_call,
    source_of,
    warm_calls,
    where_of,
)
from graphbreak_doctor.recipes.recipe import Advice, Change, FixContext, NotApplicable, Plan, Recipe

if TYPE_CHECKING:  # annotations only: torch and the catalogue load when a fix is made
    import torch

    from graphbreak_doctor.recipes import catalogue


def plan(brk: Break, ctx: FixContext, *, recipe: str = "wrap-custom-op") -> Plan:
    if brk.category == "compiler-disable" and brk.site is not None:
        found = disabled_callee(brk.site)
        if found is None:
            raise NotApplicable("cannot tell which torch.compiler.disable'd function the site calls")
        module, name, disabled = found
        inner = disabled._torchdynamo_orig_callable
        caller, package, fn_name, replace = brk.site, package_of(brk.site.file), name.rsplit(".", 1)[-1], disabled
    else:
        entry = library_entry(brk.stack)
        if entry is None:
            raise NotApplicable("no library function between the traced code and the break")
        caller, frame, module, fn = entry
        package, fn_name, inner, replace = package_of(frame.file), frame.function, fn, fn
    culprit = qualified(module, fn_name)
    if culprit in ctx.wrapped:
        raise NotApplicable(f"{culprit} is already a custom op")
    sig = adapters.signature(inner)
    if sig is None:
        raise NotApplicable(f"cannot read the signature of {culprit}")
    from graphbreak_doctor.recipes import catalogue  # its fakes import torch

    known = catalogue.known(package, fn_name)
    calls = warm_calls(ctx, replace)
    hints = adapters.type_hints(inner)
    schema_args, passed = [], []
    fixed = dict(known.fixed) if known else {}
    for p in sig.parameters.values():
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise NotApplicable(f"{culprit} takes *args/**kwargs: a schema cannot describe it")
        if p.name in fixed:
            continue
        observed = [bound(sig, a, k).get(p.name, p.default) for a, k, _ in calls]
        t = adapters.schema_type(hints.get(p.name, inspect.Parameter.empty), [v for v in observed if v is not inspect.Parameter.empty])
        if t is None:
            if p.default is inspect.Parameter.empty:
                raise NotApplicable(f"{culprit}: parameter {p.name} has no torch schema type")
            continue  # stays at its default
        schema_args.append(f"{t} {p.name}")
        passed.append(p.name)
    table, rule, sized = None, None, False
    if known is not None:
        returns, fake, how = known.returns, _catalogue_fake(known, passed), f"catalogue fake ({known.source})"
        check = _cross_check(known, calls, sig)
        how += f"; {check}" if check else ""
    else:
        if not calls:
            raise NotApplicable(f"{culprit} is not in the catalogue and a warm-up run never called it")
        # The fake answers the shapes it saw: those at each of the server's sizes too.
        try:
            calls = calls + calls_at_sizes(ctx, replace, sorted(set(ctx.sizes)))
            sized = bool(ctx.sizes)
        except NotApplicable:  # the target cannot run at those sizes here: the fake knows its own size
            sized = False
        returns = adapters.return_schema(calls[0][2])
        if returns is None or any(adapters.return_schema(r) != returns for _, _, r in calls):
            raise NotApplicable(f"{culprit} returns something other than tensors")
        rule = shape_rule.infer([(bound(sig, a, k), r) for a, k, r in calls], passed,
                                data_sizes=brk.category == "data-dependent")
        under = f"{len(calls)} warm-up call(s) under {'fake' if has_fake_tensor(calls) else 'real'} tensors"
        if rule is not None:  # it answers any size, a symbolic one too
            fake, how = _rule_fake(rule, passed), f"fake inferred as a shape rule from {under}"
        else:
            table = _shape_table(calls, sig, passed)
            fake, how = _inferred_fake(table, passed), f"fake inferred from {under}"
    op_name = re.sub(r"\W", "_", f"{package}_{fn_name}")
    schema = f"({', '.join(schema_args)}) -> {returns}"
    impl = _impl(inner, passed)
    accepted = {k: v for k, v in fixed.items()}
    fake_src, fake_helper = (([f"return {shape_rule.describe(rule, passed)}   # the shape rule of the warm-up calls"],
                               []) if rule is not None else _fake_source(known, calls, sig))
    patch = op_patch(caller, package, fn_name, [_py_param(a) for a in schema_args], passed, _py_returns(returns),
                     fake_src, fake_helper)

    def apply(ps: PatchSet) -> str:
        op = ps.custom_op(op_name, impl, schema=schema, fake=fake)
        fwd = adapters.Forward(replace, op, passed, accepted)
        adapter = adapters.forwarding_adapter(fwd, sig, f"{culprit} -> torch.ops.{OP_NAMESPACE}.{op_name}")
        if adapter is None:
            raise NotApplicable(f"{culprit}: cannot forward its arguments to a custom op")
        names = ps.rebind(replace, adapter)
        if not names:
            raise NotApplicable(f"no module global refers to {culprit}")
        ctx.wrapped.add(culprit)
        ps.call_on_undo(lambda: ctx.wrapped.discard(culprit))
        return f"torch.ops.{OP_NAMESPACE}.{op_name}{schema}, {how}; rebound {', '.join(names)}"

    sizes = f"at each of the server's {len(set(ctx.sizes))} sizes and " if sized else ""
    holds = ("every input: the catalogue's fake computes the output shapes" if known is not None else
             f"the input shapes that follow the shape rule of the warm-up calls ({sizes}at the target's own "
             "size): each output dimension is one of the inputs', a constant"
             + (" or, where it is none of the inputs', the size the op returns (unbacked: it follows the "
                "values)" if shape_rule.unbacked(rule) else "") if rule is not None else
             f"the input shapes of the warm-up calls ({sizes}at the target's own size) only: the fake inferred "
             "from them answers no other shape")
    every_size = True if known is not None or sized else (False if ctx.sizes else None)
    # A global of the module (not an attribute of one it imports) can be
    # replaced when that module is imported.
    change = None if vars(module).get(fn_name) is not replace else Change(
        "custom_op", module.__name__, fn_name, getattr(module, "__file__", "") or "", replace, op=op_name, schema=schema,
        passed=passed, accepted=accepted, fake=known.fake if known is not None else None, table=table, rule=rule,
        holds=holds,
        every_size=every_size)
    return Plan(recipe, culprit, where_of(caller), patch, apply, change=change)



def op_patch(caller: Frame, package: str, fn_name: str, params: list[str], passed: list[str], returns: str,
             fake_src: list[str], fake_helper: list[str], note: str = "") -> str:
    """The change that makes ``package.fn_name`` one custom op where ``caller``
    calls it: the op, its fake, and the caller's line calling the op."""
    call = source_of(caller, f"    {fn_name}(...)")
    return (
        f"--- {short_path(caller.file)} ({caller.qualname})\n"
        + (f"# {note}\n" if note else "")
        + f"+@torch.library.custom_op(\"mylib::{fn_name}\", mutates_args=())\n"
        f"+def {fn_name}_op({', '.join(params)}) -> {returns}:\n"
        f"+    return {package}.{fn_name}({', '.join(f'{n}={n}' for n in passed)})\n"
        f"+\n+@{fn_name}_op.register_fake\n+def _({', '.join(passed)}):\n"
        + "".join(f"+    {line}\n" for line in fake_src)
        + f"-{call}\n"
        f"+{replace_call(call, fn_name, fn_name + '_op')}\n"
        + "".join(f"+{line}\n" for line in fake_helper)
    )


def signature_patch(caller: Frame, package: str, fn_name: str, fn: Callable) -> str:
    """:func:`op_patch` for advice, without a warm-up run: the op's parameters
    and types are ``fn``'s own signature and annotations; parameters a schema
    cannot carry keep their defaults. "" when the signature cannot be read."""
    sig = adapters.signature(fn)
    if sig is None:
        return ""
    hints = adapters.type_hints(fn)
    from graphbreak_doctor.recipes import catalogue  # its fakes import torch

    known = catalogue.known(package, fn_name)
    fixed = dict(known.fixed) if known else {}
    params, passed, left = [], [], []
    for p in sig.parameters.values():
        default = [] if p.default is inspect.Parameter.empty else [p.default]
        t = None if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD) or p.name in fixed \
            else adapters.schema_type(hints.get(p.name, inspect.Parameter.empty), default)
        if t is None:
            left.append(p.name)
            continue
        params.append(_py_param(f"{t} {p.name}") + (f" = {_py_default(p.default)}" if default else ""))
        passed.append(p.name)
    returns = _annotated_returns(hints.get("return"), known)
    if known is not None:
        fake_src, fake_helper = _fake_source(known, [], sig)
    else:
        first = next((n for n, q in zip(passed, params) if "torch.Tensor" in q), "")
        fake_src = [f"return torch.empty_like({first})   # the shape and dtype {fn_name} returns" if first
                    else f"...   # return empty tensors of the shapes and dtypes {fn_name} returns"]
        fake_helper = []
    note = f"{package}.{fn_name} as one opaque op, with {fn_name}'s own signature" + (
        f"; not in the op (they keep their defaults): {', '.join(left)}" if left else "")
    return op_patch(caller, package, fn_name, params, passed, returns, fake_src, fake_helper, note)


def _py_default(value: Any) -> str:
    import torch

    return repr(value) if not isinstance(value, torch.dtype) else str(value)


def _annotated_returns(annotation: Any, known: catalogue.KnownFunction | None) -> str:
    import torch

    if known is not None:
        return _py_returns(known.returns)
    if annotation is torch.Tensor:
        return "torch.Tensor"
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is tuple and args and all(a is torch.Tensor for a in args):
        return f"tuple[{', '.join(['torch.Tensor'] * len(args))}]"
    return "torch.Tensor"


def _impl(fn: Callable, passed: list[str]) -> Callable:
    import torch

    def impl(*args: Any) -> Any:
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        out = fn(**dict(zip(passed, args)))
        # A custom op's outputs may not alias its inputs.
        return _unalias(out, inputs)

    return impl



def _unalias(out: Any, inputs: list[torch.Tensor]) -> Any:
    import torch

    if isinstance(out, tuple):
        return tuple(_unalias(o, inputs) for o in out)
    if isinstance(out, torch.Tensor):
        try:
            ptr = out.untyped_storage().data_ptr()
            if any(i.untyped_storage().data_ptr() == ptr for i in inputs):
                return out.clone()
        except (RuntimeError, NotImplementedError):
            pass
    return out



def _catalogue_fake(known: catalogue.KnownFunction, passed: list[str]) -> Callable:
    def fake(*args: Any) -> Any:
        return known.fake(**dict(zip(passed, args)))

    return fake



def _signature_key(values: dict) -> tuple:
    import torch

    key = []
    for name, v in sorted(values.items()):
        if isinstance(v, torch.Tensor):
            key.append((name, tuple(int(s) for s in v.shape), str(v.dtype)))
        else:
            key.append((name, repr(v)))
    return tuple(key)



def _meta(out: Any) -> Any:
    if isinstance(out, tuple):
        return ("tuple", tuple(_meta(o) for o in out))
    # The dtype by name: the table is plain literals (a written patch holds it as text).
    return ("tensor", tuple(int(s) for s in out.shape), tuple(int(s) for s in out.stride()),
            str(out.dtype).removeprefix("torch."))



def _make(meta: Any, device: torch.device) -> Any:
    import torch

    if meta[0] == "tuple":
        return tuple(_make(m, device) for m in meta[1])
    _, shape, stride, dtype = meta
    return torch.empty_strided(shape, stride, dtype=getattr(torch, dtype), device=device)



def _shape_table(calls: list, sig: inspect.Signature, passed: list[str]) -> dict:
    """What an inferred fake answers: output metadata by the op's inputs' shapes."""
    table = {}
    for args, kwargs, result in calls:
        values = bound(sig, args, kwargs)
        table[_signature_key({k: values.get(k) for k in passed})] = _meta(result)
    return table


def _inferred_fake(table: dict, passed: list[str]) -> Callable:
    import torch

    def fake(*args: Any) -> Any:
        meta = table.get(_signature_key(dict(zip(passed, args))))
        if meta is None:
            raise RuntimeError("graphbreak-doctor: no warm-up call had these input shapes; the inferred fake cannot answer")
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        return _make(meta, device)

    return fake



def _rule_fake(rule: Any, passed: list[str]) -> Callable:
    def fake(*args: Any) -> Any:
        return shape_rule.make(rule, dict(zip(passed, args)))

    return fake


def _cross_check(known: catalogue.KnownFunction, calls: list, sig: inspect.Signature) -> str:
    """Does the catalogue fake give the shapes the function gave in the warm-up?"""
    if not calls:
        return ""
    mismatches = 0
    for args, kwargs, result in calls:
        values = bound(sig, args, kwargs)
        try:
            fake = known.fake(**values)
        except Exception as e:  # a catalogue bug must show, not crash the ladder
            return f"catalogue fake raised {type(e).__name__}: {e}"
        if _shapes(fake) != _shapes(result):
            mismatches += 1
    n = len(calls)
    return f"matches the {n} warm-up call(s)" if not mismatches else f"DIFFERS from {mismatches} of {n} warm-up call(s)"



def _shapes(out: Any) -> Any:
    import torch

    if isinstance(out, (tuple, list)):
        return tuple(_shapes(o) for o in out)
    if isinstance(out, torch.Tensor):
        return (tuple(int(s) for s in out.shape), out.dtype)
    return out



def _fake_source(known: catalogue.KnownFunction | None, calls: list, sig: inspect.Signature) -> tuple[list[str], list[str]]:
    """(lines of the fake's body, top-level helper lines) for the patch text."""
    if known is not None:
        # The catalogue's own function, pasted: what runs here is what is shown.
        try:
            helper = inspect.getsource(known.fake).splitlines()
        except (OSError, TypeError):
            helper = []
        params = [p for p in inspect.signature(known.fake).parameters if p != "_ignored"]
        return [f"return {known.fake.__name__}({', '.join(params)})   # {known.source}"], helper
    if calls:
        return [f"return {_describe_outputs(calls[0][2])}   # shapes of the eager run"], []
    return ["..."], []



def _describe_outputs(out: Any) -> str:
    if isinstance(out, tuple):
        return ", ".join(_describe_outputs(o) for o in out)
    return f"x.new_empty({tuple(int(s) for s in out.shape)}, dtype={out.dtype})"



def _py_param(schema_arg: str) -> str:
    t, name = schema_arg.rsplit(" ", 1)
    optional = t.endswith("?")
    base = {"Tensor": "torch.Tensor", "ScalarType": "torch.dtype", "Device": "torch.device",
            "Tensor[]": "list[torch.Tensor]"}.get(t.rstrip("?"), t.rstrip("?"))
    return f"{name}: {base} | None" if optional else f"{name}: {base}"



def _py_returns(returns: str) -> str:
    if returns == "Tensor":
        return "torch.Tensor"
    n = returns.count("Tensor")
    return f"tuple[{', '.join(['torch.Tensor'] * n)}]"



RECIPES = (
    Recipe(
        "wrap-custom-op",
        Advice(
            "Make {call} one opaque op where {function} calls it: a torch.library.custom_op with register_fake",
            "Dynamo cannot trace what {call} does ({why}). As a custom op whose fake implementation returns "
            "outputs of the right shape and dtype, the call stays in the graph as a single node and Dynamo "
            "never looks inside.",
            "@torch.library.custom_op(\"mylib::{function}\", mutates_args=(\"out\",))\n"
            "def {function}_op(x: torch.Tensor, out: torch.Tensor) -> None:\n"
            "    kernel(x, out)        # the opaque call\n\n"
            "@{function}_op.register_fake\n"
            "def _(x, out):\n"
            "    return None",
            unnamed_call="the compiled call",
        ),
        plan,
    ),
    Recipe(
        "custom-op-instead-of-disable",
        Advice(
            "Register {call} as a torch.library.custom_op instead of using torch.compiler.disable",
            "torch.compiler.disable makes Dynamo break the graph at the call. Under fullgraph=True (a server's "
            "compile: vLLM's, SGLang's piecewise runner) that is an error, not a fallback. A custom op with a "
            "fake (meta) implementation stays in the graph as one opaque node.",
            "@torch.library.custom_op(\"mylib::{function}\", mutates_args=())\n"
            "def {function}(x: torch.Tensor) -> torch.Tensor:\n"
            "    return original_{function}(x)\n\n"
            "@{function}.register_fake\n"
            "def _(x):\n"
            "    return torch.empty_like(x)",
        ),
        lambda brk, ctx: plan(brk, ctx, recipe="custom-op-instead-of-disable"),
    ),
)
