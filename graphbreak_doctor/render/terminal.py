"""The short terminal summary: the verdict and counts, the root causes with
their fixes (each fix once), then one entry per distinct break, naming its
root cause's number instead of repeating the fix."""

from __future__ import annotations

from graphbreak_doctor.model import COMPLETE, MAP_MODE, Findings, Fix
from graphbreak_doctor.model.cache_facts import cache_note, not_kept_note
from graphbreak_doctor.render import compile_map, cudagraph, sizes, warm
from graphbreak_doctor.render.causes import cause_fixes
from graphbreak_doctor.frames import at as frame_at
from graphbreak_doctor.render.renderer import FINDINGS, Renderer
from graphbreak_doctor.text import counted as _n


def describe_target(findings: Findings) -> str:
    """'<title> (k=v, ...)': what was traced, whatever provider built it."""
    t = findings.target
    shapes = ", ".join(f"{k}={v}" for k, v in t.shapes.items() if v is not None)
    return f"{t.display()} ({shapes})" if shapes else t.display()


def describe_device(findings: Findings) -> str:
    d = findings.device
    if d.get("emulated"):
        return f"{d.get('name')} (emulated {d.get('gpu', '')}, capability {d.get('capability', '?')})"
    return d.get("name", "?")


def _fix_lines(fix: Fix) -> list[str]:
    return _fix_head(fix) + _inside_library(fix)


def _fix_head(fix: Fix) -> list[str]:
    """The fix and, when the fix ladder proved it, how."""
    where = f" ({fix.where})" if fix.where else ""
    lines = [f"      fix: {fix.summary}{where}"]
    if fix.verified:
        lines.append(f"      verified: {fix.verification}")
    return lines


def _inside_library(fix: Fix) -> list[str]:
    """The change inside the library, for a fix made where the user's code calls it."""
    if fix.secondary is None:
        return []
    inner = f" ({fix.secondary.where})" if fix.secondary.where else ""
    return [f"      or inside the library: {fix.secondary.summary}{inner}"]


def render(findings: Findings) -> str:
    lines = []
    env = findings.environment
    versions = ", ".join(f"{k} {v}" for k, v in env.items() if v and k != "python")
    lines.append(f"target: {describe_target(findings)}")
    lines.append(f"device: {describe_device(findings)}; {versions}")
    if cache_note(findings.cache) or not_kept_note(findings.cache):
        lines.append(f"cache: {cache_note(findings.cache) or not_kept_note(findings.cache)}")
    for note in findings.target.notes:
        lines.append(f"note: {note}")
    if findings.unparsed_events:
        lines.append(f"UNPARSED: {_n(len(findings.unparsed_events), 'break report')} could not be parsed; "
                     f"the breaks below are incomplete (first: {findings.unparsed_events[0].reason})")
    fg = findings.fullgraph
    if fg.crashed:
        at = f" -- at {frame_at(fg.site)} ({fg.site.qualname or fg.site.function})" if fg.site else ""
        lines.append(f"{findings.outcome.upper() if findings.outcome != COMPLETE else 'CRASHED'}: "
                     f"{findings.incomplete()}{at}")
    if fg.ran:
        first = findings.break_by_id(fg.break_id)
        if fg.ok:
            lines.append("fullgraph: OK -- the whole target is captured as one graph")
            if fg.note:
                lines.append(f"  {fg.note}")
        elif first is not None:
            lines.append(f"fullgraph: FAILED -- {first.gb_type} [{first.category}] at {frame_at(first.site)}")
        elif not fg.crashed:
            lines.append(f"fullgraph: FAILED -- {fg.error}")
    lines.extend(warm.lines(findings))
    if findings.sized is not None:
        lines.append(f"sizes: {sizes.summary(findings.sized)}")
        lines.extend(f"  {line}" for line in sizes.call_lines(findings.sized))
        if sizes.fix_line(findings.sized):
            lines.append(f"  fix: {sizes.fix_line(findings.sized)}")
    hits = sum(b.count for b in findings.breaks)
    explain_graphs = sum(1 for g in findings.graphs if g.mode == "explain")
    pieces = [g.pieces for g in findings.graphs if g.pieces]
    if pieces:
        lines.append(f"piecewise: the graph splits into {sum(pieces)} pieces at {', '.join(findings.target.split_ops)}")
    if findings.modes == [MAP_MODE]:  # a map alone: its verdict is its regions'
        lines.append(f"compile map: {compile_map.summary(findings)}")
    else:
        lines.append(
            f"breaks: {_n(len(findings.breaks), 'distinct break')} ({_n(hits, 'hit')}), "
            f"{_n(len(findings.root_causes), 'root cause')}"
            + (f"; explain captured {_n(explain_graphs, 'graph')}" if "explain" in findings.modes else "")
        )
    if findings.breaks:
        cats = ", ".join(f"{k} {v}" for k, v in sorted(findings.categories().items()))
        lines.append(f"by category: {cats}")
    if findings.message_fallbacks:
        read = sum(1 for b in findings.breaks if b.fallbacks)
        facts = ", ".join(f"{k} {v}" for k, v in findings.message_fallbacks.items())
        lines.append(f"read from Dynamo's message text, not its objects: {read} of "
                     f"{_n(len(findings.breaks), 'break')} ({facts})")
    numbers = _cause_numbers(findings)
    lines.extend(_root_cause_lines(findings))
    if findings.breaks:
        lines.append("the breaks, as Dynamo reported them:")
    for b in findings.breaks:
        act = b.actionable_frame
        via = f" <- {frame_at(act)} {act.qualname} ({b.package})" if act and act != b.site else ""
        modes = "+".join(b.modes)
        lines.append(f"  [{b.category}] {frame_at(b.site)}{via}  x{b.count} {modes}  ({b.id})")
        lines.append(f"      {b.gb_type}{': ' + b.culprit if b.culprit else ''}")
        cause = findings.break_by_id(b.caused_by) if b.caused_by else None
        if b.caused_by:
            lines.append(f"      follows from {b.caused_by}" + (
                f": {cause.gb_type} at {frame_at(cause.site)}" if cause else ""))
        if b.id in numbers:  # its fix is its root cause's, shown once above
            lines.append(f"      fix: root cause #{numbers[b.id]}")
            lines.extend(_inside_library(b.fix))
        else:
            lines.extend(_fix_lines(b.fix))
        for j in b.jit:
            lines.append(f"      JIT: this call {j.action}s {j.name} at trace time")
    lines.extend(_behind_ops(findings))
    lines.extend(compile_map.terminal_lines(findings))
    if findings.cudagraphs is not None:  # what the server captures, after what it compiles
        lines.append(f"CUDA-graph map: {cudagraph.summary(findings.cudagraphs)}")
        lines.extend(f"  {line}" for line in cudagraph.lines(findings.cudagraphs))
    lines.extend(f"stand-in: {s}" for s in findings.target.stand_ins)
    kinds: dict[str, list] = {}
    for h in findings.hazards:
        kinds.setdefault(h.kind, []).append(h)
    for kind, hazards in kinds.items():
        sites = [frame_at(h.site) for h in hazards if h.site]
        shown = ", ".join(sites[:4]) + (f", +{len(sites) - 4} more" if len(sites) > 4 else "")
        first = hazards[0].message.splitlines()[0]
        if kind == "lru_cache":
            first = "Dynamo ignores the lru_cache wrapper and traces the wrapped function"
        lines.append(f"hazard [{kind}] x{len(hazards)}: {first[:160]}" + (f" ({shown})" if shown else ""))
    if findings.unparsed_events:
        lines.append(f"NOT PARSED: {_n(len(findings.unparsed_events), 'item')} the doctor could not read as a break:")
        for u in findings.unparsed_events:
            lines.append(f"  {u.source}: {u.reason}")
            lines.extend(f"      | {line[:160]}" for line in u.excerpt.splitlines()[:3])
    return "\n".join(lines) + "\n"


def _cause_numbers(findings: Findings) -> dict[str, int]:
    """Break id -> the number of the root cause it is filed under (from 1)."""
    numbers: dict[str, int] = {}
    for i, cause in enumerate(findings.root_causes, 1):
        for bid in cause.break_ids:
            numbers.setdefault(bid, i)
    return numbers


def _root_cause_lines(findings: Findings) -> list[str]:
    """The root causes in the findings' order (the user's own code first), each
    with the breaks it removes and its fix; a fix shown under an earlier cause
    is named by that cause's number, not repeated."""
    if not findings.root_causes:
        return []
    fixes = {(b.fix.summary, b.fix.where) for b in findings.breaks if b.fix.summary}
    lines = [f"root causes (change one, remove its breaks; {_n(len(fixes), 'distinct fix', 'distinct fixes')}):"]
    for i, (cause, own) in enumerate(zip(findings.root_causes, cause_fixes(findings)), 1):
        frame = cause.frame
        lines.append(f"  #{i} {frame.qualname or frame.function} ({cause.package}) at {frame_at(frame)}: "
                     f"removes {_n(len(cause.break_ids), 'break')} ({', '.join(cause.break_ids)})")
        for fix, earlier, at in own:
            if earlier:
                lines.append(f"      fix: as #{earlier}" + (f" ({at})" if at else ""))
            else:
                lines.extend(_fix_head(fix))
    return lines


def _behind_ops(findings: Findings) -> list[str]:
    """What runs inside the registered ops the graph calls: why a clean trace is clean."""
    ops = findings.registered_ops()
    if not ops:
        return []
    head = ("why it is clean: the library code runs inside registered ops, where Dynamo does not trace:"
            if findings.clean() else "registered ops in the graph (Dynamo does not trace into them):")
    known = findings.target.opaque_ops
    return [head] + [f"  {op}" + (f": {known[op]}" if op in known else "") for op in ops]


RENDERER = Renderer("terminal", FINDINGS, render, help="the short summary a trace prints")
