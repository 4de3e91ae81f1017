"""The one place findings are put together.

- :func:`assemble`: one process's raw traces (capture ``ModeResult``s: a
  trace mode, the fix ladder's traces, a log read back) -> findings: the
  breaks (analysis/breaks.py), the fullgraph verdict, a crash in any mode,
  hazards, root causes, JIT requests, the source lines around each break,
  and the fixes a fix ladder verified.
- :func:`join`: the findings of one target's jobs (each mode and its compile
  map ran in a process of its own, in the environment they traced) joined as
  if one run had traced every mode. Breaks are matched by id (which does not
  depend on the process), counts added, modes joined; root causes are
  computed again over the joined breaks.
- :func:`unfinished`, :func:`stopped`: findings that record a job that did
  not finish, or a compile map whose phases stopped.
- :func:`mapped`, :func:`sized`, :func:`captured`, :func:`program_run`: the
  findings of a compile map, of a run at the server's sizes, of a CUDA-graph
  capture, and of the user's own program (a written patch's proof).

``Findings`` are built nowhere else (a test reading the code's syntax tree
holds every other module to that; they are read back with
``Findings.from_dict``).

Each rule (a crash anywhere makes the diagnosis a crash, how graphs are
counted, how hazards and JIT requests are de-duplicated) is written once here.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from graphbreak_doctor.analysis import consequences
from graphbreak_doctor.analysis.breaks import add_jit, first_break, fold_lost_callers, merge_events
from graphbreak_doctor.analysis.fixes import attach_verified
from graphbreak_doctor.analysis.group import root_causes
from graphbreak_doctor.capture.result import ModeResult
from graphbreak_doctor.frames import make_frame
from graphbreak_doctor.model.cudagraph import CudaGraphMap
from graphbreak_doctor.model.sizes import SizedRun
from graphbreak_doctor.model import (
    COMPLETE,
    CRASHED,
    FULLGRAPH_MODES,
    MAP_MODE,
    SIZES_MODE,
    CUDAGRAPH_MODE,
    Break,
    DecompiledCode,
    Findings,
    FixOutcome,
    FullgraphVerdict,
    GraphInfo,
    Hazard,
    JitRequest,
    Region,
    Rung,
    SourceExcerpt,
    TargetInfo,
)

# Lines shown above and below a frame's line in the report.
SOURCE_CONTEXT = 3


def assemble(results: list[ModeResult], *, target: TargetInfo, environment: dict, device: dict,
             jit: Iterable[JitRequest] = (), ladder: tuple[list[Rung], FixOutcome] | None = None,
             saved_ladder: tuple[list[Rung], str] | None = None, regions: Iterable[Region] = (),
             excerpts: bool = False) -> Findings:
    """Findings of ``results``, traced in this process.

    ``ladder``: the fix ladder's rungs and outcome, ``results`` being its
    traces in order (the first is the target as it is): the verdict is the
    first trace's, the graphs the last one's when fullgraph succeeded, and
    the breaks are every break met on the way. ``saved_ladder``: rungs of an
    earlier ``fix`` of the same target and where they come from. ``excerpts``:
    keep the source lines around each break, read here (only where the traced
    files are the ones on this machine -- not for a log read back)."""
    breaks = merge_events(results)
    findings = Findings(target=target, environment=environment, device=device, modes=[r.mode for r in results],
                        breaks=breaks, regions=list(regions))
    for result in results:
        if result.mode in FULLGRAPH_MODES:
            findings.fullgraph = _verdict(result)
        findings.graphs.extend(result.graphs)
    # A crash in any mode (explain may crash after the break fullgraph stops at)
    # makes the whole diagnosis a crash: the gate reports it as such (exit 3).
    crashed = next((r for r in results if r.crashed), None)
    if crashed is not None:
        findings.fullgraph.crashed = True
        findings.fullgraph.error = f"{crashed.error} (in {crashed.mode} mode)"
        findings.fullgraph.site = crashed.crash_site
    findings.hazards = _hazards(results)
    findings.jit_requests = add_jit([], jit)
    findings.resume_code = _decompiled(results)
    findings.unparsed_events = [u for r in results for u in r.unparsed]
    if ladder is not None:
        rungs, outcome = ladder
        first, final = results[0], results[-1]
        findings.modes = [first.mode]
        findings.fullgraph = dataclasses.replace(_verdict(first), site=None)
        findings.graphs = list(final.graphs) if outcome.ok else []
        findings.ladder = rungs
        findings.fix = outcome
        # The changes the ladder kept are the fixes of the breaks they removed.
        attach_verified(findings.breaks, rungs)
    if saved_ladder is not None:
        attach_verified(findings.breaks, *saved_ladder)
    return _finish(findings, excerpts=excerpts)


def join(parts: list[Findings], *, saved_ladder: tuple[list[Rung], str] | None = None) -> Findings:
    """One target's findings from its jobs, ``parts`` in mode order (explain
    before fullgraph), the compile map's (MAP_MODE) among them: its regions
    join the result, and a map that did not finish is a note, not the
    diagnosis's outcome."""
    sized = [p for p in parts if p.modes == [SIZES_MODE]]
    captured = [p for p in parts if p.modes == [CUDAGRAPH_MODE]]
    parts = [p for p in parts if p.modes not in ([SIZES_MODE], [CUDAGRAPH_MODE])] or sized or captured
    maps = [p for p in parts if p.modes == [MAP_MODE]]
    traces = [p for p in parts if p.modes != [MAP_MODE]]
    if not traces:  # --mode map: the map alone
        out = maps[0] if len(maps) == 1 else _join_traces(maps)
    else:
        out = _join_traces(traces)
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
            if part.cudagraphs is not None:  # the map's worker captured the phases too
                out.cudagraphs = part.cudagraphs
    for part in sized:  # --sizes: the run at the server's sizes, or why it did not finish
        why = part.incomplete()
        out.sized = part.sized if part.sized is not None and not why else SizedRun(
            verdict=f"the run at the server's sizes did not finish: {why or 'no findings'}")
    for part in captured:  # --cudagraph: the CUDA-graph map, or why it did not finish
        why = part.incomplete()
        out.cudagraphs = part.cudagraphs if part.cudagraphs is not None and not why else CudaGraphMap(
            error=f"the CUDA-graph capture did not finish: {why or 'no findings'}")
    if saved_ladder is not None:
        attach_verified(out.breaks, *saved_ladder)
    return out


def unfinished(target: TargetInfo, environment: dict, device: dict, mode: str, error: str,
               outcome: str = CRASHED) -> Findings:
    """Findings that record a job with no findings of its own (the worker
    crashed, timed out or was interrupted): ``error`` says why in one line."""
    return Findings(target=target, environment=environment, device=device, modes=[mode], outcome=outcome,
                    fullgraph=FullgraphVerdict(ran=mode in FULLGRAPH_MODES, ok=False, crashed=True, error=error))


def stopped(target: TargetInfo, environment: dict, device: dict, error: str) -> Findings:
    """A compile map whose phases stopped before any region was traced."""
    return Findings(target=target, environment=environment, device=device, modes=[MAP_MODE], outcome=CRASHED,
                    fullgraph=FullgraphVerdict(ran=False, ok=False, crashed=True, error=error))


def mapped(target: TargetInfo, environment: dict, device: dict, regions: list[Region]) -> Findings:
    """A compile map's findings: the target and the regions its phases registered."""
    return _finish(Findings(target=target, environment=environment, device=device, modes=[MAP_MODE],
                            regions=regions))


def sized(target: TargetInfo, environment: dict, device: dict, run: SizedRun) -> Findings:
    """The run at the server's sizes (``--sizes``): the target called compiled
    once at each size, judged (analysis/recompiles.py)."""
    return Findings(target=target, environment=environment, device=device, modes=[SIZES_MODE], sized=run)


def captured(target: TargetInfo, environment: dict, device: dict, found: CudaGraphMap) -> Findings:
    """The target captured into CUDA graphs (``--cudagraph``): its CUDA-graph map."""
    return Findings(target=target, environment=environment, device=device, modes=[CUDAGRAPH_MODE],
                    cudagraphs=found)


def program_run(target: TargetInfo, environment: dict, device: dict, error: str, told: str,
                equal: bool | None) -> Findings:
    """The user's own program as a written patch's proof runs it
    (fix/user_run.py): ``error`` what failed ("" when it held), ``told`` what
    it says when it held, ``equal`` whether the outputs' values equal eager's
    (None where they could not be compared)."""
    return Findings(target=target, environment=environment, device=device, modes=["fullgraph"],
                    fullgraph=FullgraphVerdict(ran=True, ok=not error, error=error),
                    fix=FixOutcome(ok=not error, stopped=error or told, outputs_equal_eager=equal))


def region_breaks(result: ModeResult) -> list[Break]:
    """The breaks of one compile-map region's trace."""
    return merge_events([result])


def stopped_at(result: ModeResult) -> Break | None:
    """The break a fullgraph trace stopped at (the fix ladder's re-traces)."""
    return first_break(result)


# ----------------------------------------------------------------- the rules

def _verdict(result: ModeResult) -> FullgraphVerdict:
    first = first_break(result)
    return FullgraphVerdict(ran=True, ok=bool(result.ok), error=result.error, break_id=first.id if first else "",
                            crashed=result.crashed, site=result.crash_site, note=result.note)


def _graph_count(graphs: list[GraphInfo]) -> int:
    """Explain mode's graphs when it ran (fullgraph's one graph repeats one of them), else all."""
    return sum(1 for g in graphs if g.mode == "explain") or len(graphs)


def _finish(findings: Findings, *, excerpts: bool = False) -> Findings:
    findings.graph_count = _graph_count(findings.graphs)
    # A report of a break that lost its callers' frames is the same break as
    # the report that kept them (explain and fullgraph, or another hit).
    findings.breaks, folded = fold_lost_callers(findings.breaks)
    findings.fullgraph.break_id = folded.get(findings.fullgraph.break_id, findings.fullgraph.break_id)
    for item in (*findings.jit_requests, *findings.ladder):
        item.break_id = folded.get(item.break_id, item.break_id)
    findings.root_causes = root_causes(findings.breaks)
    findings.count_fallbacks()
    if excerpts:
        record_source(findings)
    return findings


def _join_traces(parts: list[Findings]) -> Findings:
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
            add_jit(have.jit, b.jit)
    out.breaks = list(breaks.values())
    # A follow-up in one mode may have its cause only in another.
    consequences.link(out.breaks)
    for part in parts:
        if any(m in FULLGRAPH_MODES for m in part.modes):
            out.fullgraph = dataclasses.replace(part.fullgraph)
        # The fullgraph mode's account of the warm-up (it also traced cold), else any mode's.
        if part.warm_up is not None and (out.warm_up is None or part.warm_up.cold):
            out.warm_up = part.warm_up
        out.graphs += part.graphs
        out.resume_code += part.resume_code
        out.unparsed_events += part.unparsed_events
        add_jit(out.jit_requests, part.jit_requests)
    out.hazards = _joined_hazards(parts)
    # A mode that did not finish (or crashed under Dynamo) makes the whole diagnosis so.
    failed = next((p for p in parts if p.outcome != COMPLETE or p.fullgraph.crashed), None)
    if failed is not None:
        out.outcome = failed.outcome
        out.fullgraph = dataclasses.replace(out.fullgraph, crashed=True, error=failed.fullgraph.error,
                                            site=failed.fullgraph.site)
    return _finish(out)


def _hazards(results: list[ModeResult]) -> list[Hazard]:
    """Each distinct hazard once, counted once per time a trace met it."""
    return _count_hazards((Hazard(kind=h.kind, message=h.message, site=make_frame(h.file, h.line, "") if h.file
                                  else None) for r in results for h in r.hazards))


def _joined_hazards(parts: list[Findings]) -> list[Hazard]:
    return _count_hazards(h for p in parts for h in p.hazards)


def _count_hazards(hazards: Iterable[Hazard]) -> list[Hazard]:
    merged: dict[tuple[str, str], Hazard] = {}
    for h in hazards:
        key = (h.kind, h.message)
        if key in merged:
            merged[key].count += h.count
        else:
            merged[key] = dataclasses.replace(h)
    return list(merged.values())


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
