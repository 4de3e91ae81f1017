"""Advice a person has to carry out: the change is in the traced code's own
logic (a branch on tensor values, a log call, a builtin object), so the fix
ladder cannot make it for them."""

from __future__ import annotations

from graphbreak_doctor.recipes.recipe import Advice, Recipe

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
