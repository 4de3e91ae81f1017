"""Fix recipes: one module per family, registered here.

A recipe is a :class:`Recipe` record: its advice (what a person reads in the
report) and, where the doctor can make the change itself, a planner the fix
ladder applies in-process and proves by re-tracing. Break categories name
recipes (their ``advice`` and ``ladder``) by these names.

A new recipe is a ``Recipe(...)`` in a family module plus one line in
``_FAMILIES`` (or a new family module and its line), or an installed
package's entry point in ``graphbreak_doctor.recipes`` (graphbreak_doctor/plugins.py).
"""

from __future__ import annotations

import functools
from typing import Any

from graphbreak_doctor import plugins
from graphbreak_doctor.recipes import (
    check_message,
    config_switch,
    cudagraph,
    custom_op,
    disable,
    hoist,
    manual,
    outside_compile,
    registered_op,
)
from graphbreak_doctor.recipes.recipe import Advice, Change, FixContext, NotApplicable, Plan, Recipe

_FAMILIES: tuple[tuple[Recipe, ...], ...] = (
    (registered_op.RECIPE,),
    hoist.RECIPES,
    (disable.RECIPE,),
    custom_op.RECIPES,
    (outside_compile.RECIPE,),
    (check_message.RECIPE,),
    config_switch.RECIPES,
    manual.RECIPES,
    cudagraph.RECIPES,
)



@functools.cache
def registry() -> dict[str, Recipe]:
    """Every recipe by name: the built-in families', then the plugins' (read
    on first use, once every module has been imported). Also the module's ``REGISTRY``."""
    found = {r.name: r for family in _FAMILIES for r in family}
    found.update((r.name, r) for r in plugins.load("recipes", Recipe, set(found)))
    return found


def __getattr__(name: str) -> Any:
    if name == "REGISTRY":
        return registry()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get(name: str) -> Recipe:
    try:
        return registry()[name]
    except KeyError:
        raise KeyError(f"unknown fix recipe {name!r} (known: {', '.join(registry())})") from None


__all__ = ["REGISTRY", "Advice", "Change", "FixContext", "NotApplicable", "Plan", "Recipe", "get", "registry"]
