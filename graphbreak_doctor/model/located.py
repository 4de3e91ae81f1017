"""Located problems: every problem a check can fail on, at the line someone
can change -- a graph break, a CUDA-graph capture hazard, a recompile-limit
hit -- in one list per target (``TargetResult.located``, listed by
graphbreak_doctor/gate/located.py). Renderers that point at code (SARIF,
GitHub annotations, a plugin's format) read this list, so a kind of problem
added here reaches all of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphbreak_doctor.model.frame import Frame

# What a located problem is.
BREAK = "break"  # a graph break (Findings.breaks)
HAZARD = "cudagraph-hazard"  # a CUDA-graph capture hazard (Findings.cudagraphs)
RECOMPILE_LIMIT = "recompile-limit"  # the server's recompile limit hit (Findings.sized)
KINDS = (BREAK, HAZARD, RECOMPILE_LIMIT)

# Its place against the baseline (``Located.baseline``).
NEW, ACCEPTED, NOT_COUNTED = "new", "accepted", "not counted"


@dataclass(frozen=True)
class Located:
    kind: str  # BREAK, HAZARD or RECOMPILE_LIMIT
    # Its rule: the break's or hazard's category, "recompile-limit" for a hit.
    category: str
    # One line: what happened, where ("graph break [subprocess] in f (mylib): ...").
    message: str
    # The frame to change; None where the problem has no line (a recompile-limit hit).
    frame: Frame | None
    # The owner of the frame's file ("mylib", "torch"); "" without a frame.
    package: str
    # Its identity without line numbers (the baseline's key: Break.key(),
    # gate.baseline.hazard_key); fingerprints are made of it.
    key: tuple[str, ...]
    # The checks of the gate that fail on it (none: it is reported, not failed).
    checks: tuple[str, ...] = ()
    # NEW, ACCEPTED or NOT_COUNTED against the baseline; "" when none was given.
    baseline: str = ""
    # The fix, in words.
    fix: str = ""
    # What it stands for -- the Break, CudaGraphHazard or SizedRun -- for a
    # format's own details.
    subject: Any = None

    @property
    def failing(self) -> bool:
        """A check of the gate fails on it."""
        return bool(self.checks)


__all__ = ["ACCEPTED", "BREAK", "HAZARD", "KINDS", "Located", "NEW", "NOT_COUNTED", "RECOMPILE_LIMIT"]
