"""The CI gate: checks over findings (policy), accepted breaks (baseline), the verdict."""

from graphbreak_doctor.gate.baseline import Baseline, BaselineEntry, BaselineError, TargetBaseline
from graphbreak_doctor.gate.policy import CaseResult, CheckFailure, GateReport, Policy, TargetResult, evaluate

__all__ = [
    "Baseline", "BaselineEntry", "BaselineError", "TargetBaseline",
    "CaseResult", "CheckFailure", "GateReport", "Policy", "TargetResult", "evaluate",
]
