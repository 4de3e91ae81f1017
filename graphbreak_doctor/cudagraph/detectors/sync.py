"""cudagraph-sync: the host waits for the device inside a captured segment
-- a device tensor's value read on the host (``aten._local_scalar_dense``:
``.item()``, ``int()``, a branch; ``.tolist()``/``.numpy()``), an operator
whose output size needs the device's values (the fake mode's own verdict,
so an integer index is not one), a blocking device-to-host copy, and the
emulated ``synchronize`` entry points. A real capture refuses each
("operation not permitted when stream is capturing")."""

from __future__ import annotations

from graphbreak_doctor.cudagraph.detectors import reads
from graphbreak_doctor.cudagraph.detectors.detector import OPERATOR, RUNTIME, UNKNOWN_SIZE, HazardDetector, Operation
from graphbreak_doctor.emulation import cuda_runtime


def detect(op: Operation) -> str:
    if op.kind == RUNTIME:
        return f"{op.name}()" if op.name in cuda_runtime.HOST_WAITS else ""
    if op.kind == UNKNOWN_SIZE:
        return f"{op.func.overloadpacket.__name__} on a device tensor: its output size needs the device's values"
    read = reads.host_read(op)
    if read is not None:
        if not read.device:
            return ""
        return (f"a device tensor read on the host (.{read.method}())" if read.method else
                "a device tensor's value read on the host (.item(), int(), a branch)")
    copy = reads.direction(op) if op.kind == OPERATOR else None
    if copy is not None and copy.to_host and not copy.non_blocking:
        return "a blocking device-to-host copy"
    return ""


DETECTOR = HazardDetector("host-sync", "cudagraph-sync", detect,
                          help="the host waits for the device (a read of a device value, a blocking copy, a synchronize)")
