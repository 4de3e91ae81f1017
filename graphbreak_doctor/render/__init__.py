"""Renderers: one module per output format, registered here.

Each renderer is a function of one report object only -- findings, or the
gate's report -- and returns text; none re-derives analysis. A module
defines ``RENDERER = Renderer(...)``; a new format is that module plus one
line in ``REGISTRY``. Commands offer every file renderer of the kinds they
produce as an option (``--json``, ``--html``, ``--junit``, ``--sarif``).
"""

from __future__ import annotations

from graphbreak_doctor.render import gate_text, github, html, json, junit, ladder_text, sarif, terminal
from graphbreak_doctor.render.renderer import FINDINGS, GATE, Renderer

REGISTRY: tuple[Renderer, ...] = (
    terminal.RENDERER,
    ladder_text.RENDERER,
    gate_text.RENDERER,
    github.RENDERER,
    json.RENDERER,
    html.RENDERER,
    junit.RENDERER,
    sarif.RENDERER,
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


__all__ = ["FINDINGS", "GATE", "REGISTRY", "Renderer", "file_renderers", "get"]
