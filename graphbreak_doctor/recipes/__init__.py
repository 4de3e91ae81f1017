"""Fix recipes: one module per family, registered here.

A recipe is a :class:`Recipe` record: its advice (what a person reads in the
report) and, where the doctor can make the change itself, a planner the fix
ladder applies in-process and proves by re-tracing. Break categories name
recipes (their ``advice`` and ``ladder``) by these names.

A new recipe is a ``Recipe(...)`` in a family module plus one line in
``_FAMILIES`` (or a new family module and its line).
"""

from __future__ import annotations

from graphbreak_doctor.recipes import custom_op, disable, hoist, manual, registered_op
from graphbreak_doctor.recipes.recipe import Advice, FixContext, NotApplicable, Plan, Recipe

_FAMILIES: tuple[tuple[Recipe, ...], ...] = (
    (registered_op.RECIPE,),
    hoist.RECIPES,
    (disable.RECIPE,),
    custom_op.RECIPES,
    manual.RECIPES,
)

REGISTRY: dict[str, Recipe] = {r.name: r for family in _FAMILIES for r in family}


def get(name: str) -> Recipe:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown fix recipe {name!r} (known: {', '.join(REGISTRY)})") from None


__all__ = ["REGISTRY", "Advice", "FixContext", "NotApplicable", "Plan", "Recipe", "get"]
