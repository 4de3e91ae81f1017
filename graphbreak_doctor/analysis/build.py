"""Raw capture results -> findings: merge, classify, attach fixes and JIT requests."""

from __future__ import annotations

import hashlib

from graphbreak_doctor.analysis.classify import classify, culprit_of
from graphbreak_doctor.analysis.fixes import suggest
from graphbreak_doctor.frames import actionable_frame, make_frame, package_of, stdlib_module
from graphbreak_doctor.analysis.group import root_causes
from graphbreak_doctor.analysis.registry import gb_id_for
from graphbreak_doctor.capture.events import BreakEvent
from graphbreak_doctor.capture.run import ModeResult
from graphbreak_doctor.findings import (
    Break,
    DecompiledCode,
    Findings,
    FullgraphVerdict,
    Hazard,
    JitRequest,
    TargetInfo,
)

# Dynamo reports these when it cannot resume after an earlier break; they
# belong to that break (the hint says so), not to a cause of their own.
_FOLLOW_UP = frozenset({"Reconstruction failure", "graph break in loop"})


def _break_id(gb_type: str, site: str, culprit: str, actionable: str) -> str:
    return hashlib.sha1(f"{gb_type}|{site}|{culprit}|{actionable}".encode()).hexdigest()[:10]


def _new_break(event: BreakEvent) -> Break:
    msg = event.message
    culprit = culprit_of(msg.explanation, msg.context)
    stack = event.stack or ([event.site] if event.site else [])
    category = classify(event.gb_type, culprit, stack)
    actionable = actionable_frame(stack)
    site = event.site or make_frame("<unknown>", 0, "<unknown>")
    via = _via(stack, actionable) or culprit
    return Break(
        id=_break_id(event.gb_type, site.location(), culprit, actionable.location() if actionable else ""),
        category=category,
        gb_id=gb_id_for(event.gb_type, msg.doc_id),
        gb_type=event.gb_type,
        explanation=msg.explanation,
        hints=msg.hints,
        culprit=culprit,
        via=via,
        site=site,
        actionable_frame=actionable,
        package=package_of(actionable.file) if actionable else "torch",
        stack=stack,
        count=0,
        modes=[],
        fix=suggest(category, entry_call=via, culprit=culprit, actionable=actionable, stack=stack),
        reason=msg.context,
    )


def _via(stack: list, actionable) -> str:
    """'module.qualname' of the callee of the actionable frame, if it has one."""
    if actionable is None or actionable not in stack:
        return ""
    i = stack.index(actionable)
    if i + 1 >= len(stack):
        return ""
    callee = stack[i + 1]
    module = stdlib_module(callee) or package_of(callee.file)
    return f"{module}.{callee.qualname}"


def _caused_by(event: BreakEvent, earlier: list[Break]) -> Break | None:
    """The earlier break whose stack runs through this follow-up's site."""
    if event.gb_type not in _FOLLOW_UP or event.site is None:
        return None
    for b in reversed(earlier):
        if any(f.file == event.site.file and f.line == event.site.line for f in b.stack):
            return b
    return None


def merge_events(results: list[ModeResult]) -> list[Break]:
    """Distinct breaks in first-seen order; repeats are counted, not lost."""
    breaks: dict[str, Break] = {}
    by_site: dict[tuple[str, str], Break] = {}
    for result in results:
        for event in result.events:
            b = by_site.get((event.gb_type, event.site.location())) if event.duplicate and event.site else None
            if b is None:
                candidate = _new_break(event)
                b = breaks.get(candidate.id)
                if b is None:
                    parent = _caused_by(event, list(breaks.values()))
                    if parent is not None:
                        candidate.category, candidate.fix, candidate.caused_by = parent.category, parent.fix, parent.id
                    b = breaks[candidate.id] = candidate
                by_site[(b.gb_type, b.site.location())] = b
            b.count += 1
            if result.mode not in b.modes:
                b.modes.append(result.mode)
            # A JIT request seen after a follow-up belongs to the break it follows.
            owner = breaks.get(b.caused_by, b)
            for name, action in event.jit:
                if not any(j.name == name and j.action == action for j in owner.jit):
                    owner.jit.append(JitRequest(name=name, action=action, break_id=owner.id))
    return list(breaks.values())


def build_findings(
    results: list[ModeResult],
    *,
    target: TargetInfo,
    environment: dict,
    device: dict,
    jit_requests: list[JitRequest] | None = None,
) -> Findings:
    breaks = merge_events(results)
    findings = Findings(target=target, environment=environment, device=device, modes=[r.mode for r in results])
    for result in results:
        if result.mode in ("fullgraph", "piecewise"):
            first = _new_break(result.events[0]).id if result.events else ""
            findings.fullgraph = FullgraphVerdict(ran=True, ok=bool(result.ok), error=result.error, break_id=first, crashed=result.crashed)
        findings.graphs.extend(result.graphs)
    # A crash in any mode (explain may crash after the break fullgraph stops at)
    # makes the whole diagnosis a crash: the gate reports it as such (exit 3).
    crashed = [r for r in results if r.crashed]
    if crashed:
        findings.fullgraph.crashed = True
        findings.fullgraph.error = f"{crashed[0].error} (in {crashed[0].mode} mode)"
    findings.graph_count = sum(1 for g in findings.graphs if g.mode == "explain") or len(findings.graphs)
    findings.breaks = breaks
    findings.hazards = _hazards(results)
    findings.root_causes = root_causes(breaks)
    findings.jit_requests = jit_requests or []
    findings.resume_code = _decompiled(results)
    findings.unparsed_events = [u for r in results for u in r.unparsed]
    return findings


def _decompiled(results: list[ModeResult]) -> list[DecompiledCode]:
    """depyf's view of the bytecode Dynamo generated, one entry per (mode, frame)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for result in results:
        for name, source in result.resume_code:
            if (result.mode, name) in seen:
                continue
            seen.add((result.mode, name))
            out.append(DecompiledCode(name=name, mode=result.mode, source=source))
    return out


def _hazards(results: list[ModeResult]) -> list[Hazard]:
    merged: dict[tuple[str, str], Hazard] = {}
    for result in results:
        for h in result.hazards:
            site = make_frame(h.file, h.line, "") if h.file else None
            key = (h.kind, h.message)
            if key in merged:
                merged[key].count += 1
            else:
                merged[key] = Hazard(kind=h.kind, message=h.message, site=site)
    return list(merged.values())
