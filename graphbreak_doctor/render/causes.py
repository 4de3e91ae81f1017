"""Each root cause's fixes, each fix shown once: what the terminal and the
HTML report print beside every root cause."""

from __future__ import annotations

from typing import NamedTuple

from graphbreak_doctor.model import Findings, Fix


class CauseFix(NamedTuple):
    fix: Fix
    # 0 where this cause shows the fix first, else the number (from 1) of the
    # earlier cause that shows it.
    earlier: int
    # Where the change is made, without the function it is made in.
    at: str


def cause_fixes(findings: Findings) -> list[list[CauseFix]]:
    """Per root cause (in order), the distinct fixes of the breaks it removes."""
    shown: dict[tuple[str, str], int] = {}
    out: list[list[CauseFix]] = []
    for i, cause in enumerate(findings.root_causes, 1):
        members = [findings.break_by_id(bid) for bid in cause.break_ids]
        own = {(b.fix.summary, b.fix.where): b.fix for b in members if b is not None and b.fix.summary}
        row = []
        for key, fix in own.items():
            row.append(CauseFix(fix, shown.get(key, 0), fix.where.split(", in ", 1)[0]))
            shown.setdefault(key, i)
        out.append(row)
    return out
