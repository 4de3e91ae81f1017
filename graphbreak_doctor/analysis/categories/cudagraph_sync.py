"""cudagraph-sync: inside a captured CUDA-graph segment the host waits for
the device. On a GPU the capture fails ("operation not permitted when stream
is capturing"), so the server does not start. Found by the CUDA-graph
recorder (graphbreak_doctor/cudagraph/recorder.py), never by Dynamo: no rule
matches a break."""

from graphbreak_doctor.analysis.categories.category import Category

CATEGORY = Category(
    name="cudagraph-sync",
    why="the host waits for the device inside a captured CUDA-graph segment",
    evidence="inside a captured segment: `.item()`/`.tolist()`/a branch on a CUDA tensor, a device-to-host copy, "
             "an operator with a value-dependent output size, a synchronize",
    rules=(),
    advice="sync-outside-capture",
    ladder=(),
    priority=90,
)
