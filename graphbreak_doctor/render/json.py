"""JSON findings: the machine-readable form, reloadable with Findings.from_json."""

from __future__ import annotations

from graphbreak_doctor.findings import Findings


def render(findings: Findings) -> str:
    return findings.to_json()
