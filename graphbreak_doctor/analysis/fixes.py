"""The suggested fix of a break: its category's advice recipe, filled with the
break's own names (the call to change, the function to change it in), so the
suggestion reads as an action item.

One recipe refines every category: when the break sits under a library
function that the library also registers as a torch op (FlashInfer >= 0.7
registers ``torch.ops.flashinfer.fp4_quantize``), calling the op is the fix.
"""

from __future__ import annotations

from graphbreak_doctor import recipes
from graphbreak_doctor.analysis import categories
from graphbreak_doctor.findings import Fix, Frame
from graphbreak_doctor.recipes.registered_op import RECIPE as REGISTERED_OP
from graphbreak_doctor.recipes.registered_op import registered_op_for


def suggest(category: str, *, entry_call: str, culprit: str, actionable: Frame | None, stack: list[Frame]) -> Fix:
    """The fix for a break of ``category``; ``entry_call`` is the library call the
    actionable frame made, ``culprit`` the callable Dynamo refused."""
    op = registered_op_for(stack)
    names: dict[str, str] = {}
    if op is not None and category != "compiler-disable":
        recipe = REGISTERED_OP
        names = {"package": op[0], "op": op[1]}
    else:
        recipe = recipes.get(categories.get(category).advice)
    advice = recipe.advice
    call = (entry_call or culprit) if advice.names == "entry" else (culprit or entry_call)
    function = actionable.qualname.rsplit(".", 1)[-1] if actionable else "fn"
    names.update(
        call=f"`{call}`" if call else advice.unnamed_call,
        function=function if function.isidentifier() else "fn",
    )
    return Fix(
        recipe=recipe.name,
        summary=advice.summary.format(**names),
        detail=advice.detail.format(**names),
        snippet=advice.snippet.format(**names),
    )
