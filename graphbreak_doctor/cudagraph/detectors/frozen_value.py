"""cudagraph-frozen-value: a host value frozen into the graph -- a host
tensor's value read (``.item()``, ``.tolist()``, a branch on it: the branch
taken at capture is the one every replay takes), and a host-to-device copy
from host memory that is not pinned (not a runner's static buffer: replay
copies what that memory holds then)."""

from __future__ import annotations

import torch

from graphbreak_doctor.cudagraph.detectors import reads
from graphbreak_doctor.cudagraph.detectors.detector import OPERATOR, HazardDetector, Operation


def detect(op: Operation) -> str:
    read = reads.host_read(op)
    if read is not None:
        if read.device:
            return ""
        return (f"a host tensor's values read (.{read.method}())" if read.method else
                "a host tensor's value read (.item(), int(), a branch on it)")
    copy = reads.direction(op) if op.kind == OPERATOR else None
    if copy is not None and copy.from_host and isinstance(copy.src, torch.Tensor) and not copy.src.is_pinned():
        return ("a host-to-device copy from unpinned host memory: replay copies what that memory holds then, "
                "not this batch's values")
    return ""


DETECTOR = HazardDetector("frozen-host-value", "cudagraph-frozen-value", detect,
                          help="a host value frozen into the graph (a host tensor read, an unpinned host copy)")
