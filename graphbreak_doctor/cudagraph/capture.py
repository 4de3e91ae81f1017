"""A target captured into one CUDA graph as a server's full CUDA-graph
runner captures its forward: two eager warm-ups (each after a
synchronize), then ``torch.cuda.graph`` around one call, on the emulated GPU
with the recorder listening (recorder.py). A target whose framework has its
own capture path (``Target.cudagraphs``) is captured by that instead."""

from __future__ import annotations

import contextlib
import sys

import torch

from graphbreak_doctor.cudagraph.advice import advise
from graphbreak_doctor.cudagraph.recorder import Session
from graphbreak_doctor.capture.unknown_values import unknown_read
from graphbreak_doctor.frames import raised_at
from graphbreak_doctor.model.cudagraph import CudaGraphMap, CudaGraphPhase
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target
from graphbreak_doctor.text import one_line

WARM_UPS = 2


def _size(target: Target) -> int:
    """What the capture is keyed by: the leading size of the first tensor argument."""
    for arg in (*target.args, *target.kwargs.values()):
        if isinstance(arg, torch.Tensor) and arg.dim():
            return int(arg.shape[0])
    return 0


def plain(target: Target, session: Session) -> CudaGraphPhase:
    """The target called under ``torch.cuda.graph`` after its warm-ups."""
    size = _size(target)
    phase = CudaGraphPhase(phase="call", backend="full", sizes=[size],
                           how=f"torch.cuda.graph around one call, after {WARM_UPS} eager warm-ups "
                               "(as a full CUDA-graph runner captures a forward)")
    error = ""
    with session.recording(size) as recorder:
        try:
            for n in range(WARM_UPS):
                torch.cuda.synchronize()
                try:
                    target.fn(*target.args, **target.kwargs)
                except Exception as e:
                    unknown = unknown_read(e)
                    if not unknown:
                        raise
                    # Where the emulated GPU's knowledge ends, a real GPU runs
                    # on: the capture follows, where the read is a hazard.
                    session.assumed.append(f"the eager warm-ups stopped at a device value the emulated GPU does not "
                                           f"know ({unknown}): captured after {n} of {WARM_UPS}")
                    break
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                target.fn(*target.args, **target.kwargs)
        except Exception as e:  # the capture stops here, as a server's would: the map says so
            error = one_line(f"{type(e).__name__}: {e}", 200)
    phase.captures.append(recorder.done(error))
    return phase


def cudagraph_map(target: Target, log: UndoLog) -> CudaGraphMap:
    """The target's CUDA-graph map: its framework's own capture path where it
    has one, else the plain capture."""
    session = Session(log)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            phases = target.cudagraphs(log, session) if target.cudagraphs is not None else [plain(target, session)]
        session.settle()
    except Exception as e:  # the framework's capture path could not be set up here: the map says why
        return CudaGraphMap(assumed=list(session.assumed),
                            error=f"the CUDA-graph capture could not run: {one_line(f'{type(e).__name__}: {e}', 300)}"
                                  f"{raised_at(e)}")
    return advise(CudaGraphMap(phases=phases, assumed=list(session.assumed)))
