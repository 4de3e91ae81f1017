"""Raw capture results -> findings: merge, classify, attach fixes and JIT requests."""

from __future__ import annotations

import hashlib

from graphbreak_doctor.analysis import consequences
from graphbreak_doctor.analysis.classify import advice_for, culprit_of, match
from graphbreak_doctor.analysis.fixes import suggest
from graphbreak_doctor.frames import actionable_frame, make_frame, package_of, stdlib_module
from graphbreak_doctor.analysis.group import root_causes
from graphbreak_doctor.analysis.registry import gb_id_for
from graphbreak_doctor.capture.events import BreakEvent
from graphbreak_doctor.capture.result import ModeResult
from graphbreak_doctor.model import (
    Break,
    DecompiledCode,
    Fix,
    Findings,
    FullgraphVerdict,
    Hazard,
    JitRequest,
    SourceExcerpt,
    TargetInfo,
)

def _break_id(gb_type: str, site: str, culprit: str, actionable: str) -> str:
    return hashlib.sha1(f"{gb_type}|{site}|{culprit}|{actionable}".encode()).hexdigest()[:10]


def _new_break(event: BreakEvent) -> Break:
    msg = event.message
    fallbacks = list(event.fallbacks)
    culprit = event.culprit
    if not culprit:
        culprit = culprit_of(msg.explanation, msg.context)
        if culprit:
            fallbacks.append("culprit")
    gb_id = gb_id_for(event.gb_type)
    if not gb_id and msg.doc_id:
        gb_id = msg.doc_id
        fallbacks.append("gb_id")
    stack = event.stack or ([event.site] if event.site else [])
    category, rule = match(gb_id, culprit, stack, event.exceptions)
    actionable = actionable_frame(stack)
    site = event.site or make_frame("<unknown>", 0, "<unknown>")
    via = _via(stack, actionable) or culprit
    brk = Break(
        # The id reads the culprit from Dynamo's message text, never from its
        # objects: a break read back from a log (ingest) has only the text and
        # must get the same id as the live trace of the same run.
        id=_break_id(event.gb_type, site.location(), culprit_of(msg.explanation, msg.context),
                     actionable.location() if actionable else ""),
        category=category.name,
        gb_id=gb_id,
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
        fix=Fix("", "", "", ""),
        reason=msg.context,
        exceptions=list(event.exceptions),
        fallbacks=sorted(set(fallbacks)),
    )
    brk.fix = suggest(brk, advice_for(category, rule))
    return brk


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


def merge_events(results: list[ModeResult]) -> list[Break]:
    """Distinct breaks in first-seen order; repeats are counted, not lost.
    A follow-up break is linked to the break Dynamo raised it from, else to
    an earlier break in its frame (analysis/consequences.py)."""
    breaks: dict[str, Break] = {}
    by_site: dict[tuple[str, str], Break] = {}
    of_event: dict[int, Break] = {}
    for result in results:
        for event in result.events:
            b = by_site.get((event.gb_type, event.site.location())) if event.duplicate and event.site else None
            if b is None:
                candidate = _new_break(event)
                b = breaks.get(candidate.id)
                if b is None:
                    b = breaks[candidate.id] = candidate
                    parent = of_event.get(id(event.cause)) if event.cause is not None else None
                    if parent is not None and parent is not b:
                        consequences.follow(b, parent)
                by_site[(b.gb_type, b.site.location())] = b
            of_event[id(event)] = b
            b.count += 1
            if result.mode not in b.modes:
                b.modes.append(result.mode)
            # A JIT request seen after a follow-up belongs to the break it follows.
            owner = breaks.get(b.caused_by, b)
            for name, action in event.jit:
                if not any(j.name == name and j.action == action for j in owner.jit):
                    owner.jit.append(JitRequest(name=name, action=action, break_id=owner.id))
    out = list(breaks.values())
    consequences.link(out)
    return out


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
            findings.fullgraph = FullgraphVerdict(ran=True, ok=bool(result.ok), error=result.error, break_id=first,
                                                  crashed=result.crashed, site=result.crash_site)
        findings.graphs.extend(result.graphs)
    # A crash in any mode (explain may crash after the break fullgraph stops at)
    # makes the whole diagnosis a crash: the gate reports it as such (exit 3).
    crashed = [r for r in results if r.crashed]
    if crashed:
        findings.fullgraph.crashed = True
        findings.fullgraph.error = f"{crashed[0].error} (in {crashed[0].mode} mode)"
        findings.fullgraph.site = crashed[0].crash_site
    findings.graph_count = sum(1 for g in findings.graphs if g.mode == "explain") or len(findings.graphs)
    findings.breaks = breaks
    findings.hazards = _hazards(results)
    findings.root_causes = root_causes(breaks)
    findings.jit_requests = jit_requests or []
    findings.resume_code = _decompiled(results)
    findings.unparsed_events = [u for r in results for u in r.unparsed]
    findings.count_fallbacks()
    return findings


# Lines shown above and below a frame's line in the report.
SOURCE_CONTEXT = 3


def record_source(findings: Findings, context: int = SOURCE_CONTEXT) -> None:
    """Keep, in each break, the source lines around its site and its
    actionable frame, read here -- where the trace ran and its files are the
    ones it traced. Renderers show only these. Not for findings ingested from
    a log: its paths name files of another machine."""
    import linecache

    for b in findings.breaks:
        for frame in (b.site, b.actionable_frame):
            if frame is None or not frame.file or frame.file.startswith("<") or b.excerpt_for(frame) is not None:
                continue
            lines = linecache.getlines(frame.file)
            if not 1 <= frame.line <= len(lines):
                continue
            lo, hi = max(1, frame.line - context), min(len(lines), frame.line + context)
            b.excerpts.append(SourceExcerpt(frame.file, lo, [line.rstrip("\r\n") for line in lines[lo - 1:hi]]))


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
