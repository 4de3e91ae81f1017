"""The located problems of one checked target (``TargetResult.located``):
its breaks, its distinct CUDA-graph capture hazards and its recompile-limit
hit, each with the checks that fail on it and its place against the
baseline, in that order (breaks in findings order)."""

from __future__ import annotations

from typing import Callable

from graphbreak_doctor.frames import package_of
from graphbreak_doctor.gate.baseline import hazard_key
from graphbreak_doctor.model import CheckFailure, TargetResult
from graphbreak_doctor.model.located import (ACCEPTED, BREAK, HAZARD, NEW, NOT_COUNTED, RECOMPILE_LIMIT,
                                             Located)


def locate(result: TargetResult) -> list[Located]:
    """Every problem of ``result`` that a renderer can point at."""
    return _breaks(result) + _hazards(result) + _recompile_limit(result)


def _failing(result: TargetResult, named: Callable[[CheckFailure], bool]) -> tuple[str, ...]:
    """The checks that fail on a problem (``named(failure)``: whether the failure names it)."""
    return tuple(sorted({f.check for c in result.cases for f in c.failures if named(f)}))


def _breaks(result: TargetResult) -> list[Located]:
    new = {b.id for b in result.new}
    counted = {b.id for b in result.counted}
    out = []
    for b in result.findings.breaks:
        frame = b.actionable_frame or b.site
        culprit = f": {b.culprit}" if b.culprit else ""
        baseline = "" if not result.baseline_used else NEW if b.id in new else ACCEPTED if b.id in counted else NOT_COUNTED
        out.append(Located(
            kind=BREAK, category=b.category, frame=frame, package=b.package, key=b.key(),
            message=f"graph break [{b.category}] in {frame.qualname or frame.function} ({b.package}): {b.gb_type}{culprit}",
            checks=_failing(result, lambda f, b=b: any(x.id == b.id for x in f.breaks)),
            baseline=baseline, fix=b.fix.summary, subject=b))
    return out


def _hazards(result: TargetResult) -> list[Located]:
    """One per distinct hazard (category, line, what ran): a server captures
    the same code at each of its sizes."""
    found = result.findings.cudagraphs
    out: list[Located] = []
    seen: set[tuple] = set()
    for h in found.hazards() if found is not None else []:
        site = h.site
        where = (h.category, site.file if site else "", site.line if site else 0, h.what)
        if where in seen:
            continue
        seen.add(where)
        key = hazard_key(h)
        checks = _failing(result, lambda f, key=key: any(hazard_key(x) == key for x in f.hazards))
        package = package_of(site.file) if site else ""
        name = f" in {site.qualname or site.function} ({package})" if site else ""
        out.append(Located(
            kind=HAZARD, category=h.category, frame=site, package=package, key=key,
            message=f"CUDA-graph capture hazard [{h.category}]{name}: {h.what}", checks=checks,
            baseline="" if not result.baseline_used else NEW if checks else ACCEPTED,
            fix=h.fix_text, subject=h))
    return out


def _recompile_limit(result: TargetResult) -> list[Located]:
    sized = result.findings.sized
    if sized is None or not sized.verdict:
        return []
    return [Located(kind=RECOMPILE_LIMIT, category=RECOMPILE_LIMIT, message=sized.verdict, frame=None, package="",
                    key=(RECOMPILE_LIMIT, result.findings.target.function or result.name),
                    checks=_failing(result, lambda f: f.check == RECOMPILE_LIMIT),
                    fix=sized.fix_text, subject=sized)]


__all__ = ["locate"]
