"""The breaks of raw capture results: each Dynamo event made a Break (its id,
category, culprit, actionable frame, suggested fix), repeats counted, follow-up
breaks linked to their cause, JIT requests filed under the break they came
after. graphbreak_doctor.analysis.assemble puts them into findings."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Iterable

from graphbreak_doctor.analysis import consequences
from graphbreak_doctor.analysis.classify import advice_for, culprit_of, match
from graphbreak_doctor.analysis.fixes import suggest
from graphbreak_doctor.analysis.registry import gb_id_for
from graphbreak_doctor.capture.events import BreakEvent
from graphbreak_doctor.capture.result import ModeResult
from graphbreak_doctor.frames import actionable_frame, frame_key, make_frame, package_of, stdlib_module
from graphbreak_doctor.model import Break, Fix, JitRequest


def add_jit(into: list[JitRequest], requests: Iterable[JitRequest]) -> list[JitRequest]:
    """Append each request not already in ``into`` (same name and action); ``into``."""
    have = {(j.name, j.action) for j in into}
    for j in requests:
        if (j.name, j.action) not in have:
            have.add((j.name, j.action))
            into.append(j)
    return into


def _break_id(gb_type: str, site: str, culprit: str, actionable: str) -> str:
    return hashlib.sha1(f"{gb_type}|{site}|{culprit}|{actionable}".encode()).hexdigest()[:10]


def new_break(event: BreakEvent) -> Break:
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
                candidate = new_break(event)
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
            add_jit(owner.jit, (JitRequest(name=name, action=action, break_id=owner.id) for name, action in event.jit))
    out = list(breaks.values())
    consequences.link(out)
    return out


def fold_lost_callers(breaks: list[Break]) -> tuple[list[Break], dict[str, str]]:
    """Breaks whose report lost the callers' frames, folded into the report of
    the same break that kept them; the breaks and {lost id: kept id}.

    Dynamo may report one break with a stack that ends before any frame
    someone can change: a repeat printed with its site only (read back from
    a log whose first report of it is in another file), or one mode's
    report with fewer frames than the other's. Such a break (no changeable
    frame on its stack) is the break of another report with the same
    ``gb_type`` and site whose stack ends with the same frames and has a
    changeable frame: its hits and modes are added there, and the kept
    report takes its place in the order. Where the reports that kept their
    frames disagree about the frame to change (two callers reach the same
    standard-library line), the lost one stays as it is."""
    remap: dict[str, str] = {}
    for lost in breaks:
        if lost.actionable_frame is not None or lost.id in remap:
            continue
        tail = [_at(f) for f in (lost.stack or [lost.site])]
        donors = [b for b in breaks if b is not lost and b.id not in remap and b.actionable_frame is not None
                  and b.gb_type == lost.gb_type and _at(b.site) == _at(lost.site)
                  and [_at(f) for f in b.stack[-len(tail):]] == tail]
        if not donors or len({frame_key(d.actionable_frame) for d in donors}) > 1:
            continue
        kept = donors[0]
        kept.count += lost.count
        kept.modes += [m for m in lost.modes if m not in kept.modes]
        add_jit(kept.jit, (dataclasses.replace(j, break_id=kept.id) for j in lost.jit))
        remap[lost.id] = kept.id
    if not remap:
        return breaks, remap
    by_id = {b.id: b for b in breaks}
    out: dict[str, Break] = {}
    for b in breaks:
        b = by_id[remap.get(b.id, b.id)]
        b.caused_by = remap.get(b.caused_by, b.caused_by)
        out.setdefault(b.id, b)
    return list(out.values()), remap


def _at(frame) -> tuple[str, int]:
    file, line, _function = frame_key(frame)
    return file, line


def first_break(result: ModeResult) -> Break | None:
    """The break a fullgraph trace stopped at (its first event), made alone:
    what the fix ladder needs of each re-trace, without the whole analysis."""
    return new_break(result.events[0]) if result.events else None
