"""The JSON form of a compatibility matrix: every cell with its findings."""

from __future__ import annotations

from graphbreak_doctor.model.matrix import MatrixResult
from graphbreak_doctor.render.renderer import MATRIX, Renderer


def render(m: MatrixResult) -> str:
    return m.to_json()


RENDERER = Renderer("matrix-json", MATRIX, render, suffix=".json", option="--json",
                    help="the matrix as JSON, every cell's findings included", title="JSON matrix")
