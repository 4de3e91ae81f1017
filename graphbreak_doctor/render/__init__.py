"""Renderers: one module per output format, registered here.

Each renderer is a function of one report object only -- findings, the
gate's report, a diff of two findings, or a matrix -- and returns text; none re-derives analysis. A module
defines ``RENDERER = Renderer(...)``; a new format is that module plus one
line in ``REGISTRY``. Commands offer every file renderer of the kinds they
produce as an option (``--json``, ``--html``, ``--junit``, ``--sarif``).
"""

from __future__ import annotations

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

REGISTRY: tuple[Renderer, ...] = (
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

_BY_NAME = {r.name: r for r in REGISTRY}


def get(name: str) -> Renderer:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown renderer {name!r} (known: {', '.join(_BY_NAME)})") from None


def file_renderers(*kinds: str) -> tuple[Renderer, ...]:
    """Renderers of these kinds that write a file (they have an option)."""
    return tuple(r for r in REGISTRY if r.renders in kinds and r.option)


__all__ = ["DIFF", "FINDINGS", "GATE", "MATRIX", "REGISTRY", "Renderer", "file_renderers", "get"]
