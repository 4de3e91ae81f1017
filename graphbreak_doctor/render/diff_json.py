"""The JSON form of a diff of two diagnoses (graphbreak_doctor.gate.diff)."""

from __future__ import annotations

from graphbreak_doctor.model.diff import FindingsDiff
from graphbreak_doctor.render.renderer import DIFF, Renderer


def render(d: FindingsDiff) -> str:
    return d.to_json()


RENDERER = Renderer("diff-json", DIFF, render, suffix=".json", option="--json",
                    help="the diff as JSON", title="JSON diff")
