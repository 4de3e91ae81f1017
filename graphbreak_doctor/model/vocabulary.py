"""The words the findings, the gate, the matrix and the renderers share: schema
version, trace modes, how a trace ended, a region's verdict, the fix ladder's
step limit and rung results, the default emulated device."""

from __future__ import annotations

import enum

# 2 added the CUDA-graph map (``cudagraphs``); findings of version 1 are read
# as they are (they have none).
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)

# How a target is traced: explain finds every break; fullgraph gives
# torch.compile(fullgraph=True)'s verdict, plain or split at registered ops as
# SGLang's piecewise runner does. --mode both is explain + fullgraph.
MODE_CHOICES = ("explain", "fullgraph", "both", "piecewise")
FULLGRAPH_MODES = ("fullgraph", "piecewise")
# The compile map's run (graphbreak_doctor.compile_map): not a trace mode of the
# target itself; its findings carry the regions only.
MAP_MODE = "map"
# The run at the server's sizes (trace/check --sizes: graphbreak_doctor.capture.sizes):
# not a trace mode either; its findings carry the recompiles only.
SIZES_MODE = "sizes"
# The CUDA-graph map's run (trace --cudagraph: graphbreak_doctor.cudagraph):
# the target captured into CUDA graphs as a server captures it; its findings
# carry the map only.
CUDAGRAPH_MODE = "cudagraph"

# How a trace ended: traced to the end, or not.
COMPLETE, CRASHED, TIMED_OUT, INTERRUPTED = "complete", "crashed", "timed out", "interrupted"


def modes_for(mode: str) -> list[str]:
    """The modes a --mode choice traces, in order."""
    return ["explain", "fullgraph"] if mode == "both" else [mode]


# A region's verdict: one graph; several graphs (explain); fullgraph failed;
# the trace crashed (not a graph break).
REGION_OK, REGION_BREAKS, REGION_FAILS, REGION_CRASHED = "ok", "graph breaks", "fails", "crashed"


# The fix ladder's default step limit (--steps).
DEFAULT_FIX_STEPS = 10


class RungResult(str, enum.Enum):
    """How one rung of the fix ladder ended (its JSON form is the value)."""

    NEXT_FAILURE = "next failure"  # the break is gone; the re-trace stops at the next one
    FULLGRAPH_OK = "fullgraph ok"  # the break is gone and fullgraph succeeds
    REMOVED = "removed"  # the break is gone, but the re-trace crashed
    REJECTED = "rejected"  # undone: it did not remove the break, or it is a trap

    def __str__(self) -> str:
        return self.value


# Rung results that leave the change applied: the break is gone.
VERIFIED_RESULTS = (RungResult.NEXT_FAILURE, RungResult.FULLGRAPH_OK, RungResult.REMOVED)

# The GPU emulated when a command names none.
DEFAULT_DEVICE = "sm120"
