"""The CUDA-graph map as lines every renderer shows the same way: one
summary, then per phase its backend and, per captured size, the segments,
the break points between them and each capture hazard with its fix."""

from __future__ import annotations

from graphbreak_doctor.frames import at
from graphbreak_doctor.model.cudagraph import CudaGraphCapture, CudaGraphHazard, CudaGraphMap, CudaGraphPhase
from graphbreak_doctor.text import counted


def summary(found: CudaGraphMap) -> str:
    """'2 phases captured: 1 hazard (cudagraph-sync 1)' or '... no capture hazard found'."""
    if found.error:
        return found.error
    hazards = found.hazards()
    captured = [p for p in found.phases if p.captures]
    head = f"{counted(len(captured), 'phase')} captured" if captured else "nothing captured"
    failed = [c for p in found.phases for c in p.captures if c.error]
    tail = f"; {counted(len(failed), 'capture')} did not finish" if failed else ""
    if not hazards:
        return f"{head}: no capture hazard found{tail}"
    by: dict[str, int] = {}
    for h in hazards:
        by[h.category] = by.get(h.category, 0) + 1
    kinds = ", ".join(f"{name} {n}" for name, n in sorted(by.items()))
    return f"{head}: {counted(len(hazards), 'capture hazard')} ({kinds}){tail}"


def phase_line(phase: CudaGraphPhase) -> str:
    sizes = f"; sizes {_sizes(phase.sizes)}" if phase.sizes else ""
    how = f" -- {phase.how}" if phase.how else ""
    note = f"; {phase.note}" if phase.note else ""
    return f"{phase.phase}: {phase.backend}{how}{sizes}{note}"


def _sizes(sizes: list[int]) -> str:
    return ", ".join(map(str, sizes)) if len(sizes) <= 8 else f"{len(sizes)} from {min(sizes)} to {max(sizes)}"


def capture_line(capture: CudaGraphCapture) -> str:
    breaks = sum(b.count for b in capture.breaks)
    functions = sorted({b.function for b in capture.breaks})
    named = f" ({', '.join(functions)})" if functions else ""
    hazards = counted(len(capture.hazards), "hazard") if capture.hazards else "no hazard"
    error = f"; did not finish: {capture.error}" if capture.error else ""
    return (f"size {capture.size}: {counted(capture.segments, 'segment')}, "
            f"{counted(breaks, 'eager break')}{named}, {hazards}{collectives_text(capture)}{error}")


def collectives_text(capture: CudaGraphCapture) -> str:
    """'; collectives: sglang::inplace_all_reduce x9 (in GroupCoordinator.all_reduce)', or ''."""
    if not capture.collectives:
        return ""
    by: dict[tuple[str, ...], int] = {}
    for c in capture.collectives:
        key = (c.op, c.via, (c.site.qualname or c.site.function) if c.site else "")
        by[key] = by.get(key, 0) + c.count
    named = []
    for (op, via, where), n in by.items():
        how = ", ".join(filter(None, (via, f"in {where}" if where else "")))
        named.append(f"{op} x{n}" + (f" ({how})" if how else ""))
    return "; collectives: " + ", ".join(named)


def hazard_line(hazard: CudaGraphHazard) -> str:
    where = f" at {at(hazard.site, function=True)}" if hazard.site else ""
    times = f" ({hazard.count} times)" if hazard.count > 1 else ""
    return f"{hazard.category}{where}, segment {hazard.segment}: {hazard.what}{times}"


def fix_line(hazard: CudaGraphHazard) -> str:
    return f"{hazard.fix}: {hazard.fix_text}" if hazard.fix else ""


def lines(found: CudaGraphMap) -> list[str]:
    """The whole map, indented per level, for the terminal."""
    out = []
    for phase in found.phases:
        out.append(phase_line(phase))
        for capture in phase.captures:
            out.append(f"  {capture_line(capture)}")
            for hazard in capture.hazards:
                out.append(f"    {hazard_line(hazard)}")
                if hazard.site and hazard.site.code:
                    out.append(f"      {hazard.site.code}")
                out.append(f"      fix: {fix_line(hazard)}")
    out.extend(f"assumed: {a}" for a in found.assumed)
    return out
