"""The break categories: one module each, registered here in display order.

A new category is a module defining ``CATEGORY = Category(...)`` (see
category.py) plus one line in ``REGISTRY``. Its ``advice`` and ``ladder`` name
recipes of graphbreak_doctor.recipes; a test checks they exist.
"""

from __future__ import annotations

from graphbreak_doctor.analysis.categories import (
    compiler_disable,
    data_dependent,
    filesystem,
    logging,
    opaque_call,
    other,
    subprocess,
    unsupported_builtin,
)
from graphbreak_doctor.analysis.categories.category import Category, Rule

REGISTRY: tuple[Category, ...] = (
    subprocess.CATEGORY,
    filesystem.CATEGORY,
    compiler_disable.CATEGORY,
    opaque_call.CATEGORY,
    unsupported_builtin.CATEGORY,
    data_dependent.CATEGORY,
    logging.CATEGORY,
    other.CATEGORY,
)

# Names in display order.
CATEGORIES: tuple[str, ...] = tuple(c.name for c in REGISTRY)
# The category a break gets when no rule matches.
FALLBACK = other.CATEGORY.name

_BY_NAME = {c.name: c for c in REGISTRY}


def get(name: str) -> Category:
    """The category called ``name``; KeyError names the known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown break category {name!r} (known: {', '.join(CATEGORIES)})") from None


def by_priority() -> tuple[Category, ...]:
    """Categories in the order classification tries their rules."""
    return tuple(sorted(REGISTRY, key=lambda c: c.priority))


__all__ = ["CATEGORIES", "FALLBACK", "REGISTRY", "Category", "Rule", "by_priority", "get"]
