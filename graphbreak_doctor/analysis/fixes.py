"""Fix recipes: for each category, what to change, why, and an example.

A recipe is data. ``suggest`` fills it with the break's own names (the
culprit, the function to change) so the suggestion reads as an action item.
One recipe refines a category: when the break sits under a library function
that the library also registers as a torch op (FlashInfer >= 0.7 registers
``torch.ops.flashinfer.fp4_quantize``), calling the op is the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphbreak_doctor.analysis.frames import package_of
from graphbreak_doctor.findings import Fix, Frame


@dataclass(frozen=True)
class FixRecipe:
    recipe: str
    summary: str
    detail: str
    snippet: str
    # What {call} reads as when the refused callable has no name.
    unnamed_call: str = "the call"


RECIPES: dict[str, FixRecipe] = {
    "subprocess": FixRecipe(
        "hoist-subprocess",
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
    ),
    "filesystem": FixRecipe(
        "hoist-filesystem",
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
    ),
    "compiler-disable": FixRecipe(
        "custom-op-instead-of-disable",
        "Register {call} as a torch.library.custom_op instead of using torch.compiler.disable",
        "torch.compiler.disable makes Dynamo break the graph at the call. Under fullgraph=True (SGLang's "
        "piecewise CUDA graphs) that is an error, not a fallback. A custom op with a fake (meta) "
        "implementation stays in the graph as one opaque node.",
        "@torch.library.custom_op(\"mylib::{function}\", mutates_args=())\n"
        "def {function}(x: torch.Tensor) -> torch.Tensor:\n"
        "    return original_{function}(x)\n\n"
        "@{function}.register_fake\n"
        "def _(x):\n"
        "    return torch.empty_like(x)",
    ),
    "opaque-call": FixRecipe(
        "wrap-custom-op",
        "Wrap {call} in {function} as a torch.library.custom_op with register_fake",
        "Dynamo cannot see inside a C++/pybind/tvm-ffi/ctypes function. Register it as a custom op "
        "whose fake implementation returns outputs of the right shape and dtype; the graph then keeps "
        "it as a single node.",
        "@torch.library.custom_op(\"mylib::{function}\", mutates_args=(\"out\",))\n"
        "def {function}_op(x: torch.Tensor, out: torch.Tensor) -> None:\n"
        "    kernel(x, out)        # the opaque call\n\n"
        "@{function}_op.register_fake\n"
        "def _(x, out):\n"
        "    return None",
        unnamed_call="the compiled call",
    ),
    "unsupported-builtin": FixRecipe(
        "precompute-builtin",
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
    ),
    "data-dependent": FixRecipe(
        "static-control-flow",
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
    ),
    "logging": FixRecipe(
        "guard-logging",
        "Skip {call} in {function} while compiling (torch.compiler.is_compiling())",
        "Logging and printing have side effects Dynamo will not put into a graph. Guard them with "
        "torch.compiler.is_compiling(), or move them outside the compiled region.",
        "if not torch.compiler.is_compiling():\n"
        "    logger.info(\"...\")",
    ),
    "other": FixRecipe(
        "read-raw-reason",
        "Read Dynamo's reason and the linked documentation page for this break",
        "No rule recognized this break; the explanation and hints below are Dynamo's own.",
        "# see the documentation page linked from the gb id",
    ),
}

REGISTERED_OP = FixRecipe(
    "use-registered-op",
    "Call torch.ops.{package}.{op} instead of the Python wrapper {package}.{op}",
    "{package} registers {op} as a torch op with a fake implementation; Dynamo keeps a registered op "
    "as one node of the graph and never traces the wrapper's JIT-loading code.",
    "# before\n"
    "out = {package}.{op}(...)\n\n"
    "# after: the registered op (check its argument list: torch.ops.{package}.{op}.default._schema)\n"
    "out = torch.ops.{package}.{op}(...)",
)


def registered_op_for(stack: list[Frame]) -> tuple[str, str] | None:
    """(package, op) when the outermost library frame of the stack is a
    function the library also registers as a torch op."""
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


# Categories whose fix moves the library call the code made (subprocess.check_output,
# pathlib.Path.stat); for the others the refused callable itself is the thing
# to move or wrap (a lock, SimpleNamespace, a tvm-ffi kernel).
_FIX_THE_ENTRY_CALL = frozenset({"subprocess", "filesystem", "logging"})


def call_to_fix(category: str, via: str, culprit: str) -> str:
    return (via or culprit) if category in _FIX_THE_ENTRY_CALL else (culprit or via)


def suggest(category: str, call: str, actionable: Frame | None, stack: list[Frame]) -> Fix:
    op = registered_op_for(stack)
    if op is not None and category != "compiler-disable":
        recipe = REGISTERED_OP
        names = {"package": op[0], "op": op[1]}
    else:
        recipe = RECIPES[category]
        names = {}
    function = actionable.qualname.rsplit(".", 1)[-1] if actionable else "fn"
    names.update(
        call=f"`{call}`" if call else recipe.unnamed_call,
        function=function if function.isidentifier() else "fn",
    )
    return Fix(
        recipe=recipe.recipe,
        summary=recipe.summary.format(**names),
        detail=recipe.detail.format(**names),
        snippet=recipe.snippet.format(**names),
    )
