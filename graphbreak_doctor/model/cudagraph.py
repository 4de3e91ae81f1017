"""The CUDA-graph map: what a server captures into CUDA graphs, run on the
emulated GPU (graphbreak_doctor.cudagraph): per phase the capture backend,
and at each captured size the segments, the eager calls between them (a
breakable graph's break points) and the capture hazards found inside the
segments. Part of the findings (``Findings.cudagraphs``).

"cudagraph" names the CUDA-graph work everywhere, apart from "capture" as
the rest of the doctor uses it (Dynamo capturing a graph)."""

from __future__ import annotations

from dataclasses import dataclass, field

from graphbreak_doctor.model.frame import Frame


@dataclass
class EagerCall:
    """A call that ran eagerly between two segments (a break point)."""

    function: str  # the called expression at the call site ("self._eager_attention")
    site: Frame | None = None  # the call site, in the code that was captured
    count: int = 1  # how many times the capture broke there


@dataclass
class Collective:
    """A collective operation captured inside a segment (torch.distributed's
    own operator, whatever communicator of the framework's called it)."""

    op: str  # torch's operator: "c10d::allreduce_", "_c10d_functional::all_reduce"
    via: str = ""  # the framework's operator that ran it ("sglang::inplace_all_reduce"), if any
    site: Frame | None = None  # the framework's frame that called it (its communicator)
    segment: int = 0  # 1-based, within the capture where it was first seen
    count: int = 1  # how many times the capture ran it there


@dataclass
class CudaGraphHazard:
    """Something inside a captured segment that a real capture refuses, or
    that replay gets wrong."""

    category: str  # cudagraph-sync, cudagraph-frozen-value, ...
    what: str  # what ran: "Tensor.item() on a cuda tensor"
    site: Frame | None = None  # the frame to change
    stack: list[Frame] = field(default_factory=list)  # outermost first
    segment: int = 0  # 1-based, within the capture where it was first seen
    count: int = 1  # how many times the capture ran it
    fix: str = ""  # the recipe name (graphbreak_doctor.recipes)
    fix_text: str = ""  # what to change, in words


@dataclass
class CudaGraphCapture:
    """One captured size."""

    size: int
    segments: int = 0  # CUDA graphs the capture produced
    breaks: list[EagerCall] = field(default_factory=list)
    hazards: list[CudaGraphHazard] = field(default_factory=list)
    error: str = ""  # the capture did not finish: one line
    collectives: list[Collective] = field(default_factory=list)  # captured inside its segments


@dataclass
class CudaGraphPhase:
    """How one phase is captured, and what its captures found."""

    phase: str  # "decode", "prefill", or "call" for a plain target
    backend: str  # "full", "breakable", "piecewise", "none"
    how: str = ""  # one line: who captures it, with what
    sizes: list[int] = field(default_factory=list)  # every size the server captures
    captures: list[CudaGraphCapture] = field(default_factory=list)  # the ones run here
    note: str = ""  # why nothing was captured, where nothing was

    def hazards(self) -> list[CudaGraphHazard]:
        return [h for c in self.captures for h in c.hazards]


@dataclass
class CudaGraphMap:
    phases: list[CudaGraphPhase] = field(default_factory=list)
    # Values the emulation had to make up for reads it could not answer
    # (each: what, and the value used), so a reader knows what followed.
    assumed: list[str] = field(default_factory=list)
    error: str = ""  # the run did not finish: why, in one line

    def hazards(self) -> list[CudaGraphHazard]:
        return [h for p in self.phases for h in p.hazards()]
