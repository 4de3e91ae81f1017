"""cudagraph-frozen-value: inside a captured CUDA-graph segment a value is
read on the host (a CPU tensor's value, a Python branch on it, a
host-to-device copy from memory that is not a pinned static buffer). The
capture succeeds; every replay reuses what was read during capture, whatever
the batch. Found by the CUDA-graph recorder, never by Dynamo."""

from graphbreak_doctor.analysis.categories.category import Category

CATEGORY = Category(
    name="cudagraph-frozen-value",
    why="a host value read during CUDA-graph capture is reused by every replay",
    evidence="inside a captured segment: a CPU tensor read (`.item()`, `.tolist()`, a branch), a host-to-device "
             "copy from unpinned memory",
    rules=(),
    advice="read-at-replay",
    ladder=(),
    priority=91,
)
