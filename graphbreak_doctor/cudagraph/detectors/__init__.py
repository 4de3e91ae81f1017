"""Capture-hazard detectors: one module per detector, registered here.

A detector is a ``HazardDetector`` (detector.py): its name, the category of
the hazards it finds, and a function of one ``Operation`` -- an operator, a
torch function, a CUDA runtime call -- that ran inside a captured segment,
answering what ran when it is a hazard. A new one is a module defining
``DETECTOR = HazardDetector(...)`` plus one line in ``_BUILT_IN``, or an
installed package's entry point in ``graphbreak_doctor.hazard_detectors``
(graphbreak_doctor/plugins.py); its category is a registered category
(analysis/categories/, or the plugin's own in ``graphbreak_doctor.categories``).
"""

from __future__ import annotations

import functools
from typing import Any

from graphbreak_doctor import plugins
from graphbreak_doctor.analysis import categories
from graphbreak_doctor.cudagraph.detectors import frozen_value, rng, sync
from graphbreak_doctor.cudagraph.detectors.detector import HazardDetector, Operation

_BUILT_IN: tuple[HazardDetector, ...] = (
    sync.DETECTOR,
    frozen_value.DETECTOR,
    rng.DETECTOR,
)


@functools.cache
def registry() -> tuple[HazardDetector, ...]:
    """Every detector: the built-in ones, then the plugins' (read on first
    use). Also the module's ``REGISTRY``."""

    def refuse(d: HazardDetector) -> str:
        known = categories.CATEGORIES
        return "" if d.category in known else f"its category {d.category!r} is not registered"

    return _BUILT_IN + plugins.load("hazard_detectors", HazardDetector, {d.name for d in _BUILT_IN}, refuse=refuse)


def __getattr__(name: str) -> Any:
    if name == "REGISTRY":
        return registry()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def detect(op: Operation) -> list[tuple[str, str]]:
    """(category, what ran) of each hazard the detectors find in ``op``."""
    return [(d.category, what) for d in registry() if (what := d.detect(op))]


__all__ = ["REGISTRY", "HazardDetector", "Operation", "detect", "registry"]
