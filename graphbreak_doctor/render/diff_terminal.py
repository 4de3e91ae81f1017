"""The terminal form of a diff of two diagnoses."""

from __future__ import annotations

from graphbreak_doctor.model import BaselineEntry
from graphbreak_doctor.model.diff import FindingsDiff
from graphbreak_doctor.render.renderer import DIFF, Renderer
from graphbreak_doctor.text import counted as _n


def _entry(e: BaselineEntry) -> str:
    hits = f" x{e.count}" if e.count != 1 else ""
    return f"[{e.category}] {e.qualname or '?'} ({e.package}): {e.gb_type}{hits}" + (f" -- {e.hint}" if e.hint else "")


def render(d: FindingsDiff) -> str:
    lines = [
        f"A: {d.a.label} ({d.a.target}): fullgraph {d.a.verdict}, {_n(d.a.breaks, 'distinct break')}",
        f"B: {d.b.label} ({d.b.target}): fullgraph {d.b.verdict}, {_n(d.b.breaks, 'distinct break')}",
    ]
    if d.verdict:
        lines.append(f"verdict changed: fullgraph {d.verdict.a} -> {d.verdict.b}"
                     + (f" ({d.b.error})" if d.verdict.b == "failed" and d.b.error else ""))
    else:
        lines.append(f"verdict unchanged: fullgraph {d.a.verdict}")
    for title, changes in (("versions", d.versions), ("device", d.device)):
        if changes:
            lines.append(f"{title}: " + "; ".join(f"{c.what} {c.a or 'none'} -> {c.b or 'none'}" for c in changes))
    lines.append(f"breaks: {len(d.only_a)} only in A, {len(d.only_b)} only in B, {len(d.both)} in both "
                 f"(match rate {d.match_rate:.0%}; matched on category, package, function, gb_type)")
    for title, entries in (("only in A (gone in B)", d.only_a), ("only in B (new in B)", d.only_b)):
        if entries:
            lines.append(f"{title}:")
            lines.extend(f"  - {_entry(e)}" for e in entries)
    if d.both:
        lines.append("in both:")
        lines.extend(f"  = {_entry(p.b)}" for p in d.both)
    return "\n".join(lines) + "\n"


RENDERER = Renderer("diff", DIFF, render, help="the diff as terminal text")
