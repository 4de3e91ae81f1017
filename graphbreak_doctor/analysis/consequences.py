"""Consequential breaks: breaks Dynamo reports only because an earlier one
happened. "graph break in loop" (GB7000) skips the frame of a loop whose
body breaks; a reconstruction failure or a break under a generic context
manager follows a break Dynamo could not resume from. Dynamo's registry gives
them the hint ``graph_break_hints.CAUSED_BY_EARLIER_GRAPH_BREAK``
(analysis/registry.py).

Such a break is linked to its cause -- the break Dynamo raised it from when
it says (capture reads ``unimplemented(from_exc=...)``), else the latest
earlier break in the same frame -- and takes the cause's category and fix.
It is filed under the cause's root cause, never as one of its own.
"""

from __future__ import annotations

from graphbreak_doctor.analysis.registry import caused_by_earlier_hint, consequential_ids
from graphbreak_doctor.model import Break


def is_consequential(brk: Break) -> bool:
    return brk.gb_id in consequential_ids() or caused_by_earlier_hint() in brk.hints


def follow(brk: Break, cause: Break) -> None:
    """``brk`` follows from ``cause``: it takes the cause's category and fix."""
    brk.caused_by = cause.id
    brk.category = cause.category
    brk.fix = cause.fix


def _cause_in(brk: Break, candidates: list[Break]) -> Break | None:
    """The latest candidate whose stack runs through the follow-up's line,
    else through the frame (function) it was reported in."""
    site = brk.site
    usable = [b for b in candidates if b.id != brk.id and not is_consequential(b)]
    for same in (lambda f: f.file == site.file and f.line == site.line,
                 lambda f: f.file == site.file and (f.qualname or f.function) == (site.qualname or site.function)):
        found = [b for b in usable if any(same(f) for f in b.stack or [b.site])]
        if found:
            return found[-1]
    return None


def link(breaks: list[Break]) -> None:
    """Link each consequential break that is not linked yet: to an earlier
    break in its frame, else to any break there (the cause may have been seen
    in another mode)."""
    for i, brk in enumerate(breaks):
        if brk.caused_by or not is_consequential(brk):
            continue
        cause = _cause_in(brk, breaks[:i]) or _cause_in(brk, breaks[i + 1:])
        if cause is not None:
            follow(brk, cause)
