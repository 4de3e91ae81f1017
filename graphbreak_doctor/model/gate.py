"""What `check` decided, per target and traced mode (graphbreak_doctor.gate
evaluates; renderers in graphbreak_doctor.render show it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from graphbreak_doctor.model.baseline import BaselineEntry
from graphbreak_doctor.model.cudagraph import CudaGraphHazard
from graphbreak_doctor.model.findings import Break, Findings
from graphbreak_doctor.model.located import Located


@dataclass
class CheckFailure:
    check: str
    reason: str
    breaks: list[Break] = field(default_factory=list)
    # The CUDA-graph capture hazards it fails on.
    hazards: list[CudaGraphHazard] = field(default_factory=list)


@dataclass
class CaseResult:
    """One target in one mode: a JUnit testcase."""

    target: str
    mode: str
    counted: list[Break]
    failures: list[CheckFailure] = field(default_factory=list)
    crashed: str = ""

    @property
    def passed(self) -> bool:
        return not self.failures and not self.crashed


@dataclass
class TargetResult:
    name: str
    findings: Findings
    cases: list[CaseResult]
    # Breaks that count (package filters) and the baseline's view of them.
    counted: list[Break]
    new: list[Break] = field(default_factory=list)
    disappeared: list[BaselineEntry] = field(default_factory=list)
    baseline_used: bool = False
    # Every problem at the line to change -- breaks, capture hazards,
    # recompile-limit hits -- with what the checks made of it
    # (graphbreak_doctor/gate/located.py): what renderers that point at code read.
    located: list[Located] = field(default_factory=list)

    @property
    def crashed(self) -> bool:
        """The diagnosis is not whole: the target crashed under Dynamo, or a
        break report could not be parsed (the gate cannot vouch for it)."""
        return bool(self.findings.incomplete())

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    def failing_breaks(self) -> list[Break]:
        """Breaks that a failed check names, each once, in findings order."""
        ids = {b.id for c in self.cases for f in c.failures for b in f.breaks}
        return [b for b in self.findings.breaks if b.id in ids]


@dataclass
class GateReport:
    device: str
    targets: list[TargetResult]
    # Context for the reader (a baseline written with other library versions).
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(t.passed for t in self.targets)

    @property
    def crashed(self) -> bool:
        return any(t.crashed for t in self.targets)
