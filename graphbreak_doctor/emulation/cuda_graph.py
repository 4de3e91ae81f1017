"""CUDA-graph capture on the emulated GPU.

A CPU build of torch has ``torch.cuda.CUDAGraph`` and ``graph_pool_handle``
only as placeholders that refuse to run (their C halves are missing), and
``torch.cuda.graph``'s context calls ``torch._C._host_emptyCache``, which a
CPU build lacks. ``install`` gives the emulated GPU a capture:

- ``torch.cuda.CUDAGraph()`` makes an ``EmulatedGraph`` (the class stays what
  it is; its ``__new__`` answers, as the emulated streams' does).
  ``capture_begin`` / ``capture_end`` open and close a capture, exactly where
  the code under test calls them -- directly (SGLang's breakable graphs cut a
  forward into segments this way) or through ``torch.cuda.graph``.
  ``replay`` does nothing: kernels run dry here.
- ``torch.cuda.graph_pool_handle()`` answers a distinct pool token.
- ``torch.cuda.is_current_stream_capturing()`` (torch_surface.py) and
  cuda-python's ``cudaStreamGetCaptureInfo``, where the code under test
  imports it, answer whether a capture is open.

What happens inside a capture is the listener's business (the CUDA-graph
map's recorder, graphbreak_doctor/cudagraph/recorder.py): ``install`` takes
it, and calls ``begin(graph)`` and ``end(graph)``, and ``unregistered(what)``
where a stood-in library captures a kernel that reads memory still to be
registered with its peers before replay (``unregistered``).
"""

from __future__ import annotations

import itertools
import sys
from typing import Any, Callable, Protocol

import torch

from graphbreak_doctor.patching import UndoLog


class Listener(Protocol):
    def begin(self, graph: EmulatedGraph) -> None: ...

    def end(self, graph: EmulatedGraph) -> None: ...

    def unregistered(self, what: str) -> Callable[[], None]: ...


class _Nobody:
    def begin(self, graph: EmulatedGraph) -> None:
        return None

    def end(self, graph: EmulatedGraph) -> None:
        return None

    def unregistered(self, what: str) -> Callable[[], None]:
        return _settled


_listener: Listener = _Nobody()
# The graph whose capture is open (one at a time, as torch allows per process).
_open: EmulatedGraph | None = None
_pools = itertools.count(1)


def capturing() -> bool:
    """Whether a capture is open."""
    return _open is not None


def open_graph() -> EmulatedGraph | None:
    """The graph whose capture is open, if one is."""
    return _open


def unregistered(what: str) -> Callable[[], None]:
    """A kernel captured now reads memory (``what``, in words) whose address
    its library must register with the peer ranks before the graph replays
    (a communicator's graph buffers): told to the listener, with a call that
    says it is registered. Replayed unregistered, the kernel reads addresses
    no peer filled in. Outside a capture nothing is owed."""
    return _listener.unregistered(what) if capturing() else _settled


def _settled() -> None:
    return None


class EmulatedGraph:
    """A ``torch.cuda.CUDAGraph`` on the emulated GPU (see the module doc)."""

    def __init__(self, keep_graph: bool = False) -> None:
        self.keep_graph = keep_graph
        self.captured = False
        self._pool = (0, next(_pools))
        self.generators: list[Any] = []  # register_generator_state's

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global",
                      check_input_liveness: bool = False) -> None:
        global _open
        if _open is not None:
            raise RuntimeError("CUDA graph capture is already underway in this process")
        if pool is not None:
            self._pool = tuple(pool)
        _open = self
        _listener.begin(self)

    def capture_end(self) -> None:
        global _open
        if _open is not self:
            raise RuntimeError("capture_end called on a graph whose capture is not underway")
        _open = None
        self.captured = True
        _listener.end(self)

    def replay(self) -> None:
        if not self.captured:
            raise RuntimeError("replay of a CUDA graph that was never captured")

    def instantiate(self) -> None:
        return None

    def reset(self) -> None:
        self.captured = False

    def pool(self) -> tuple[int, int]:
        return self._pool

    def register_generator_state(self, generator: Any) -> None:
        self.generators.append(generator)

    def enable_debug_mode(self) -> None:
        return None

    def debug_dump(self, path: str) -> None:
        raise RuntimeError("an emulated CUDA graph has nothing to dump")


def _new_graph(cls: type, keep_graph: bool = False) -> EmulatedGraph:
    return EmulatedGraph(keep_graph)


def _graph_pool_handle() -> tuple[int, int]:
    return (0, next(_pools))


def _host_empty_cache() -> None:
    return None


def _capture_info(stream: Any) -> tuple:
    """cuda-python's ``cudaStreamGetCaptureInfo``: (error, status, id, ...)."""
    from cuda.bindings import runtime as rt

    status = (rt.cudaStreamCaptureStatus.cudaStreamCaptureStatusActive if capturing()
              else rt.cudaStreamCaptureStatus.cudaStreamCaptureStatusNone)
    return (rt.cudaError_t.cudaSuccess, status, 1 if capturing() else 0, None, None, 0)


def install(log: UndoLog, listener: Listener) -> None:
    """Give the emulated GPU its CUDA-graph capture, reporting to ``listener``;
    every change is recorded in ``log``."""
    global _open
    _open = None
    log.setattr(sys.modules[__name__], "_listener", listener)
    log.setattr(torch.cuda.CUDAGraph, "__new__", staticmethod(_new_graph))
    log.setattr(torch.cuda, "graph_pool_handle", _graph_pool_handle)
    log.setattr(torch.cuda.graphs, "graph_pool_handle", _graph_pool_handle)
    if not hasattr(torch._C, "_host_emptyCache"):
        log.setattr(torch._C, "_host_emptyCache", _host_empty_cache)
    # torch.cuda.graph makes its default capture stream once per process:
    # an emulated stream must not outlive the emulation.
    log.setattr(torch.cuda.graph, "default_capture_stream", None)
    log.call_on_undo(_close)
    try:
        from cuda.bindings import runtime as rt
    except ImportError:  # code that asks cuda-python cannot import it either
        return
    log.setattr(rt, "cudaStreamGetCaptureInfo", _capture_info)


def _close() -> None:
    global _open
    _open = None


__all__ = ["EmulatedGraph", "Listener", "capturing", "install", "open_graph", "unregistered"]
