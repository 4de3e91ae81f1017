"""What a vLLM launch captures into CUDA graphs, captured here with vLLM's
own capture code (the CUDA-graph map's part of ``trace --vllm-args ...
--mode map``).

vLLM's model runner captures after its profile run, as follows, and the
doctor does the same with vLLM's own pieces. A release's runner is one of
two kinds, found by what the release has:

- A runner with a CUDA-graph manager (``CudaGraphManager``, the newer
  runner; a release with both runners says in its resolved configuration
  which one the launch uses): the manager, built for the launch's resolved cudagraph mode,
  lists the batches per runtime mode and captures each with its own
  ``capture``: a warm-up in mode NONE, then PIECEWISE batches through the
  compiled pieces' graphs (or its breakable runner) and FULL batches in a
  CUDA graph of its own around the model. The doctor hands it one batch at
  a time, with the forward its runner's factory would make minus the
  attention metadata. The rest of this list is the older runner.
- Which batches are captured, and how: vLLM's ``CudagraphDispatcher``,
  given the launch's resolved cudagraph mode, lists its capture keys per
  runtime mode -- PIECEWISE (mixed prefill-decode batches) first, then FULL
  (uniform decode batches), each largest first.
- PIECEWISE: the compiled forward, split by vLLM's backend at its splitting
  ops, each piece wrapped in vLLM's ``CUDAGraphWrapper``; the splitting ops
  (attention) run eagerly between the pieces' graphs. The doctor compiles
  the forward with vLLM's own compile wrapper and backend (``VllmBackend``:
  its split, its piece wrappers), with one change: each piece is compiled by
  vLLM's eager compiler (``-cc.backend=eager``), not Inductor, which a CPU
  build cannot run for the device.
- Where vLLM's breakable-CUDA-graph switch is on (the architectures on its
  list, which it does not compile), PIECEWISE batches are captured instead
  by vLLM's ``BreakableCUDAGraphWrapper`` around the whole model: one
  capture that vLLM itself breaks at its attention calls, run eagerly.
- FULL: the whole model wrapped in one ``CUDAGraphWrapper``, as the runner
  wraps it when the mode has full graphs.
- Each size: the launch's warm-ups (``cudagraph_num_of_warmups``, runtime
  mode NONE), then the capture with the size's batch descriptor in the
  forward context, inside vLLM's ``graph_capture`` (its capture stream) with
  capturing enabled. The inputs are slices of buffers of the launch's
  largest batch, as the runner's persistent input buffers are.

The cudagraph mode is the launch's, as vLLM's configuration resolves it
(the runner can lower it once its attention backends are set up, from
their support for CUDA graphs: not done here).

Where the doctor stands in for the runner: no KV cache is allocated, so
attention runs without metadata in every capture, as in vLLM's profile
run (a FULL capture on a server builds attention metadata for the batch:
its attention kernels are not among what is captured here). A custom op
runs its registered fake on the emulated GPU, not its Python kernel. The doctor
captures the smallest, a middle and the largest size of each runtime mode
(``pick_sizes``).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from graphbreak_doctor.frames import raised_at
from graphbreak_doctor.model.cudagraph import CudaGraphPhase
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets.provider import pick_sizes
from graphbreak_doctor.text import one_line

# vLLM's own words for what each runtime mode captures (its capture progress bar's).
PHASES = {"PIECEWISE": "mixed prefill-decode", "FULL": "decode"}
HOW = {
    "PIECEWISE": "vLLM's CUDAGraphWrapper around each piece of its compiled forward (split at its splitting ops, "
                 "which run eagerly between the pieces)",
    "FULL": "vLLM's CUDAGraphWrapper around the whole model (one CUDA graph per batch size)",
}
MANAGER_FULL = "vLLM's CUDA-graph manager's own CUDA graph around the whole model (one per batch size)"
BREAKABLE = ("vLLM's BreakableCUDAGraphWrapper around the whole model: one capture, broken at its attention and "
             "KV-cache ops, which run eagerly between the segments (no compile)")
NO_KV_CACHE = ("attention ran without metadata (no KV cache here), as in vLLM's profile run: a server's capture "
               "of this mode builds attention metadata, whose kernels are not captured here")


def capture_phases(config: Any, model: torch.nn.Module, backbone: torch.nn.Module, log: UndoLog,
                   session: Any) -> list[CudaGraphPhase]:
    """Each runtime mode as the launch captures it (see the module doc);
    ``session``: the CUDA-graph recorder's."""
    from vllm.config import CUDAGraphMode

    cc = config.compilation_config
    mode = cc.cudagraph_mode
    if mode is None or mode == CUDAGraphMode.NONE:
        return [CudaGraphPhase(phase="all", backend="none", note="not captured: the launch's cudagraph mode is NONE")]
    runner = _Manager(config, mode) if _uses_manager(config) else _Dispatcher(config, mode)
    keys = runner.keys
    if not keys:
        return [CudaGraphPhase(phase="all", backend=mode.name.lower(),
                               note="vLLM's runner lists no batch to capture for this launch")]
    _compile_for_real(config, backbone, log)
    model = runner.wrap(model)
    profile = int(config.scheduler_config.max_num_batched_tokens)
    buffers = _buffers(max(profile, *(d.num_tokens for _, descs in keys for d in descs)))
    # vLLM's profile run, at its largest batch: the first call compiles the
    # forward (Dynamo on, before anything is recorded).
    try:
        with torch._dynamo.config.patch(disable=False):
            _run(model, config, buffers, profile, CUDAGraphMode.NONE, None)
    except Exception as e:
        raise RuntimeError(f"vLLM's compile and profile run raised before any capture (a server stops there): "
                           f"{one_line(f'{type(e).__name__}: {e}', 300)}") from e
    from vllm.compilation import monitor

    # What vLLM's runner switches on while it captures (a release that has
    # the switch validates it at each capture).
    if hasattr(monitor, "cudagraph_capturing_enabled"):
        log.setattr(monitor, "cudagraph_capturing_enabled", True)
    return [_phase(runtime, descs, runner, model, config, buffers, session) for runtime, descs in keys]


def _uses_manager(config: Any) -> bool:
    """Whether the launch's GPU runner captures through a CUDA-graph manager
    (the newer runner) rather than a dispatcher's keys: as the resolved
    configuration chooses, in a release that has both runners; else the
    runner the release has."""
    chosen = getattr(config, "use_v2_model_runner", None)
    if chosen is not None:
        return bool(chosen)
    try:
        from vllm.v1.worker.gpu.cudagraph_utils import CudaGraphManager  # noqa: F401
    except ImportError:
        return False
    return True


class _Dispatcher:
    """A release whose runner lists its captures with ``CudagraphDispatcher``
    and captures each in the model's own wrappers: the launch's warm-ups in
    mode NONE, then the call in the batch's runtime mode, inside vLLM's
    ``graph_capture``."""

    def __init__(self, config: Any, mode: Any) -> None:
        from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher

        self.config = config
        dispatcher = CudagraphDispatcher(config)
        dispatcher.initialize_cudagraph_keys(mode, dispatcher.uniform_decode_query_len)
        self.keys = dispatcher.get_capture_descs()
        self.breakable = False

    @staticmethod
    def how(name: str) -> str:
        return HOW.get(name, name)

    def wrap(self, model: torch.nn.Module) -> Any:
        model, self.breakable = _wrapped(model, self.config)
        return model

    def capture(self, model: Any, buffers: dict[str, torch.Tensor], runtime: Any, desc: Any) -> None:
        from vllm.config import CUDAGraphMode
        from vllm.distributed.parallel_state import graph_capture

        with graph_capture(device=torch.device("cuda", 0)):
            for _ in range(int(self.config.compilation_config.cudagraph_num_of_warmups)):
                _run(model, self.config, buffers, desc.num_tokens, CUDAGraphMode.NONE, None)
            torch.cuda.synchronize()
            _run(model, self.config, buffers, desc.num_tokens, runtime, desc)


class _Manager:
    """A release whose runner captures through its ``CudaGraphManager``: the
    manager lists the batches per runtime mode, and its own ``capture``
    captures each (its warm-up, then FULL batches in a CUDA graph of its
    own around the model, PIECEWISE batches in the compiled pieces' graphs
    or its breakable runner). The doctor hands it one batch at a time and
    the forward to run, as the runner's forward factory makes it, without
    attention metadata."""

    def __init__(self, config: Any, mode: Any) -> None:
        from vllm.v1.worker.gpu.cudagraph_utils import CudaGraphManager

        self.config = config
        # A uniform decode batch's tokens per request, as the runner gives it
        # (one where nothing is speculated): an older manager takes it as it
        # is, a newer one as each query length's request limit (from the config).
        query = int(getattr(config, "uniform_decode_query_len", 1) or 1)
        takes = inspect.signature(CudaGraphManager.__init__).parameters
        decode = ({"decode_query_lens": config.get_decode_cudagraph_query_lens(query)} if "decode_query_lens" in takes
                  else {"decode_query_len": query})
        self.manager = CudaGraphManager(config, torch.device("cuda", 0), mode, **decode)
        found = self.manager._capture_descs
        self.keys = [(m, found[m]) for m in type(mode) if m in found]  # vLLM's order: PIECEWISE, then FULL
        self.breakable = bool(self.manager.use_breakable_cg)

    @staticmethod
    def how(name: str) -> str:
        return MANAGER_FULL if name == "FULL" else HOW.get(name, name)

    def wrap(self, model: torch.nn.Module) -> Any:
        if self.breakable:
            self.manager.init_breakable_cg_runner(model)
        return model

    def capture(self, model: Any, buffers: dict[str, torch.Tensor], runtime: Any, desc: Any) -> None:
        from vllm.config import CUDAGraphMode
        from vllm.forward_context import BatchDescriptor

        manager, tokens = self.manager, desc.num_tokens

        def forward_fn(mode: Any) -> None:
            if mode == CUDAGraphMode.PIECEWISE:
                _run(lambda **inputs: manager.run_pw_graph(model, inputs), self.config, buffers, tokens, mode,
                     BatchDescriptor(num_tokens=tokens))
            else:
                _run(model, self.config, buffers, tokens, mode, None)

        manager._capture_descs = {desc.cg_mode: [desc]}
        manager.capture(lambda _desc, warmup: forward_fn)


def _phase(runtime: Any, descs: list[Any], runner: Any, model: Any, config: Any, buffers: dict[str, torch.Tensor],
           session: Any) -> CudaGraphPhase:
    name = runtime.name
    sizes = sorted({d.num_tokens for d in descs})
    backend, how = ("breakable", BREAKABLE) if name == "PIECEWISE" and runner.breakable else (name.lower(),
                                                                                             runner.how(name))
    phase = CudaGraphPhase(phase=PHASES.get(name, name.lower()), backend=backend, sizes=sizes,
                           how=f"{how}; {NO_KV_CACHE}")
    picked = set(pick_sizes(sizes))
    for desc in descs:  # largest first, as vLLM's runner captures them
        if desc.num_tokens not in picked:
            continue
        with session.recording(desc.num_tokens) as recorder:
            error = ""
            try:
                runner.capture(model, buffers, runtime, desc)
            except Exception as e:  # the server's capture stops here: the map says where
                error = one_line(f"{type(e).__name__}: {e}", 300) + raised_at(e)
        phase.captures.append(recorder.done(error))
    phase.captures.sort(key=lambda c: c.size)
    return phase


def _wrapped(model: torch.nn.Module, config: Any) -> tuple[Any, bool]:
    """The model as vLLM's runner wraps it for capture: in vLLM's breakable
    CUDA-graph wrapper where vLLM's switch for it is on (PIECEWISE batches
    are captured by stream-capture breaks at attention, no compile), then in
    its full-graph wrapper where the mode has full graphs."""
    from vllm.compilation.cuda_graph import CUDAGraphWrapper
    from vllm.config import CUDAGraphMode

    breakable = False
    try:
        from vllm.compilation.breakable_cudagraph import BreakableCUDAGraphWrapper, is_breakable_cudagraph_enabled
    except ImportError:  # a release without breakable CUDA graphs
        pass
    else:
        if is_breakable_cudagraph_enabled():
            model, breakable = BreakableCUDAGraphWrapper(model, config, runtime_mode=CUDAGraphMode.PIECEWISE), True
    if config.compilation_config.cudagraph_mode.has_full_cudagraphs():
        model = CUDAGraphWrapper(model, config, runtime_mode=CUDAGraphMode.FULL)
    return model, breakable


def _compile_for_real(config: Any, backbone: torch.nn.Module, log: UndoLog) -> None:
    """vLLM's compile wrapper on the decorated module set up again, now with
    Dynamo's own torch.compile and vLLM's backend compiling each piece with
    its eager compiler (the map's phases ran it eagerly)."""
    if not hasattr(backbone, "_compiled_callable"):  # vLLM's decorator does not compile it for this launch
        return
    import vllm.envs as envs
    from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper

    if not envs.VLLM_USE_BYTECODE_HOOK:
        # Captures run with Dynamo off (a compiled helper inside would need
        # Inductor); vLLM's bytecode hook is what runs its compiled code then.
        raise RuntimeError("VLLM_USE_BYTECODE_HOOK=0: vLLM's compiled forward runs only through Dynamo then, "
                           "which the capture here runs without")

    log.setattr(config.compilation_config, "backend", "eager")
    log.setattr(backbone, "do_not_compile", False)  # a trace's own set-up runs it eagerly (model.as_vllm_compiles)
    backbone.compiled = False
    TorchCompileWithNoGuardsWrapper.__init__(backbone, compile_prefix="", is_encoder=False)
    handle = getattr(backbone, "_bytecode_hook_handle", None)
    if handle is not None:
        log.call_on_undo(handle.remove)


def _buffers(tokens: int) -> dict[str, torch.Tensor]:
    """The runner's persistent input buffers, of the launch's largest batch."""
    return {"input_ids": torch.zeros(tokens, dtype=torch.int64, device="cuda"),
            "positions": torch.zeros(tokens, dtype=torch.int64, device="cuda")}


def _run(model: torch.nn.Module, config: Any, buffers: dict[str, torch.Tensor], tokens: int, runtime: Any,
         desc: Any) -> Any:
    """One of the runner's dummy runs: ``tokens`` tokens, no attention
    metadata, the runtime mode and batch descriptor in the forward context."""
    from vllm.forward_context import set_forward_context

    with torch.no_grad(), set_forward_context(None, config, num_tokens=tokens, cudagraph_runtime_mode=runtime,
                                              batch_descriptor=desc):
        return model(input_ids=buffers["input_ids"][:tokens], positions=buffers["positions"][:tokens],
                     intermediate_tensors=None, inputs_embeds=None)


__all__ = ["capture_phases"]
