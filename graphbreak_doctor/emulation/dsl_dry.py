"""Kernels of Python kernel languages (Triton, CuTe DSL) on an emulated GPU:
captured as on a GPU, launched dry.

Dynamo records a user Triton kernel launch as one ``triton_kernel_wrapper_mutation``
node only when ``torch.utils._triton.has_triton()`` is True (see
docs/design.md, "Kernel languages on an emulated GPU"); it asks the CUDA
device interface, which answers from ``torch.cuda.is_available()`` -- False
here, on purpose. So while emulated, ``has_triton`` answers what it answers
on the GPU: True when Triton is installed. Every module global of torch bound
to it is rebound too.

A launch with a fake tensor among its arguments (a framework's eager warm-up,
or the eager backend running a captured launch) would need the CUDA driver.
Like FlashInfer's dry kernels, it is a recorded no-op: these kernels write
their outputs in place, and fake outputs stay as they are. The kernel is
still compiled where its language compiles without a GPU (CuTe DSL does);
launches on real tensors run as usual.

``install`` changes only the languages already imported (call it after the
framework's import): it imports nothing.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from graphbreak_doctor.patching import UndoLog

# The CuTe DSL's compiled-kernel callables (nvidia-cutlass-dsl).
_CUTE_CALLABLES = ("TVMFFIJitCompiledFunction", "TVMFFIJitCompiledFunctionWithKwargs")


def _has_fake(args: tuple, kwargs: dict) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return any(isinstance(a, FakeTensor) for a in (*args, *kwargs.values()))


def _name(kernel: Any) -> str:
    if isinstance(getattr(kernel, "function_name", None), str):  # a compiled CuTe DSL kernel
        return f"cute:{kernel.function_name}"
    fn = getattr(kernel, "fn", kernel)  # a Triton autotuner wraps the JIT function
    fn = getattr(fn, "fn", fn)  # a Triton JIT function wraps the Python function
    return f"triton:{fn.__module__}.{fn.__qualname__}"


def install(log: UndoLog) -> list[str]:
    """Returns the list the names of dry launches are appended to (each kernel once)."""
    launched: list[str] = []

    def record(kernel: Any) -> None:
        name = _name(kernel)
        if name not in launched:
            launched.append(name)

    if "triton" in sys.modules:
        _triton(log, record)
    provider = sys.modules.get("cutlass.cutlass_dsl.tvm_ffi_provider")
    if provider is None and "cutlass" in sys.modules:
        import importlib

        provider = importlib.import_module("cutlass.cutlass_dsl.tvm_ffi_provider")
    if provider is not None:
        _cute(log, record, provider)
    return launched


def _triton(log: UndoLog, record) -> None:
    import torch.utils._triton as torch_triton
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    original = torch_triton.has_triton

    @functools.cache
    def has_triton() -> bool:
        return torch_triton.has_triton_package()

    for name, module in list(sys.modules.items()):
        if module is not None and (name == "torch" or name.startswith("torch.")):
            if vars(module).get("has_triton") is original:
                log.setattr(module, "has_triton", has_triton)

    jit_run, auto_run = JITFunction.run, Autotuner.run

    def dry_jit_run(self, *args, grid, warmup, **kwargs):
        if _has_fake(args, kwargs):
            record(self)
            return None
        return jit_run(self, *args, grid=grid, warmup=warmup, **kwargs)

    def dry_auto_run(self, *args, **kwargs):
        if _has_fake(args, kwargs):
            record(self)
            return None
        return auto_run(self, *args, **kwargs)

    log.setattr(JITFunction, "run", dry_jit_run)
    log.setattr(Autotuner, "run", dry_auto_run)


def _cute(log: UndoLog, record, provider: Any) -> None:
    for class_name in _CUTE_CALLABLES:
        cls = getattr(provider, class_name, None)
        call = vars(cls).get("__call__") if cls is not None else None
        if call is None:
            continue

        def dry_call(self, *args, _call=call, **kwargs):
            if _has_fake(args, kwargs):
                record(self)
                return None
            return _call(self, *args, **kwargs)

        log.setattr(cls, "__call__", dry_call)
