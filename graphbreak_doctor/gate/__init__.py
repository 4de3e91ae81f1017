"""The CI gate: checks over findings (policy) and accepted breaks (baseline).

The gate's report model lives in graphbreak_doctor.model (GateReport); its
renderers in graphbreak_doctor.render; the command line in graphbreak_doctor.cli.
"""

from graphbreak_doctor.gate.baseline import Baseline, BaselineError, TargetBaseline
from graphbreak_doctor.gate.policy import Policy, evaluate

__all__ = ["Baseline", "BaselineError", "Policy", "TargetBaseline", "evaluate"]
