"""use-registered-op: the library already registers the function the code
calls as a torch op with a fake (flashinfer >= 0.7: ``torch.ops.flashinfer.fp4_quantize``);
calling the op keeps the call as one graph node and never traces the wrapper."""

from __future__ import annotations

import re
import sys
from typing import Any

from graphbreak_doctor.model import Break, Frame
from graphbreak_doctor.frames import package_of, short_path
from graphbreak_doctor.patching import PatchSet
from graphbreak_doctor.recipes import adapters
from graphbreak_doctor.recipes.common import library_entry, qualified, source_of, where_of
from graphbreak_doctor.recipes.recipe import Advice, Change, FixContext, NotApplicable, Plan, Recipe


def registered_op_for(stack: list[Frame]) -> tuple[str, str] | None:
    """(package, op) when the outermost library frame of the stack is a
    function the library also registers as a torch op. Without torch loaded
    (findings read from a log) no op is registered."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for frame in stack:
        package = package_of(frame.file)
        if package in ("stdlib", "torch", "user") or not frame.function.isidentifier() or frame.function.startswith("_"):
            continue
        namespace = getattr(torch.ops, package, None) if package.isidentifier() else None
        if namespace is None:
            continue
        try:
            op = getattr(namespace, frame.function)
        except (AttributeError, RuntimeError):
            continue
        if isinstance(op, torch._ops.OpOverloadPacket):
            return package, frame.function
    return None


def plan(brk: Break, ctx: FixContext) -> Plan:
    found = registered_op_for(brk.stack)
    if found is None:
        raise NotApplicable("no frame of the stack is a function its library registers as a torch op")
    package, op_name = found
    entry = library_entry(brk.stack)
    if entry is None or entry[1].function != op_name:
        raise NotApplicable(f"torch.ops.{package}.{op_name} exists but the traced code does not call {op_name} directly")
    caller, frame, module, wrapper = entry
    import torch
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
    from graphbreak_doctor.recipes import catalogue  # its fakes import torch

    accepted = catalogue.REGISTERED_OP_EQUIVALENTS.get((package, op_name), {})
    fwd = adapters.Forward(wrapper, op, passed, accepted)
    adapter = adapters.forwarding_adapter(fwd, sig, f"{package}.{op_name} -> torch.ops.{package}.{op_name}")
    if adapter is None:
        raise NotApplicable(f"{package}.{op_name} takes *args/**kwargs or required arguments the op lacks")
    patch = op_call_patch(caller, package, op_name, wrapper, accepted)

    def apply(ps: PatchSet) -> str:
        # The op's own module keeps the original: its implementation calls it.
        names = ps.rebind(wrapper, adapter, exclude=[impl.__module__])
        if not names:
            raise NotApplicable(f"no module global refers to {package}.{op_name}")
        return f"{package}.{op_name} -> torch.ops.{package}.{op_name} in {', '.join(names)}"

    change = Change("registered_op", module.__name__, op_name, getattr(module, "__file__", "") or "", wrapper,
                    op=f"{package}.{op_name}", passed=passed, accepted=dict(accepted),
                    holds=f"every input: torch.ops.{package}.{op_name} has the library's own fake", every_size=True)
    return Plan("use-registered-op", qualified(module, op_name), where_of(caller), patch, apply, change=change)



def op_call_patch(caller: Frame, package: str, op_name: str, wrapper: Any, accepted: dict | None = None) -> str:
    """The caller's line calling ``torch.ops.<package>.<op>`` instead of the
    wrapper, with the op's schema and the wrapper parameters it lacks."""
    import torch

    schema = getattr(getattr(torch.ops, package), op_name).default._schema
    sig = adapters.signature(wrapper)
    op_args = [a.name for a in schema.arguments]
    dropped = [p for p in (sig.parameters if sig else {}) if p not in op_args]
    if accepted is None:
        from graphbreak_doctor.recipes import catalogue  # its fakes import torch

        accepted = catalogue.REGISTERED_OP_EQUIVALENTS.get((package, op_name), {})
    call = source_of(caller, f"    {package}.{op_name}(...)")
    new = call.replace(f"{package}.{op_name}(", f"torch.ops.{package}.{op_name}(", 1) if f"{package}.{op_name}(" in call \
        else re.sub(rf"\b[\w.]*\b{op_name}\(", f"torch.ops.{package}.{op_name}(", call, count=1)
    return (
        f"--- {short_path(caller.file)} ({caller.qualname})\n"
        f"-{call}\n"
        f"+{new}\n"
        f"# torch.ops.{package}.{op_name}{str(schema)[str(schema).index('('):]}\n"
        + (f"# not in the op: {', '.join(dropped)} -- keep their defaults"
           + (f" (equivalent: {accepted})" if accepted else "") + "\n" if dropped else "")
    )


RECIPE = Recipe(
    "use-registered-op",
    Advice(
        "Call torch.ops.{package}.{op} instead of the Python wrapper {package}.{op}",
        "{package} registers {op} as a torch op with a fake implementation; Dynamo keeps a registered op "
        "as one node of the graph and never traces the wrapper's JIT-loading code.",
        "# before\n"
        "out = {package}.{op}(...)\n\n"
        "# after: the registered op (check its argument list: torch.ops.{package}.{op}.default._schema)\n"
        "out = torch.ops.{package}.{op}(...)",
    ),
    plan,
)
