"""Plugins: installed packages that add to the doctor's registries.

A package declares entry points in one of these groups; each names an object
of the group's kind, or a tuple or list of them:

=====================================  ==============================================
``graphbreak_doctor.providers``        ``TargetProvider`` (targets/provider.py): traced code
``graphbreak_doctor.categories``       ``Category`` (analysis/categories/category.py)
``graphbreak_doctor.recipes``          ``Recipe`` (recipes/recipe.py)
``graphbreak_doctor.devices``          ``DevicePreset`` (emulation/preset.py)
``graphbreak_doctor.frameworks``       ``Framework`` (targets/frameworks/framework.py): a serving
                                       framework (its launch option, phases, server sizes
                                       and how it builds a served model)
``graphbreak_doctor.models``           ``PackagedModel`` (targets/models/packaged.py): a config folder
``graphbreak_doctor.renderers``        ``Renderer`` (render/renderer.py): an output format; one
                                       with an ``option`` is offered by every command
                                       that produces what it renders
``graphbreak_doctor.hazard_detectors`` ``HazardDetector`` (cudagraph/detectors/detector.py): what
                                       inside a captured CUDA-graph segment is a capture
                                       hazard (its category registered as a category)
=====================================  ==============================================

For example, in the plugin's ``pyproject.toml``::

    [project.entry-points."graphbreak_doctor.providers"]
    mylib = "mylib_doctor:PROVIDER"

Each registry loads its group once, when it is first imported, and puts what
it finds after the built-in entries (a category before the fallback
``other``). A plugin that fails to import, names an object of the wrong kind
or reuses a name already registered is left out, and one line on stderr says
so; so is one its registry refuses (a renderer whose option is taken, a
hazard detector of a category no one registered). Set
``GRAPHBREAK_DOCTOR_NO_PLUGINS=1`` to load none.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from typing import Any, Callable, TypeVar

from graphbreak_doctor.text import escape_controls, one_line

PREFIX = "graphbreak_doctor."
GROUPS = ("providers", "categories", "recipes", "devices", "frameworks", "models", "renderers", "hazard_detectors")
DISABLE_ENV = "GRAPHBREAK_DOCTOR_NO_PLUGINS"

T = TypeVar("T")


def _warn(text: str) -> None:
    print(f"graphbreak-doctor: plugin {escape_controls(text)}", file=sys.stderr)


def load(group: str, kind: type[T], taken: set[str], name: Callable[[T], str] = lambda o: o.name,
         refuse: Callable[[T], str] = lambda o: "") -> tuple[T, ...]:
    """The objects of ``kind`` that installed packages register in
    ``graphbreak_doctor.<group>``, in entry-point name order; ``taken``: the
    names already registered (a plugin cannot replace a built-in entry);
    ``refuse``: why the registry cannot take one ("" when it can)."""
    if group not in GROUPS:
        raise ValueError(f"unknown plugin group {group!r} (known: {', '.join(GROUPS)})")
    if os.environ.get(DISABLE_ENV):
        return ()
    found: list[T] = []
    seen = set(taken)
    points = sorted(importlib.metadata.entry_points(group=PREFIX + group), key=lambda p: (p.name, p.value))
    for point in points:
        where = f"{point.name} = {point.value} ({PREFIX}{group})"
        try:
            loaded: Any = point.load()
        except Exception as e:  # the plugin's own import failed: say so, keep the doctor usable
            _warn(f"{where} failed to load: {type(e).__name__}: {one_line(str(e), 200)}; left out")
            continue
        items = loaded if isinstance(loaded, (tuple, list)) else (loaded,)
        for item in items:
            if not isinstance(item, kind):
                _warn(f"{where} gives a {type(item).__name__}, not a {kind.__name__}; left out")
                continue
            label = name(item)
            if not label or label in seen:
                _warn(f"{where}: the name {label!r} is already registered; left out")
                continue
            why = refuse(item)
            if why:
                _warn(f"{where}: {why}; left out")
                continue
            seen.add(label)
            found.append(item)
    return tuple(found)


__all__ = ["DISABLE_ENV", "GROUPS", "load"]
