"""Fix recipes that can be applied in-process and checked by re-tracing.

Which recipes a break gets, in the order they are tried, is a table
(:data:`CHAINS`) keyed by the break's category. A recipe looks at the break's
stack, finds the function to change, and returns a :class:`Plan`: the code
change a user would make (``patch``, ``where``) and ``apply``, which makes the
equivalent change in this process inside a :class:`PatchSet`.

- use-registered-op: the library registers a torch op whose implementation
  calls the very wrapper the traced code calls (flashinfer 0.7.4:
  ``torch.ops.flashinfer.fp4_quantize`` -> ``fp4_quantize``); call the op.
- hoist-subprocess / hoist-filesystem / hoist-call: the innermost
  module-level function on the break's stack that neither takes nor returns
  tensors is run once, eagerly, before capture (a warm-up); while tracing
  it answers from that warm-up.
- compiler-disable: ``torch.compiler.disable`` on the culprit -- tried once
  per ladder, only to show that fullgraph rejects it.
- wrap-custom-op: the library function the traced code calls becomes a
  ``torch.library.custom_op`` with a fake (from catalogue.py, or inferred
  from the warm-up run under fake tensors).
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from graphbreak_doctor.analysis.fixes import registered_op_for
from graphbreak_doctor.analysis.frames import INFRASTRUCTURE, package_of, short_path
from graphbreak_doctor.findings import Break, Frame
from graphbreak_doctor.fix import adapters, catalogue
from graphbreak_doctor.fix.patches import PatchSet

# Recipes tried for a break, first applicable first. use-registered-op comes
# first everywhere: when the library already offers the op, nothing else is
# the right change. compiler-disable is the trap users reach for; it is tried
# once per ladder (see FixContext.trap_done) right before the custom op.
CHAINS: dict[str, tuple[str, ...]] = {
    "subprocess": ("use-registered-op", "hoist-subprocess", "compiler-disable", "wrap-custom-op"),
    "filesystem": ("use-registered-op", "hoist-filesystem", "compiler-disable", "wrap-custom-op"),
    "unsupported-builtin": ("use-registered-op", "hoist-call", "compiler-disable", "wrap-custom-op"),
    "opaque-call": ("use-registered-op", "hoist-call", "compiler-disable", "wrap-custom-op"),
    "compiler-disable": ("wrap-custom-op",),
    # In the traced code itself these need a human (torch.cond, a logging
    # guard); inside a library function the whole call can become one op.
    "logging": ("use-registered-op", "wrap-custom-op"),
    "data-dependent": ("use-registered-op", "wrap-custom-op"),
    "other": ("use-registered-op", "compiler-disable", "wrap-custom-op"),
}

# Values a hoisted probe can be computed from without running it at all.
PRECOMPUTED: dict[tuple[str, str], tuple[str, Callable[[], Any]]] = {
    ("flashinfer", "get_cuda_version"): (
        "Version(torch.version.cuda)",
        lambda: __import__("packaging.version").version.Version(torch.version.cuda) if torch.version.cuda else None,
    ),
}


class NotApplicable(Exception):
    """This recipe does not fit this break; the message says why."""


@dataclass
class Plan:
    recipe: str
    culprit: str  # "module.function" the change is about
    where: str  # "file:function" of the code to change
    patch: str  # the change a user would make
    apply: Callable[[PatchSet], str]  # makes it in-process; returns a detail line
    note: str = ""


@dataclass
class FixContext:
    """What recipes need from the ladder: the target to warm up, and memory."""

    warm_up: Callable[[], None]  # runs the target once, eagerly
    trap_done: str = ""  # detail of the rejected compiler-disable rung, once tried
    wrapped: set[str] = field(default_factory=set)


# ------------------------------------------------------------------- frames


def where_of(frame: Frame) -> str:
    return f"{short_path(frame.file)}:{frame.qualname or frame.function}"


def module_of_file(path: str) -> types.ModuleType | None:
    real = os.path.realpath(path)
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and os.path.realpath(file) == real:
            return module
    return None


def _code_of(obj: Any) -> types.CodeType | None:
    inner = getattr(obj, "_torchdynamo_orig_callable", None) or obj
    try:
        inner = inspect.unwrap(inner)
    except ValueError:
        return None
    return getattr(inner, "__code__", None)


def resolve(frame: Frame) -> tuple[types.ModuleType, Any] | None:
    """(module, global) of the module-level function a frame is running."""
    if "." in (frame.qualname or frame.function) or not frame.function.isidentifier():
        return None
    module = module_of_file(frame.file)
    if module is None:
        return None
    obj = vars(module).get(frame.function)
    code = _code_of(obj)
    if code is None or os.path.realpath(code.co_filename) != os.path.realpath(frame.file):
        return None
    return module, obj


def library_entry(stack: list[Frame]) -> tuple[Frame, Frame, types.ModuleType, Any] | None:
    """(caller, entry, module, function): the first library function the
    traced code calls that is a module global (``flashinfer.fp4_quantize``),
    with the traced code's frame that calls it."""
    if not stack:
        return None
    own = package_of(stack[0].file)
    caller = stack[0]
    for frame in stack[1:]:
        package = package_of(frame.file)
        if package == own:
            caller = frame
            continue
        if package in INFRASTRUCTURE:
            continue
        found = resolve(frame)
        if found is not None:
            return caller, frame, found[0], found[1]
    return None


def disabled_callee(site: Frame) -> tuple[types.ModuleType, str, Any] | None:
    """The torch.compiler.disable'd function the site's line calls."""
    module = module_of_file(site.file)
    if module is None:
        return None
    for name in re.findall(r"([A-Za-z_][\w.]*)\s*\(", site.code or ""):
        obj: Any = module
        for part in name.split("."):
            obj = getattr(obj, part, None)
        if getattr(obj, "_torchdynamo_disable", False):
            return module, name, obj
    return None


def _has_tensor(value: Any, depth: int = 0) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if depth > 3:
        return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_has_tensor(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(_has_tensor(v, depth + 1) for v in value.values())
    return False


def _qualified(module: types.ModuleType, name: str) -> str:
    return f"{module.__name__}.{name}"


def _warm_calls(ctx: FixContext, obj: Any) -> list[tuple[tuple, dict, Any]]:
    """Run the target once, eagerly, recording every call of ``obj`` made
    through a module global."""
    calls: list = []
    with PatchSet("warm-up") as ps:
        if not ps.rebind(obj, adapters.recorder(obj, calls)):
            return []
        try:
            ctx.warm_up()
        except Exception as e:
            raise NotApplicable(f"a warm-up (eager) run of the target fails here: {type(e).__name__}: {e}") from e
    return calls


def _call_text(name: str, sig: inspect.Signature | None, args: tuple, kwargs: dict) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _def_lines(obj: Any) -> list[str]:
    """The decorator and def lines of a function, as in its source file."""
    try:
        lines, _ = inspect.getsourcelines(inspect.unwrap(obj))
    except (OSError, TypeError, ValueError):
        return [f"def {getattr(obj, '__name__', 'fn')}(...):"]
    out, seen_def = [], False
    for line in lines:
        out.append(line.rstrip("\n"))
        seen_def = seen_def or line.lstrip().startswith(("def ", "async def "))
        if seen_def and line.split("#", 1)[0].rstrip().endswith(":"):
            break
    return out


# ------------------------------------------------------------------ recipes


def use_registered_op(brk: Break, ctx: FixContext) -> Plan:
    found = registered_op_for(brk.stack)
    if found is None:
        raise NotApplicable("no frame of the stack is a function its library registers as a torch op")
    package, op_name = found
    entry = library_entry(brk.stack)
    if entry is None or entry[1].function != op_name:
        raise NotApplicable(f"torch.ops.{package}.{op_name} exists but the traced code does not call {op_name} directly")
    caller, frame, module, wrapper = entry
    from torch._library import custom_ops

    opdef = custom_ops.OPDEFS.get(f"{package}::{op_name}")
    impl = getattr(opdef, "_init_fn", None)
    # "Wraps it": the op's implementation calls this same wrapper by name.
    if impl is None or op_name not in impl.__code__.co_names or impl.__globals__.get(op_name) is not wrapper:
        raise NotApplicable(f"torch.ops.{package}.{op_name} is not a custom op whose implementation calls {package}.{op_name}")
    if getattr(opdef, "_abstract_fn", None) is None:
        raise NotApplicable(f"torch.ops.{package}.{op_name} has no fake implementation")
    op = getattr(getattr(torch.ops, package), op_name)
    schema = op.default._schema
    sig = adapters.signature(wrapper)
    if sig is None:
        raise NotApplicable(f"cannot read the signature of {package}.{op_name}")
    op_args = [a.name for a in schema.arguments]
    passed = [p for p in sig.parameters if p in op_args]
    dropped = [p for p in sig.parameters if p not in op_args]
    accepted = catalogue.REGISTERED_OP_EQUIVALENTS.get((package, op_name), {})
    fwd = adapters.Forward(wrapper, op, passed, accepted)
    adapter = adapters.forwarding_adapter(fwd, sig, f"{package}.{op_name} -> torch.ops.{package}.{op_name}")
    if adapter is None:
        raise NotApplicable(f"{package}.{op_name} takes *args/**kwargs or required arguments the op lacks")
    call = caller.code or f"{package}.{op_name}(...)"
    new = call.replace(f"{package}.{op_name}(", f"torch.ops.{package}.{op_name}(", 1) if f"{package}.{op_name}(" in call \
        else re.sub(rf"\b[\w.]*\b{op_name}\(", f"torch.ops.{package}.{op_name}(", call, count=1)
    patch = (
        f"--- {short_path(caller.file)} ({caller.qualname})\n"
        f"-    {call}\n"
        f"+    {new}\n"
        f"# torch.ops.{package}.{op_name}{str(schema)[str(schema).index('('):]}\n"
        + (f"# not in the op: {', '.join(dropped)} -- keep their defaults"
           + (f" (equivalent: {accepted})" if accepted else "") + "\n" if dropped else "")
    )

    def apply(ps: PatchSet) -> str:
        # The op's own module keeps the original: its implementation calls it.
        names = ps.rebind(wrapper, adapter, exclude=[impl.__module__])
        if not names:
            raise NotApplicable(f"no module global refers to {package}.{op_name}")
        return f"{package}.{op_name} -> torch.ops.{package}.{op_name} in {', '.join(names)}"

    return Plan("use-registered-op", _qualified(module, op_name), where_of(caller), patch, apply)


def hoist(brk: Break, ctx: FixContext) -> Plan:
    """Compute the innermost tensor-free module-level function once, before capture."""
    stack = brk.stack
    start = stack.index(brk.actionable_frame) if brk.actionable_frame in stack else len(stack) - 1
    reasons = []
    for j in range(start, 0, -1):  # never stack[0]: that is the traced function itself
        frame = stack[j]
        if package_of(frame.file) in INFRASTRUCTURE:
            continue
        found = resolve(frame)
        if found is None:
            continue
        module, obj = found
        calls = _warm_calls(ctx, obj)
        if not calls:
            reasons.append(f"{frame.function}: not called through a module global in a warm-up run")
            continue
        if any(_has_tensor(a) or _has_tensor(k) or _has_tensor(r) for a, k, r in calls):
            reasons.append(f"{frame.function} takes or returns tensors: it cannot run before capture")
            break  # outer frames are closer to the tensors still
        try:
            table = {(a, tuple(k.items())): r for a, k, r in calls}
        except TypeError:
            reasons.append(f"{frame.function}: its arguments are not hashable")
            continue
        return _hoist_plan(brk, module, frame, obj, table, stack[j - 1])
    raise NotApplicable("; ".join(reasons) or "no module-level function between the traced code and the break")


def _hoist_plan(brk: Break, module: types.ModuleType, frame: Frame, obj: Any, table: dict, caller: Frame) -> Plan:
    recipe = {"subprocess": "hoist-subprocess", "filesystem": "hoist-filesystem"}.get(brk.category, "hoist-call")
    name = frame.function
    package = package_of(frame.file)
    precomputed = PRECOMPUTED.get((package, name))
    value_note = ""
    if precomputed and list(table) == [((), ())]:
        expr, compute = precomputed
        value = compute()
        if value is not None:
            probe = table[((), ())]
            value_note = f"; {expr} = {value!r}, the probe answered {probe!r}" + ("" if value == probe else " (they differ!)")
            table = {((), ()): value}
    def_lines = _def_lines(obj)
    sig = adapters.signature(obj)
    params = [p for p in (sig.parameters if sig else {})]
    lines = [f"--- {short_path(frame.file)} ({name})", "+_WARM = {}   # filled once, before torch.compile"]
    lines += [f" {line}" for line in def_lines]
    key = f"({', '.join(params)},)" if params else "()"
    lines += [f"+    if {key} in _WARM:   # no {brk.category} work while tracing", f"+        return _WARM[{key}]",
              "     ..."]
    warm = []
    for (args, kwargs) in table:
        call = _call_text(name, sig, args, dict(kwargs))
        warm.append(f"+_WARM[{_bound_key(sig, args, dict(kwargs))}] = {call}")
    if precomputed and value_note:
        warm = [f"+_WARM[()] = {precomputed[0]}   # instead of running the probe"]
    lines += ["# at start-up / warm-up, outside the compiled region:"] + warm
    patch = "\n".join(lines) + "\n"

    def apply(ps: PatchSet) -> str:
        names = ps.rebind(obj, adapters.memo_adapter(obj, table, f"warm-up of {name}"))
        shown = ", ".join(_call_text(name, sig, a, dict(k)) for a, k in table)
        return f"{name} answers from a warm-up ({shown}){value_note}; rebound {', '.join(names)}"

    return Plan(recipe, _qualified(module, name), f"{short_path(frame.file)}:{name}", patch, apply)


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


def compiler_disable(brk: Break, ctx: FixContext) -> Plan:
    if ctx.trap_done:
        raise NotApplicable(f"already shown to fail under fullgraph ({ctx.trap_done})")
    entry = library_entry(brk.stack)
    if entry is None:
        raise NotApplicable("no library function between the traced code and the break")
    caller, frame, module, fn = entry
    package = package_of(frame.file)
    call = caller.code or f"{frame.function}(...)"
    new = _replace_call(call, frame.function, f"{frame.function}_eager")
    patch = (
        f"--- {short_path(caller.file)} ({caller.qualname})\n"
        f"+{frame.function}_eager = torch.compiler.disable({package}.{frame.function})\n"
        f"-    {call}\n"
        f"+    {new}\n"
    )

    def apply(ps: PatchSet) -> str:
        names = ps.rebind(fn, torch.compiler.disable(fn))
        return f"torch.compiler.disable({package}.{frame.function}) in {', '.join(names)}"

    return Plan("compiler-disable", _qualified(module, frame.function), where_of(caller), patch, apply)


def wrap_custom_op(brk: Break, ctx: FixContext) -> Plan:
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
    qualified = _qualified(module, fn_name)
    if qualified in ctx.wrapped:
        raise NotApplicable(f"{qualified} is already a custom op")
    sig = adapters.signature(inner)
    if sig is None:
        raise NotApplicable(f"cannot read the signature of {qualified}")
    known = catalogue.known(package, fn_name)
    calls = _warm_calls(ctx, replace)
    hints = adapters.type_hints(inner)
    schema_args, passed = [], []
    fixed = dict(known.fixed) if known else {}
    for p in sig.parameters.values():
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise NotApplicable(f"{qualified} takes *args/**kwargs: a schema cannot describe it")
        if p.name in fixed:
            continue
        observed = [_bound(sig, a, k).get(p.name, p.default) for a, k, _ in calls]
        t = adapters.schema_type(hints.get(p.name, inspect.Parameter.empty), [v for v in observed if v is not inspect.Parameter.empty])
        if t is None:
            if p.default is inspect.Parameter.empty:
                raise NotApplicable(f"{qualified}: parameter {p.name} has no torch schema type")
            continue  # stays at its default
        schema_args.append(f"{t} {p.name}")
        passed.append(p.name)
    if known is not None:
        returns, fake, how = known.returns, _catalogue_fake(known, passed), f"catalogue fake ({known.source})"
        check = _cross_check(known, calls, sig)
        how += f"; {check}" if check else ""
    else:
        if not calls:
            raise NotApplicable(f"{qualified} is not in the catalogue and a warm-up run never called it")
        returns = adapters.return_schema(calls[0][2])
        if returns is None or any(adapters.return_schema(r) != returns for _, _, r in calls):
            raise NotApplicable(f"{qualified} returns something other than tensors")
        fake, how = _inferred_fake(calls, sig, passed), f"fake inferred from {len(calls)} warm-up call(s) under {'fake' if _is_fake(calls) else 'real'} tensors"
    op_name = re.sub(r"\W", "_", f"{package}_{fn_name}")
    schema = f"({', '.join(schema_args)}) -> {returns}"
    impl = _impl(inner, passed)
    accepted = {k: v for k, v in fixed.items()}
    call = caller.code or f"{fn_name}(...)"
    fake_src, fake_helper = _fake_source(known, calls, sig)
    patch = (
        f"--- {short_path(caller.file)} ({caller.qualname})\n"
        f"+@torch.library.custom_op(\"mylib::{fn_name}\", mutates_args=())\n"
        f"+def {fn_name}_op({', '.join(_py_param(a) for a in schema_args)}) -> {_py_returns(returns)}:\n"
        f"+    return {package}.{fn_name}({', '.join(f'{n}={n}' for n in passed)})\n"
        f"+\n+@{fn_name}_op.register_fake\n+def _({', '.join(passed)}):\n"
        + "".join(f"+    {line}\n" for line in fake_src)
        + f"-    {call}\n"
        f"+    {_replace_call(call, fn_name, fn_name + '_op')}\n"
        + "".join(f"+{line}\n" for line in fake_helper)
    )

    def apply(ps: PatchSet) -> str:
        op = ps.custom_op(op_name, impl, schema=schema, fake=fake)
        fwd = adapters.Forward(replace, op, passed, accepted)
        adapter = adapters.forwarding_adapter(fwd, sig, f"{qualified} -> torch.ops.graphbreak_doctor_fix.{op_name}")
        if adapter is None:
            raise NotApplicable(f"{qualified}: cannot forward its arguments to a custom op")
        names = ps.rebind(replace, adapter)
        if not names:
            raise NotApplicable(f"no module global refers to {qualified}")
        ctx.wrapped.add(qualified)
        ps.call_on_undo(lambda: ctx.wrapped.discard(qualified))
        return f"torch.ops.graphbreak_doctor_fix.{op_name}{schema}, {how}; rebound {', '.join(names)}"

    return Plan("wrap-custom-op", qualified, where_of(caller), patch, apply)


def _replace_call(line: str, name: str, new: str) -> str:
    """``flashinfer.fp4_quantize(`` -> ``new(`` in a caller's line of code."""
    return re.sub(r"[\w.]*\b" + re.escape(name) + r"\(", lambda _m: new + "(", line, count=1)


def _bound(sig: inspect.Signature, args: tuple, kwargs: dict) -> dict:
    try:
        return dict(sig.bind(*args, **kwargs).arguments)
    except TypeError:
        return {}


def _is_fake(calls: list) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return any(isinstance(a, FakeTensor) for args, _, _ in calls for a in args)


def _impl(fn: Callable, passed: list[str]) -> Callable:
    def impl(*args: Any) -> Any:
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        out = fn(**dict(zip(passed, args)))
        # A custom op's outputs may not alias its inputs.
        return _unalias(out, inputs)

    return impl


def _unalias(out: Any, inputs: list[torch.Tensor]) -> Any:
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
    return ("tensor", tuple(int(s) for s in out.shape), tuple(int(s) for s in out.stride()), out.dtype)


def _make(meta: Any, device: torch.device) -> Any:
    if meta[0] == "tuple":
        return tuple(_make(m, device) for m in meta[1])
    _, shape, stride, dtype = meta
    return torch.empty_strided(shape, stride, dtype=dtype, device=device)


def _inferred_fake(calls: list, sig: inspect.Signature, passed: list[str]) -> Callable:
    table = {}
    for args, kwargs, result in calls:
        bound = _bound(sig, args, kwargs)
        table[_signature_key({k: bound.get(k) for k in passed})] = _meta(result)

    def fake(*args: Any) -> Any:
        meta = table.get(_signature_key(dict(zip(passed, args))))
        if meta is None:
            raise RuntimeError("graphbreak-doctor: no warm-up call had these input shapes; the inferred fake cannot answer")
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        return _make(meta, device)

    return fake


def _cross_check(known: catalogue.KnownFunction, calls: list, sig: inspect.Signature) -> str:
    """Does the catalogue fake give the shapes the function gave in the warm-up?"""
    if not calls:
        return ""
    mismatches = 0
    for args, kwargs, result in calls:
        bound = _bound(sig, args, kwargs)
        try:
            fake = known.fake(**bound)
        except Exception as e:  # a catalogue bug must show, not crash the ladder
            return f"catalogue fake raised {type(e).__name__}: {e}"
        if _shapes(fake) != _shapes(result):
            mismatches += 1
    n = len(calls)
    return f"matches the {n} warm-up call(s)" if not mismatches else f"DIFFERS from {mismatches} of {n} warm-up call(s)"


def _shapes(out: Any) -> Any:
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


RECIPES: dict[str, Callable[[Break, FixContext], Plan]] = {
    "use-registered-op": use_registered_op,
    "hoist-subprocess": hoist,
    "hoist-filesystem": hoist,
    "hoist-call": hoist,
    "compiler-disable": compiler_disable,
    "wrap-custom-op": wrap_custom_op,
}


def candidates(brk: Break) -> tuple[str, ...]:
    return CHAINS.get(brk.category, ())


