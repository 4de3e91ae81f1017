"""One target traced in several modes, each in its own process (or its own
fresh build): their findings joined into one, as if one run had traced every
mode. Breaks are matched by id (which does not depend on the process), their
counts added and modes joined; root causes are computed again over the joined
breaks."""

from __future__ import annotations

import dataclasses

from graphbreak_doctor.analysis import consequences
from graphbreak_doctor.analysis.group import root_causes
from graphbreak_doctor.model import COMPLETE, FULLGRAPH_MODES, MAP_MODE, Break, Findings, Hazard


def merge_modes(parts: list[Findings]) -> Findings:
    """``parts`` in mode order (explain before fullgraph), one per mode, and
    the compile map's (MAP_MODE), whose regions join the result; a map that
    did not finish is a note, not the diagnosis's outcome."""
    maps = [p for p in parts if p.modes == [MAP_MODE]]
    traces = [p for p in parts if p.modes != [MAP_MODE]]
    if not traces:  # --mode map: the map alone
        return maps[0] if len(maps) == 1 else _merge_traces(maps)
    out = _merge_traces(traces)
    for part in maps:
        out.regions += part.regions
        # The map ran the launch's phases: its account of them (what SGLang's
        # own compile of a phase did, a phase that could not run) is the one kept.
        launch = part.target.facts.get("launch")
        if isinstance(launch, dict):
            out.target.facts["launch"] = launch
        why = part.incomplete()
        if why:
            out.target.notes.append(f"compile map: {why}")
    return out


def _merge_traces(parts: list[Findings]) -> Findings:
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    out = Findings(target=first.target, environment=first.environment, device=first.device,
                   modes=[m for p in parts for m in p.modes])
    breaks: dict[str, Break] = {}
    for part in parts:
        for b in part.breaks:
            have = breaks.get(b.id)
            if have is None:
                breaks[b.id] = dataclasses.replace(b, modes=list(b.modes), jit=list(b.jit))
                continue
            have.count += b.count
            have.modes += [m for m in b.modes if m not in have.modes]
            have.jit += [j for j in b.jit if (j.name, j.action) not in {(k.name, k.action) for k in have.jit}]
    out.breaks = list(breaks.values())
    # A follow-up in one mode may have its cause only in another.
    consequences.link(out.breaks)
    for part in parts:
        if any(m in FULLGRAPH_MODES for m in part.modes):
            out.fullgraph = dataclasses.replace(part.fullgraph)
        out.graphs += part.graphs
        out.resume_code += part.resume_code
        out.unparsed_events += part.unparsed_events
        for j in part.jit_requests:
            if not any((j.name, j.action) == (k.name, k.action) for k in out.jit_requests):
                out.jit_requests.append(j)
    out.hazards = _hazards(parts)
    out.graph_count = sum(1 for g in out.graphs if g.mode == "explain") or len(out.graphs)
    # A mode that did not finish (or crashed under Dynamo) makes the whole diagnosis so.
    failed = next((p for p in parts if p.outcome != COMPLETE or p.fullgraph.crashed), None)
    if failed is not None:
        out.outcome = failed.outcome
        out.fullgraph = dataclasses.replace(out.fullgraph, crashed=True, error=failed.fullgraph.error,
                                            site=failed.fullgraph.site)
    out.root_causes = root_causes(out.breaks)
    out.count_fallbacks()
    return out


def _hazards(parts: list[Findings]) -> list[Hazard]:
    merged: dict[tuple[str, str], Hazard] = {}
    for part in parts:
        for h in part.hazards:
            key = (h.kind, h.message)
            if key in merged:
                merged[key].count += h.count
            else:
                merged[key] = dataclasses.replace(h)
    return list(merged.values())
