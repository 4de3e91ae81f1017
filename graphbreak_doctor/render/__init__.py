"""Renderers: one module per output format, registered here.

Each renderer is a function of one report object only -- findings, the
gate's report, a diff of two findings, or a matrix -- and returns text; none re-derives analysis. A module
defines ``RENDERER = Renderer(...)``; a new format is that module plus one
line in ``_BUILT_IN``, or an installed package's entry point in
``graphbreak_doctor.renderers`` (graphbreak_doctor/plugins.py). Commands
offer every file renderer of the kinds they produce as an option
(``--json``, ``--html``, ``--junit``, ``--sarif``, a plugin's own). Formats
that point at code read the gate's located problems
(``TargetResult.located``, graphbreak_doctor/model/located.py).
"""

from __future__ import annotations

import functools
from typing import Any

from graphbreak_doctor import plugins

from graphbreak_doctor.render import (
    diff_html,
    diff_json,
    diff_terminal,
    gate_text,
    github,
    html,
    json,
    junit,
    ladder_text,
    matrix_html,
    matrix_json,
    matrix_terminal,
    sarif,
    terminal,
)
from graphbreak_doctor.render.renderer import DIFF, FINDINGS, GATE, MATRIX, Renderer

_BUILT_IN: tuple[Renderer, ...] = (
    terminal.RENDERER,
    ladder_text.RENDERER,
    gate_text.RENDERER,
    github.RENDERER,
    json.RENDERER,
    html.RENDERER,
    junit.RENDERER,
    sarif.RENDERER,
    diff_terminal.RENDERER,
    diff_json.RENDERER,
    diff_html.RENDERER,
    matrix_terminal.RENDERER,
    matrix_json.RENDERER,
    matrix_html.RENDERER,
)

KINDS = (FINDINGS, GATE, DIFF, MATRIX)


@functools.cache
def registry() -> tuple[Renderer, ...]:
    """Every renderer: the built-in ones, then the plugins' (read on first
    use, once every module has been imported). Also the module's ``REGISTRY``."""
    options = {r.option for r in _BUILT_IN if r.option}

    def refuse(r: Renderer) -> str:
        if r.renders not in KINDS:
            return f"renders {r.renders!r}, not one of {', '.join(KINDS)}"
        if r.option and (not r.option.startswith("--") or r.option in options):
            return f"its option {r.option!r} is taken or not a long option"
        options.add(r.option)
        return ""

    return _BUILT_IN + plugins.load("renderers", Renderer, {r.name for r in _BUILT_IN}, refuse=refuse)


def __getattr__(name: str) -> Any:
    if name == "REGISTRY":
        return registry()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get(name: str) -> Renderer:
    found = next((r for r in registry() if r.name == name), None)
    if found is None:
        raise KeyError(f"unknown renderer {name!r} (known: {', '.join(r.name for r in registry())})")
    return found


def file_renderers(*kinds: str) -> tuple[Renderer, ...]:
    """Renderers of these kinds that write a file (they have an option)."""
    return tuple(r for r in registry() if r.renders in kinds and r.option)


__all__ = ["DIFF", "FINDINGS", "GATE", "KINDS", "MATRIX", "REGISTRY", "Renderer", "file_renderers", "get", "registry"]
