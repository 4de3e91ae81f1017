"""What an SGLang launch captures into CUDA graphs, captured here with
SGLang's own capture backends (the CUDA-graph map's part of ``trace --model``).

Per phase, the resolved launch's ``cuda_graph_config`` names the backend and
the sizes SGLang captures (decode: batch sizes; prefill: token counts).
SGLang's own resolver for the phase (``resolve_decode_backend``,
``resolve_prefill_backend``) makes the backend from the launch --
``FullCudaGraphBackend`` (one ``torch.cuda.graph`` around the whole forward)
or ``BreakableCudaGraphBackend`` (a forward cut into plain CUDA-graph
segments at SGLang's ``eager_on_graph`` functions; ``--debug-cuda-graph``
makes the whole forward one eager call) -- and the doctor calls its
``capture_session`` and ``capture_one`` as SGLang's runner does: largest
size first, the backend's own two eager warm-ups, then its capture, inside
SGLang's capture-mode flag. What runs inside is SGLang's forward on the
doctor's batch for that size (forward.py): decode runs the whole model,
logits included, as the decode runner captures it; prefill runs the
transformer body (the runner runs the LM head eagerly after replay).

Where the doctor stands in for SGLang's runner: it builds the batch and its
attention metadata the eager way (forward.py) rather than from the runner's
static buffers, and hands the backend the few runner fields it reads (the
model runner, the device module, no output-row override). Segments, break
points and what runs inside them are SGLang's own.

The doctor captures the smallest, a middle and the largest of each phase's
sizes (``pick_sizes``).
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any, Callable

import torch

from graphbreak_doctor.frames import raised_at
from graphbreak_doctor.model.cudagraph import CudaGraphCapture, CudaGraphPhase
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import TargetError
from graphbreak_doctor.targets.frameworks.sglang import distributed, runtime
from graphbreak_doctor.targets.frameworks.sglang.eager import forward_state
from graphbreak_doctor.targets.provider import pick_sizes
from graphbreak_doctor.text import one_line

_EXECUTOR = "sglang.srt.model_executor"
# SGLang's own choice of a phase's capture backend, from the launch (its
# runners call these with themselves).
RESOLVERS = {
    "decode": f"{_EXECUTOR}.runner_backend.utils:resolve_decode_backend",
    "prefill": f"{_EXECUTOR}.runner_backend.utils:resolve_prefill_backend",
}
HOW = {
    "full": "SGLang's FullCudaGraphBackend: one CUDA graph around the whole forward",
    "breakable": "SGLang's BreakableCudaGraphBackend: CUDA-graph segments cut at its eager_on_graph functions",
}
SHAPE_KEY = f"{_EXECUTOR}.runner.shape_key:ShapeKey"
CAPTURE_MODE = f"{_EXECUTOR}.runner_utils.capture_mode:model_capture_mode"
GRAPH_CAPTURE = "sglang.srt.distributed.parallel_state:graph_capture"
CAPTURE_HIDDEN = f"{_EXECUTOR}.forward_batch_info:CaptureHiddenMode"
# The doctor's batch kind for each of SGLang's capture phases.
BATCH_PHASE = {"decode": "decode", "prefill": "extend"}
# Backends that capture nothing.
NOT_CAPTURED = ("disabled", "none", "")


def launch_config(rt: runtime.Runtime) -> dict[str, Any] | None:
    """The resolved launch's per-phase CUDA-graph config (None: the release has none)."""
    config = (rt.launch.get("resolved") or {}).get("cuda_graph_config")
    return config if isinstance(config, dict) else None


def capture_phases(rt: runtime.Runtime, model: torch.nn.Module, layers: int, log: UndoLog,
                   session: Any) -> list[CudaGraphPhase]:
    """Each phase as the launch captures it (see the module doc); ``session``:
    the CUDA-graph recorder's (graphbreak_doctor.cudagraph.recorder.Session)."""
    config = launch_config(rt)
    if config is None:
        return [CudaGraphPhase(phase=phase, backend="?", note=f"SGLang {runtime.version()} keeps no per-phase "
                               "CUDA-graph config: its capture is not mapped here") for phase in BATCH_PHASE]
    # Every SGLang module the captures run is loaded by now.
    distributed.declare_collectives(log)
    out = []
    for phase in BATCH_PHASE:
        settings = config.get(phase) if isinstance(config.get(phase), dict) else {}
        backend = str(settings.get("backend") or "")
        sizes = sorted({int(n) for n in settings.get("bs") or ()})
        entry = CudaGraphPhase(phase=phase, backend=backend or "none", sizes=sizes, how=HOW.get(backend, ""))
        out.append(entry)
        if backend in NOT_CAPTURED:
            entry.note = "not captured: the launch runs this phase eagerly"
            continue
        resolve = runtime.optional(RESOLVERS[phase])
        if resolve is None or backend not in HOW or runtime.optional(SHAPE_KEY) is None:
            entry.note = (f"SGLang {runtime.version()}'s {backend} backend is not one the doctor drives"
                          + (" (it compiles with torch.compile: see the compile map)" if "piecewise" in backend
                             else ""))
            continue
        entry.captures = _capture(resolve, phase, pick_sizes(sizes), rt, model, layers, session)
    return out


def _capture(resolve: Callable[[Any], Any], phase: str, sizes: list[int], rt: runtime.Runtime,
             model: torch.nn.Module, layers: int, session: Any) -> list[CudaGraphCapture]:
    """The sizes captured in one capture session of one backend, largest first
    (as SGLang's runners capture them)."""
    _, shape_key = runtime.require(SHAPE_KEY)
    capture_mode = runtime.optional(CAPTURE_MODE) or contextlib.nullcontext
    # The process groups' capture context, which SGLang's runners hold around
    # every capture of a session: it moves the capture to its stream and
    # readies each communicator for graphs (PyNccl enabled; a custom
    # all-reduce registers, on leaving, the buffers the graphs read).
    graph_capture = runtime.optional(GRAPH_CAPTURE)
    done: list[CudaGraphCapture] = []
    backend = None
    stream = torch.cuda.Stream()
    with contextlib.ExitStack() as session_scope:
        for size in sorted(sizes, reverse=True):
            with session.recording(size) as recorder:
                error = ""
                try:
                    state = forward_state(rt, layers, BATCH_PHASE[phase], size)
                    if phase == "decode":
                        _capture_metadata(state, size)
                    if backend is None:
                        backend = resolve(_runner_view(state.runner))
                        session_scope.enter_context(capture_mode())
                        if graph_capture is not None:
                            stream = session_scope.enter_context(runtime.call(graph_capture, stream=stream)).stream
                        session_scope.enter_context(backend.capture_session(stream))
                    backend.capture_one(shape_key(size=size), _forward(phase, model, state))
                except TargetError as e:
                    error = str(e)
                except Exception as e:  # the server's capture stops here: the map says where
                    error = _said(e)
            done.append(recorder.done(error))
            if error and backend is None:
                break
    return sorted(done, key=lambda c: c.size)


def _capture_metadata(state: Any, size: int) -> None:
    """What SGLang's decode runner prepares before it captures a batch size:
    the attention backend's CUDA-graph state (for the largest size it will
    capture; the doctor's backend serves one size) and the metadata kept
    outside the graph, made for capture (releases whose backends split it)."""
    attention = state.backend
    out_of_graph = getattr(attention, "init_forward_metadata_out_graph", None)
    if out_of_graph is None:
        return
    with state.context():
        attention.init_cuda_graph_state(size, size)
        out_of_graph(state.batch, in_capture=True)


def _said(e: BaseException) -> str:
    """One line for a capture's error; the one it replaced too, when the
    capture's own clean-up raised while an error was on its way out."""
    line = one_line(f"{type(e).__name__}: {e}", 300) + raised_at(e)
    first = e.__context__
    if first is not None and not e.__suppress_context__:
        line += f"; raised while handling {one_line(f'{type(first).__name__}: {first}', 300)}{raised_at(first)}"
    return line


def _runner_view(model_runner: Any) -> Any:
    """The fields of SGLang's CUDA-graph runner its backend resolvers and
    capture backends read."""
    return SimpleNamespace(model_runner=model_runner, device_module=torch.cuda,
                           cuda_graph_output_capacity_rows=lambda output: None,
                           cuda_graph_output_rows=lambda output: None)


def _forward(phase: str, model: torch.nn.Module, state: Any) -> Callable[[], Any]:
    """The forward SGLang's runner captures for ``phase``, on ``state``'s batch."""
    batch = state.batch
    if phase == "decode" and getattr(batch, "capture_hidden_mode", 0) is None:
        # The decode runner's capture batch asks the logits for no hidden states.
        _, hidden = runtime.require(CAPTURE_HIDDEN)
        batch.capture_hidden_mode = hidden.NULL

    def run_once() -> Any:
        with torch.no_grad(), state.context():
            if phase == "decode":
                prepare = getattr(state.backend, "init_forward_metadata_in_graph", None)
                if prepare is not None:  # the decode runner prepares this part inside the graph
                    prepare(batch)
                return model(batch.input_ids, batch.positions, batch)
            return model.model(batch.input_ids, batch.positions, batch)

    return run_once


__all__ = ["RESOLVERS", "capture_phases", "launch_config"]
