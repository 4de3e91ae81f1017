"""The fix of each capture hazard: its category's recipe, worded for the
frame to change."""

from __future__ import annotations

from graphbreak_doctor import recipes
from graphbreak_doctor.analysis import categories
from graphbreak_doctor.model.cudagraph import CudaGraphMap
from graphbreak_doctor.recipes.recipe import Names


def advise(found: CudaGraphMap) -> CudaGraphMap:
    """Fill each hazard's ``fix`` and ``fix_text``."""
    for hazard in found.hazards():
        recipe = recipes.get(categories.get(hazard.category).advice)
        site = hazard.site
        names = Names(culprit=site.code if site else "", function=site.function if site else "",
                      where=f"{site.file}:{site.line}" if site else "", line=site.code if site else "")
        advice = recipe.advice
        hazard.fix = recipe.name
        hazard.fix_text = advice.summary.format(**advice.fields(names))
    return found
