"""The record every output format is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from graphbreak_doctor.text import one_line_values

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
    # The format's function: one report object in, text out.
    fn: Callable[[Any], str]
    # File suffix; "" for text meant for the terminal.
    suffix: str = ""
    # The command-line option that writes it to a file ("--html"); "" for
    # terminal text, which the commands print themselves.
    option: str = ""
    help: str = ""
    # What the file is, for "<title> written to <path>".
    title: str = ""

    @property
    def terminal(self) -> bool:
        """Text the commands print (no option writes it to a file)."""
        return not self.option

    def render(self, subject: Any) -> str:
        """The text of ``subject``. A terminal renderer reads it with every
        string made one line (text.one_line_values): findings and logs come
        from elsewhere, and no value of theirs may end a line or start one
        (a forged CI workflow command, a fake verdict). File formats escape
        as their own syntax requires."""
        return self.fn(one_line_values(subject) if self.terminal else subject)
