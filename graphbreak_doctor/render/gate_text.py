"""The gate's verdict as text: which checks failed, why, and where.

Shared by ``graphbreak-doctor check`` and the assertion messages of
graphbreak_doctor.testing, so a failing CI job and a failing unit test read
the same.
"""

from __future__ import annotations

from graphbreak_doctor.model import COMPLETE, Break, GateReport, TargetResult
from graphbreak_doctor.frames import at
from graphbreak_doctor.model.cache_facts import cache_note, not_kept_note
from graphbreak_doctor.render.renderer import GATE, Renderer


def location(b: Break) -> str:
    """Where to look: the actionable frame (the code someone can change), else the site."""
    frame = b.actionable_frame or b.site
    return at(frame)


def describe_break(b: Break, indent: str = "  ") -> list[str]:
    act = b.actionable_frame
    owner = f" in {act.qualname} ({b.package})" if act else f" ({b.package})"
    lines = [
        f"{indent}[{b.category}] {location(b)}{owner}  x{b.count} {'+'.join(b.modes)}",
        f"{indent}    {b.gb_type}{': ' + b.culprit if b.culprit else ''}",
    ]
    if act and (act.file, act.line) != (b.site.file, b.site.line):
        lines.append(f"{indent}    Dynamo stopped at {at(b.site)}")
    if b.caused_by:
        lines.append(f"{indent}    follows from break {b.caused_by}")
    lines.append(f"{indent}    fix: {b.fix.summary}")
    return lines


def _stopped(t: TargetResult) -> str:
    """CRASHED, TIMED OUT or INTERRUPTED: why a target's checks could not pass."""
    return t.findings.outcome.upper() if t.findings.outcome != COMPLETE else "CRASHED"


def target_result_lines(t: TargetResult, device: str) -> list[str]:
    lines = []
    if cache_note(t.findings.cache):
        lines.append(f"{t.name} [{device}]: verdict {cache_note(t.findings.cache)}")
    elif not_kept_note(t.findings.cache):
        lines.append(f"{t.name} [{device}]: traced; {not_kept_note(t.findings.cache)}")
    if t.crashed and not t.cases:  # nothing to check (an input cut short): why, in its own words
        lines.append(f"{t.name} [{device}]: {_stopped(t)}: {t.findings.incomplete()}")
    for case in t.cases:
        status = _stopped(t) if case.crashed else "passed" if case.passed else "FAILED"
        lines.append(f"{t.name} [{case.mode}, {device}]: {status}")
        if case.crashed:
            lines.append(f"  {case.crashed}")
        for failure in case.failures:
            lines.append(f"  {failure.check}: {failure.reason}")
    failing = t.failing_breaks()
    if failing:
        lines.append(f"  {t.name}: breaks named by a failed check:")
        for b in failing:
            lines.extend(describe_break(b, "    "))
    if t.disappeared:
        lines.append(f"  baseline: {len(t.disappeared)} accepted break(s) no longer seen; "
                     "shrink the baseline with `graphbreak-doctor baseline write`:")
        lines.extend(f"    - {e.describe()}" for e in t.disappeared)
    return lines


def render(report: GateReport) -> str:
    lines = [f"note: {n}" for n in report.notes]
    for t in report.targets:
        lines.extend(target_result_lines(t, report.device))
    cases = [c for t in report.targets for c in t.cases]
    failed = [c for c in cases if not c.passed]
    if report.crashed:
        stopped = sorted({_stopped(t) for t in report.targets if t.crashed})
        lines.append(f"gate: {' and '.join(stopped)} ({len(failed)} of {len(cases)} checks did not pass)")
    elif failed:
        checks = sorted({f.check for c in failed for f in c.failures})
        lines.append(f"gate: FAILED ({len(failed)} of {len(cases)} target x mode checks failed: {', '.join(checks)})")
    else:
        lines.append(f"gate: passed ({len(cases)} target x mode check{'s' if len(cases) != 1 else ''})")
    return "\n".join(lines) + "\n"


RENDERER = Renderer("gate", GATE, render, help="the gate verdict a check prints")
