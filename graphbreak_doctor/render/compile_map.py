"""The compile map as rows every renderer shows the same way: per phase how
the launch runs its forward, then one row per torch.compile region a phase
entered (options, verdict, graphs, breaks), and how many were only
registered."""

from __future__ import annotations

from dataclasses import dataclass, field

from graphbreak_doctor.model import Findings, Region
from graphbreak_doctor.frames import at
from graphbreak_doctor.text import counted


@dataclass
class Row:
    function: str
    where: str
    phases: str
    options: str
    shapes: str
    verdict: str
    graphs: str
    breaks: str
    # One line per recompile while the phases ran: the call's shapes, Dynamo's reasons.
    recompiles: list[str]
    # A region compiled with a piecewise backend: the pieces its graph is cut into.
    pieces: str = ""
    # Its breaks, one line each: category, where to change, the fix.
    breaks_found: list[str] = field(default_factory=list)
    # The collectives its graphs call ('sglang::inplace_all_reduce x9 (split point)').
    collectives: str = ""


def options_text(region: Region) -> str:
    shown = {k: v for k, v in region.options.items() if v not in (None, False) or k == "fullgraph"}
    shown.setdefault("fullgraph", False)
    return ", ".join(f"{k}={v}" for k, v in shown.items())


def rows(findings: Findings) -> list[Row]:
    out = []
    for r in findings.regions:
        if not r.entered:
            continue
        phases = ", ".join(f"{p} x{n}" for p, n in r.calls.items())
        shapes = "; ".join(f"{p}: {' | '.join(s)}" for p, s in r.shapes.items())
        verdict = r.verdict or "not traced"
        if r.error and r.verdict != "ok":
            verdict += f" ({r.error})"
        elif r.verdict == "ok" and r.traced and not r.graphs:
            # Dynamo makes no graph of a frame that runs no tensor operation.
            verdict += " (nothing to capture: the traced call ran no tensor operation)"
        out.append(Row(r.function, at(r.site), phases, options_text(r), shapes,
                       verdict, str(r.graphs) if r.traced else "-", str(len(r.breaks)) if r.traced else "-",
                       recompile_lines(r), pieces_text(r), break_lines(r), collectives_text(r)))
    return out


def break_lines(region: Region) -> list[str]:
    """'filesystem at fixtures/m.py:30, in tuned_scale: Move ...' per break of
    the region (the frame to change, and its fix's summary)."""
    out = []
    for b in region.breaks:
        frame = b.actionable_frame or b.site
        where = at(frame, function=True) if frame is not None else "an unknown frame"
        summary = getattr(b.fix, "summary", "") if b.fix is not None else ""
        out.append(f"{b.category} at {where}" + (f": {summary}" if summary else ""))
    return out


def pieces_text(region: Region) -> str:
    """'the graph is cut into 13 pieces at sglang::unified_attention_with_output, ...'
    for a region compiled with a piecewise backend ('' for any other)."""
    if not region.split_ops:
        return ""
    if not region.pieces:
        return "no pieces: no graph was captured to cut at " + ", ".join(region.split_ops)
    return f"the graph is cut into {counted(region.pieces, 'piece')} at " + ", ".join(region.split_ops)


def collectives_text(region: Region) -> str:
    """'sglang::inplace_all_reduce x9 (split point), vllm::all_reduce x9 (graph op)': the
    collectives the region's traced graphs call ('' for none)."""
    return ", ".join(f"{c.get('op')} x{c.get('count')} ({c.get('as')})" for c in region.collectives)


def recompile_lines(region: Region) -> list[str]:
    """'decode at [32], [32]: forward: tensor 'input_ids' size mismatch ...' per recompile."""
    out = []
    for r in region.recompiles:
        reasons = r.get("reasons") if isinstance(r, dict) else None
        reasons = "; ".join(str(x) for x in reasons) if isinstance(reasons, list) else ""
        out.append(f"{r.get('phase', '?')} at {r.get('shapes', '?')}: {reasons or 'no reason recorded'}"
                   if isinstance(r, dict) else str(r))
    return out


def phase_lines(findings: Findings) -> dict[str, str]:
    """How the launch runs each phase's forward (from what the target recorded)."""
    launch = findings.target.facts.get("launch")
    phases = launch.get("phases") if isinstance(launch, dict) else None
    return {str(k): str(v) for k, v in phases.items()} if isinstance(phases, dict) else {}


def launch_arguments(findings: Findings) -> list[str]:
    """The launch arguments the target was traced with (as the findings say)."""
    launch = findings.target.facts.get("launch")
    args = launch.get("arguments") if isinstance(launch, dict) else None
    return [str(a) for a in args] if isinstance(args, list) else []


def summary(findings: Findings) -> str:
    """The map's verdict in one line: '2 regions the launch's phases entered: 2 ok'."""
    if findings.fullgraph.crashed:
        return "not made: the phases stopped before every region was found (above)"
    entered = [r for r in findings.regions if r.entered]
    verdicts: dict[str, int] = {}
    for r in entered:
        verdicts[r.verdict or "not traced"] = verdicts.get(r.verdict or "not traced", 0) + 1
    shown = ", ".join(f"{n} {v}" for v, n in verdicts.items())
    return f"{counted(len(entered), 'region')} the launch's phases entered" + (f": {shown}" if shown else "")


def fullgraph_line(findings: Findings) -> str:
    """Whether this launch compiles anything with fullgraph=True (where a
    single break stops the server's compile), from the launch's phases and the
    regions its phases entered; "" without regions (only a map looked for
    every region: a layer's trace did not)."""
    if not findings.regions:
        return ""
    phases = [p for p, text in phase_lines(findings).items() if "(fullgraph)" in text]
    # A region only those phases enter is their forward, already named.
    regions = [".".join(r.function.split(".")[-2:]) for r in findings.regions
               if r.entered and r.options.get("fullgraph") and not set(r.calls) <= set(phases)]
    where = [f"the {p} forward" for p in phases] + regions
    from graphbreak_doctor.targets.frameworks import registry

    launch = findings.target.facts.get("launch")
    framework = registry.of_launch(launch) if isinstance(launch, dict) else None
    version = findings.environment.get(framework.name) if framework is not None else ""
    this = f"this launch ({framework.title} {version})" if framework is not None and version else "this launch"
    if not where:
        return (f"fullgraph=True: nothing in {this} is compiled with fullgraph=True, so a graph break costs a "
                "graph split, never the server's start")
    return f"fullgraph=True: {this} compiles {', '.join(where)} with fullgraph=True: its first break stops the server"


def registered_only(findings: Findings) -> list[Region]:
    return [r for r in findings.regions if not r.entered]


def terminal_lines(findings: Findings) -> list[str]:
    if not findings.regions and not phase_lines(findings):
        return []
    args = launch_arguments(findings)
    lines = [f"compile map ({'launch arguments: ' + ' '.join(args) if args else 'default launch arguments'}):"]
    lines.extend(f"  {phase}: {text}" for phase, text in phase_lines(findings).items())
    for row in rows(findings):
        lines.append(f"  region {row.function} ({row.where})")
        lines.append(f"      entered: {row.phases}; {row.options}; traced: {row.verdict}, "
                     f"{counted(int(row.graphs), 'graph') if row.graphs != '-' else 'no graph'}, "
                     f"{counted(int(row.breaks), 'break') if row.breaks != '-' else 'no break'}")
        lines.append(f"      shapes: {row.shapes}")
        lines.extend(f"      break: {text}" for text in row.breaks_found)
        if row.pieces:
            lines.append(f"      piecewise backend: {row.pieces}")
        if row.collectives:
            lines.append(f"      collectives: {row.collectives}")
        if row.recompiles:
            lines.append(f"      recompiled {counted(len(row.recompiles), 'time')} while its phases ran:")
            lines.extend(f"        {text}" for text in row.recompiles)
    fullgraph = fullgraph_line(findings)
    if fullgraph:
        lines.append(f"  {fullgraph}")
    only = registered_only(findings)
    if only:
        lines.append(f"  + {counted(len(only), 'region')} registered (torch.compile called) that no phase entered "
                     "(listed in the JSON)")
    lines.extend(f"  {text}" for text in framework_words(findings))
    return lines


def framework_words(findings: Findings) -> list[str]:
    """What the framework whose launch it is logged about compiling and
    capturing while it resolved the launch ('SGLang said: ...', 'vLLM said:
    ...'), and the rules of its own code that changed a compile field
    ("SGLang's rule: ..."), in its words (its ``said_lines``)."""
    from graphbreak_doctor.targets.frameworks import registry

    launch = findings.target.facts.get("launch")
    if not isinstance(launch, dict):
        return []
    framework = registry.of_launch(launch)  # the framework whose launch it is says it in its own words
    return framework.said_lines(launch) if framework is not None else []


__all__ = ["Row", "fullgraph_line", "launch_arguments", "options_text", "phase_lines", "recompile_lines",
           "framework_words", "registered_only", "rows", "summary", "terminal_lines"]
