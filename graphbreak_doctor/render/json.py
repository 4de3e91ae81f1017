"""JSON findings (schema in graphbreak_doctor.model): for machines and for
rendering later (`graphbreak-doctor report`)."""

from __future__ import annotations

from graphbreak_doctor.model import Findings
from graphbreak_doctor.render.renderer import FINDINGS, Renderer


def render(findings: Findings) -> str:
    return findings.to_json()


RENDERER = Renderer("json", FINDINGS, render, suffix=".json", option="--json",
                    help="JSON findings",
                    title="JSON findings")
