"""The prefill model forward as SGLang's tc_piecewise runner compiles it.

A launch whose prefill CUDA-graph backend is ``tc_piecewise`` (SGLang
0.5.19-0.5.21, by explicit choice) has its runner warm the model up eagerly,
then hand the inner model to SGLang's own ``install_torch_compiled``: the
model's ``forward`` becomes a trampoline that, inside SGLang's tc_piecewise
state, calls ``torch.compile(forward, fullgraph=True, backend=<SGLang's
backend>)`` -- whose backend cuts the graph into pieces at SGLang's split ops
(``sglang/srt/compilation/backend.py``) -- with the token dimension marked
dynamic. The runner then drives one forward per capture size through it.

Everything here is SGLang's own code, found by feature: the compile config
from the runner backend's ``build_compilation_config`` (the launch's prefill
settings), the wrapping from ``install_torch_compiled``, the state from its
tc_piecewise flag and forward context (runtime.piecewise_state). The doctor
drives one forward (the extend batch it was asked for) through the
trampoline while the compile map records ``torch.compile``: the region is
SGLang's own call, traced later with SGLang's options, and the map counts the
pieces SGLang's backend would cut its graph into.

What SGLang changes on the way is undone with the build's undo log: the
model's ``forward`` attribute, and the Dynamo bytecode hook
``install_torch_compiled`` registers (it keeps no handle; the hook is
registered through the log instead).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import TargetError
from graphbreak_doctor.targets.frameworks.sglang import runtime
from graphbreak_doctor.text import one_line

INSTALL = ("sglang.srt.compilation.compile:install_torch_compiled",)
BACKEND = ("sglang.srt.model_executor.runner_backend.tc_piecewise_cuda_graph_backend:TcPiecewiseCudaGraphBackend",)
# Releases before the runner backend (0.5.9 and its neighbours): the
# piecewise runner's constructor builds the config itself, from the launch's
# piecewise capture sizes, compiler and debug flag, in this order.
CONFIG = ("sglang.srt.compilation.compilation_config:CompilationConfig",)
CONFIG_FIELDS = ("piecewise_cuda_graph_tokens", "piecewise_cuda_graph_compiler", "enable_torch_compile_debug_mode")
# What the runner's compile pass runs its forwards inside, where the release
# has it: the compile warm-up marker (newer releases); the trampoline's
# switch to its compiled forward and the compile-pass flag (older ones).
COMPILE_PASS = ("sglang.srt.compilation.compile_phase:enable_torch_compile_warmup",
                "sglang.srt.compilation.compile:set_compiled",
                "sglang.srt.compilation.piecewise_context_manager:enable_piecewise_cuda_graph_compile")


def available() -> bool:
    """Whether the installed SGLang has the tc_piecewise runner's compile path."""
    return runtime.optional(*INSTALL) is not None and (
        runtime.optional(*BACKEND) is not None or runtime.optional(*CONFIG) is not None)


def capture_sizes(config: Any) -> list[int]:
    """The token counts SGLang's compile config lists for the runner's
    compile and capture passes ([] where it lists none)."""
    sizes = config.get_capture_sizes() if hasattr(config, "get_capture_sizes") else None
    return sorted({int(n) for n in sizes or ()})


def warms_in_state() -> bool:
    """Whether the release's prefill runner runs an eager forward inside its
    piecewise state before it compiles (the runner backend's compile pass
    does, to load its kernels; the older runner's forwards there all go
    through the compiled model)."""
    return runtime.optional(*BACKEND) is not None


def compile_config(rt: runtime.Runtime) -> Any:
    """SGLang's CompilationConfig for this launch's prefill: its runner
    backend's own builder, or (older releases) built as the runner's
    constructor builds it from the launch's fields."""
    try:
        backend = runtime.optional(*BACKEND)
        if backend is not None:
            return backend.build_compilation_config(rt.server_args)
        _, config_cls = runtime.require(*CONFIG)
        missing = [f for f in CONFIG_FIELDS if not hasattr(rt.server_args, f)]
        if missing:
            raise TargetError(f"SGLang {runtime.version()}'s server arguments lack {', '.join(missing)}: the "
                              "piecewise runner's compile config could not be built here")
        return config_cls(*(getattr(rt.server_args, f) for f in CONFIG_FIELDS))
    except TargetError:
        raise
    except Exception as e:
        raise TargetError(f"SGLang {runtime.version()}'s tc_piecewise compile config could not be built here: "
                          f"{type(e).__name__}: {one_line(str(e), 200)}") from e


def install(model: torch.nn.Module, config: Any, log: UndoLog) -> None:
    """SGLang's ``install_torch_compiled`` on ``model`` (the inner model, as
    the runner passes it), undone with ``log``."""
    import torch._dynamo.convert_frame as convert_frame

    _, install_torch_compiled = runtime.require(*INSTALL)
    if "forward" in vars(model):
        log.keep_attribute(model, "forward")
    else:  # the class's forward again once the instance's is gone
        log.call_on_undo(lambda: vars(model).pop("forward", None))
    real = convert_frame.register_bytecode_hook

    def register(hook: Callable[..., Any]) -> Any:
        handle = real(hook)
        log.call_on_undo(handle.remove)
        return handle

    with UndoLog() as during:
        during.setattr(convert_frame, "register_bytecode_hook", register)
        # graph_pool: the runner's CUDA-graph memory pool, used by SGLang's
        # backend only when it captures, which the doctor never runs.
        runtime.call(install_torch_compiled, model, fullgraph=True, compile_config=config, graph_pool=None)


@contextlib.contextmanager
def compile_pass() -> Any:
    """What the runner's compile pass runs its forwards inside (SGLang's
    compile warm-up marker, where the release has one)."""
    with contextlib.ExitStack() as stack:
        for name in COMPILE_PASS:
            marker = runtime.optional(name)
            if marker is not None:
                stack.enter_context(marker())
        yield


__all__ = ["available", "capture_sizes", "compile_config", "compile_pass", "install", "warms_in_state"]
