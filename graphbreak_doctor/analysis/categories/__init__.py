"""The break categories: one module each, registered here in display order.

A new category is a module defining ``CATEGORY = Category(...)`` (see
category.py) plus one line in ``_BUILT_IN``, or an installed package's entry
point in ``graphbreak_doctor.categories`` (graphbreak_doctor/plugins.py). Its ``advice`` and ``ladder`` name
recipes of graphbreak_doctor.recipes; a test checks they exist.
"""

from __future__ import annotations

import functools
from typing import Any

from graphbreak_doctor import plugins
from graphbreak_doctor.analysis.categories import (
    compiler_disable,
    cudagraph_frozen_value,
    cudagraph_rng,
    cudagraph_sync,
    cudagraph_unregistered_buffer,
    data_dependent,
    filesystem,
    forbidden_call,
    logging,
    opaque_call,
    other,
    subprocess,
    unsupported_builtin,
)
from graphbreak_doctor.analysis.categories.category import Category, Rule

_BUILT_IN: tuple[Category, ...] = (
    subprocess.CATEGORY,
    filesystem.CATEGORY,
    compiler_disable.CATEGORY,
    forbidden_call.CATEGORY,
    opaque_call.CATEGORY,
    unsupported_builtin.CATEGORY,
    data_dependent.CATEGORY,
    logging.CATEGORY,
    cudagraph_sync.CATEGORY,
    cudagraph_frozen_value.CATEGORY,
    cudagraph_rng.CATEGORY,
    cudagraph_unregistered_buffer.CATEGORY,
)
# The category a break gets when no rule matches.
FALLBACK = other.CATEGORY.name


@functools.cache
def registry() -> tuple[Category, ...]:
    """Every category in display order: the built-in ones, the plugins' (read
    on first use, once every module has been imported), the fallback last.
    Also the module's ``REGISTRY``; ``CATEGORIES`` are their names."""
    taken = {c.name for c in (*_BUILT_IN, other.CATEGORY)}
    return _BUILT_IN + plugins.load("categories", Category, taken) + (other.CATEGORY,)


def __getattr__(name: str) -> Any:
    if name == "REGISTRY":
        return registry()
    if name == "CATEGORIES":
        return tuple(c.name for c in registry())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get(name: str) -> Category:
    """The category called ``name``; KeyError names the known ones."""
    found = next((c for c in registry() if c.name == name), None)
    if found is None:
        raise KeyError(f"unknown break category {name!r} (known: {', '.join(c.name for c in registry())})")
    return found


def by_priority() -> tuple[Category, ...]:
    """Categories in the order classification tries their rules."""
    return tuple(sorted(registry(), key=lambda c: c.priority))


__all__ = ["CATEGORIES", "FALLBACK", "REGISTRY", "Category", "Rule", "by_priority", "get", "registry"]
