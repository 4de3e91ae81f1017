"""Each root cause's fixes, each fix shown once: what the terminal and the
HTML report print beside every root cause."""

from __future__ import annotations

from graphbreak_doctor.model import Findings, Fix


def cause_fixes(findings: Findings) -> list[list[tuple[Fix, int]]]:
    """Per root cause (in order), the distinct fixes of the breaks it removes,
    each with 0 where it is shown first, or the number (from 1) of the
    earlier cause that already showed it."""
    shown: dict[tuple[str, str], int] = {}
    out: list[list[tuple[Fix, int]]] = []
    for i, cause in enumerate(findings.root_causes, 1):
        members = [findings.break_by_id(bid) for bid in cause.break_ids]
        own = {(b.fix.summary, b.fix.where): b.fix for b in members if b is not None and b.fix.summary}
        row = []
        for key, fix in own.items():
            row.append((fix, shown.get(key, 0)))
            shown.setdefault(key, i)
        out.append(row)
    return out
