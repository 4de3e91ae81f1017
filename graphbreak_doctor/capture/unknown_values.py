"""A read of a device value the emulated GPU does not know.

The emulated device keeps the values the host wrote and what it computed
from them (emulation/host_memory.py); any other device tensor is fake. When code reads
such a tensor's value on the host (``.item()``, ``int()``, a branch on it)
or needs it for an output's size (``nonzero``), fake tensors raise their
data-dependent exceptions. On a GPU the read simply returns a value, so such
a failure says nothing about the traced code: it is where the emulation's
knowledge ends. The doctor never reports it as the target's own error
(exit 2): an eager warm-up stops there and says so, a trace says which value
stopped it, and a CUDA-graph capture goes on to the capture, where the read
is a hazard whatever its value.
"""

from __future__ import annotations

import traceback

from graphbreak_doctor.capture.exceptions import chain
from graphbreak_doctor.frames import INFRASTRUCTURE, package_of, short_path
from graphbreak_doctor.model import Frame


def _kinds() -> tuple[type, ...]:
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

    return DataDependentOutputException, DynamicOutputShapeException


def _traced(path: str) -> bool:
    """Whether a frame is the traced code's: not generated code, the
    infrastructure's (frames.py) or the doctor's own."""
    return not path.startswith("<") and package_of(path) not in (*INFRASTRUCTURE, "graphbreak_doctor")


def _read(error: BaseException | None) -> tuple[BaseException, traceback.FrameSummary | None] | None:
    """The data-dependent exception on ``error``'s chain, and the innermost
    frame of the traced code its traceback shows; None for any other failure."""
    found = next((e for e in chain(error) if isinstance(e, _kinds())), None)
    if found is None:
        return None
    frames = [f for tb in (error.__traceback__, found.__traceback__)
              for f in traceback.extract_tb(tb) if _traced(f.filename)]
    return found, (frames[-1] if frames else None)


def unknown_read(error: BaseException | None, *, located: bool = True) -> str:
    """What ``error`` is when it is a read of a device value the emulated GPU
    does not know (it, or an exception it was raised from): the operator
    and, where the traceback shows it and ``located``, the traced code's line
    that read it ("aten._local_scalar_dense.default at block.py:11 in
    forward"); "" for any other failure. (A captured graph's run has no line
    of the traced code to show: give ``located=False`` there.)"""
    read = _read(error)
    if read is None:
        return ""
    found, frame = read
    what = str(found).strip() or type(found).__name__
    if not located or frame is None:
        return what
    return f"{what} at {short_path(frame.filename)}:{frame.lineno} in {frame.name}"


def unknown_site(error: BaseException | None) -> Frame | None:
    """The traced code's line that read the unknown value (unknown_read), as a frame."""
    read = _read(error)
    frame = read[1] if read is not None else None
    if frame is None:
        return None
    return Frame(file=frame.filename, line=frame.lineno or 0, function=frame.name, code=(frame.line or "").strip())


__all__ = ["unknown_read", "unknown_site"]
