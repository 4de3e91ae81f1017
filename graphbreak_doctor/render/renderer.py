"""The record every output format is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

# What a renderer takes: findings (graphbreak_doctor.model.Findings), the
# gate's report (graphbreak_doctor.model.GateReport), or a diff.
FINDINGS = "findings"
GATE = "gate"
# A comparison of two findings (graphbreak_doctor.model.diff.FindingsDiff).
DIFF = "diff"
# A compatibility matrix (graphbreak_doctor.model.matrix.MatrixResult).
MATRIX = "matrix"


@dataclass(frozen=True)
class Renderer:
    name: str
    # What it renders: FINDINGS, GATE, DIFF or MATRIX.
    renders: str
    render: Callable[[Any], str]
    # File suffix; "" for text meant for the terminal.
    suffix: str = ""
    # The command-line option that writes it to a file ("--html"); "" for
    # terminal text, which the commands print themselves.
    option: str = ""
    help: str = ""
    # What the file is, for "<title> written to <path>".
    title: str = ""
