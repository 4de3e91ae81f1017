"""Verified fixes: apply each suggested fix in-process, re-trace, and report the ladder.

    findings = fix(build, device="sm120")      # findings.ladder: one Rung per step

Monkeypatching happens here (patches.py) and in emulation/ only, always as a
context manager that restores what it touched; nothing on disk is modified.
"""

from graphbreak_doctor.fix.ladder import DEFAULT_STEPS, FixSession, LadderOutcome, fix
from graphbreak_doctor.fix.patches import OP_NAMESPACE, PatchSet

__all__ = ["DEFAULT_STEPS", "FixSession", "LadderOutcome", "OP_NAMESPACE", "PatchSet", "fix"]
