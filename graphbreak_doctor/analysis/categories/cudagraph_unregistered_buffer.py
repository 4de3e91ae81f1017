"""cudagraph-unregistered-buffer: a captured collective's kernel reads the
peer ranks' copies of a buffer through addresses its communicator registers
only after the capture (a custom all-reduce's graph buffers: exchanged with
the peers when the framework's graph-capture context closes). Captured
outside that context, the addresses are never exchanged, and every replay
reads peer pointers nobody filled in: on a GPU an illegal memory access or a
wrong sum. Found by the CUDA-graph recorder from the stood-in communicator's
own account (what it captured, what was registered by the end of the
capture phase), never by Dynamo."""

from graphbreak_doctor.analysis.categories.category import Category

CATEGORY = Category(
    name="cudagraph-unregistered-buffer",
    why="a collective captured into a CUDA graph reads buffers that were never registered with the peer ranks",
    evidence="at the end of the capture phase: a captured collective reads buffers its communicator never "
             "registered with the peer ranks (captured outside the framework's graph-capture context)",
    rules=(),
    advice="capture-in-communicator-context",
    ladder=(),
    priority=93,
)
