"""Verified fixes: apply each suggested fix in-process, re-trace, and report the ladder.

    findings = fix(build, device="sm120")      # findings.ladder: one Rung per step

The recipes live in graphbreak_doctor.recipes; every patch goes through a
graphbreak_doctor.patching.PatchSet and is undone; nothing on disk is modified.
"""

from graphbreak_doctor.fix.ladder import DEFAULT_STEPS, FixSession, LadderOutcome, fix

__all__ = ["DEFAULT_STEPS", "FixSession", "LadderOutcome", "fix"]
