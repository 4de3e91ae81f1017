"""Kernels of Python kernel languages (Triton, CuTe DSL) on an emulated GPU:
captured as on a GPU, launched dry.

Dynamo records a user Triton kernel launch as one ``triton_kernel_wrapper_mutation``
node only when ``torch.utils._triton.has_triton()`` is True (see
docs/design.md, "Kernel languages on an emulated GPU"); it asks the CUDA
device interface, which answers from ``torch.cuda.is_available()`` as this
machine's torch was when ``has_triton`` first cached it. So while emulated,
``has_triton`` answers what it answers on the GPU: True when Triton is
installed. Every module global of torch bound
to it is rebound too.

A Triton launch with a fake tensor among its arguments (a framework's eager
warm-up, or the eager backend running a captured launch) would need the CUDA
driver. Like FlashInfer's dry kernels, it is a recorded no-op: these kernels
write their outputs in place, and fake outputs stay as they are; launches on
real tensors run as usual. A CuTe DSL kernel is still compiled (the DSL
compiles without a GPU) but loaded dry: its callable gets a no-op function
(see ``_cute``).

``install`` changes Triton only if it is already imported (call it after the
framework's import); CuTe DSL's kernels are intercepted as soon as its
provider module is imported, now or later while the log is open (FlashInfer
imports it on the first call of a CuTe DSL kernel). It imports nothing, and
installing twice changes nothing more.
"""

from __future__ import annotations

import functools
import importlib.abc
import sys
from typing import Any, Callable

from graphbreak_doctor.patching import UndoLog

# Where the CuTe DSL (nvidia-cutlass-dsl) makes its kernels' functions: those
# it compiled, and those it loads from an exported object file (FlashInfer
# caches its CuTe DSL kernels that way).
_CUTE_PROVIDER = "cutlass.cutlass_dsl.tvm_ffi_provider"
_CUTE_LOADED = "cutlass.base_dsl.export.external_binary_module"
# Where a kernel compiled without tvm-ffi runs (it loads a CUDA library first).
_CUTE_EXECUTOR = "cutlass.base_dsl.jit_executor"
# Set on each dry replacement, so that a second install keeps the first.
_DRY = "_graphbreak_doctor_dry"


def _has_fake(args: tuple, kwargs: dict) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return any(isinstance(a, FakeTensor) for a in (*args, *kwargs.values()))


def _name(kernel: Any) -> str:
    if isinstance(getattr(kernel, "function_name", None), str):  # a compiled CuTe DSL kernel
        return f"cute:{kernel.function_name}"
    fn = getattr(kernel, "fn", kernel)  # a Triton autotuner wraps the JIT function
    fn = getattr(fn, "fn", fn)  # a Triton JIT function wraps the Python function
    return f"triton:{fn.__module__}.{fn.__qualname__}"


def install(log: UndoLog, launched: Callable[[str], None]) -> None:
    """``launched(name)`` is called for each dry launch (``triton:<module.qualname>``,
    ``cute:<function name>``)."""

    def record(kernel: Any) -> None:
        launched(_name(kernel))

    if "triton" in sys.modules:
        _triton(log, record)
    for name, patch in ((_CUTE_PROVIDER, _cute), (_CUTE_LOADED, _cute_loaded), (_CUTE_EXECUTOR, _cute_executor)):
        module = sys.modules.get(name)
        if module is not None:
            patch(log, record, module)
        else:
            on_import(log, name, lambda module, patch=patch: patch(log, record, module))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` once ``name`` has been imported. It asks the
    other finders for the module's spec; a finder that asks the import
    system again (a framework's lazy importer) gets no answer from this one
    meanwhile."""

    def __init__(self, name: str, then) -> None:
        self.name, self.then = name, then
        self._finding = False

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name or self._finding:
            return None
        self._finding = True
        try:
            spec = None
            for finder in [f for f in sys.meta_path if f is not self]:
                find = getattr(finder, "find_spec", None)
                spec = find(fullname, path, target) if find is not None else None
                if spec is not None:
                    break
        finally:
            self._finding = False
        if spec is None or spec.loader is None:
            return spec
        loader, then = spec.loader, self.then

        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                then(module)

        spec.loader = Loader()
        return spec


def on_import(log: UndoLog, name: str, then) -> None:
    finder = _AfterImport(name, then)
    sys.meta_path.insert(0, finder)
    log.call_on_undo(lambda: sys.meta_path.remove(finder))


def now_or_on_import(log: UndoLog, name: str, then) -> None:
    """``then(module)`` for the module ``name``: now if it is imported, else
    when it is (while ``log`` is open)."""
    module = sys.modules.get(name)
    if module is not None:
        then(module)
    else:
        on_import(log, name, then)


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
    if getattr(jit_run, _DRY, False):
        return

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

    for dry in (dry_jit_run, dry_auto_run):
        setattr(dry, _DRY, True)
    log.setattr(JITFunction, "run", dry_jit_run)
    log.setattr(Autotuner, "run", dry_auto_run)


def _cute(log: UndoLog, record, provider: Any) -> None:
    """A compiled CuTe DSL kernel calls a tvm-ffi function made from the code
    the DSL compiled; calling it needs the CUDA driver. While emulated, the
    kernel gets a no-op function of the same kind instead (FlashInfer's dry
    kernels': a C symbol with tvm-ffi's calling convention). The kernel's own
    Python stays as it is, so Dynamo sees what it sees on a GPU: the call of a
    ``tvm_ffi.core.Function`` it cannot trace."""
    base = getattr(provider, "TVMFFIJitCompiledFunctionBase", None)
    create = vars(base).get("_create_tvm_ffi_function") if base is not None else None
    if create is None or getattr(create, _DRY, False):
        return

    def dry_function(self) -> Any:
        record(self)
        return _no_op_function()

    setattr(dry_function, _DRY, True)
    log.setattr(base, "_create_tvm_ffi_function", dry_function)


def _cute_loaded(log: UndoLog, record, module: Any) -> None:
    """The same for a kernel loaded from an exported object file: with
    tvm-ffi, the loaded module's attribute is the kernel's tvm-ffi function."""
    cls = getattr(module, "ExternalBinaryModule", None)
    lookup = vars(cls).get("__getattr__") if cls is not None else None
    if lookup is None or getattr(lookup, _DRY, False):
        return

    def dry_lookup(self, function_prefix: str) -> Any:
        if not vars(self).get("enable_tvm_ffi"):
            return lookup(self, function_prefix)
        record(_Named(function_prefix))
        return _no_op_function()

    setattr(dry_lookup, _DRY, True)
    log.setattr(cls, "__getattr__", dry_lookup)


_executor_record: Callable[[Any], None] = lambda _kernel: None  # set by _cute_executor


def executor_launched(kernel: Any) -> None:
    """Called from the swapped body of ``run_compiled_program``."""
    _executor_record(kernel)


def _run_compiled_program_body(self, exe_args):
    dry = __import__("graphbreak_doctor.emulation.dsl_dry", fromlist=["executor_launched"])
    return dry.executor_launched(self)


def _cute_executor(log: UndoLog, record, module: Any) -> None:
    """A CuTe DSL kernel compiled without tvm-ffi (SGLang compiles its own
    that way) runs through ``JitCompiledFunction.run_compiled_program``,
    which loads the compiled CUDA library (the driver) and launches. Its body
    is swapped for a recorded no-op; the function object, its name and file
    stay, so a trace sees the DSL's own function."""
    cls = getattr(module, "JitCompiledFunction", None)
    run = vars(cls).get("run_compiled_program") if cls is not None else None
    if run is None or getattr(run, _DRY, False):
        return
    log.setattr(sys.modules[__name__], "_executor_record", record)
    log.replace_code(run, _run_compiled_program_body.__code__)
    log.setattr(run, _DRY, True)


class _Named:
    def __init__(self, function_name: str) -> None:
        self.function_name = function_name


def _no_op_function() -> Any:
    import ctypes

    import tvm_ffi

    from graphbreak_doctor.emulation.flashinfer.kernels import NO_OP_KERNEL

    return tvm_ffi.Function.__from_extern_c__(ctypes.cast(NO_OP_KERNEL, ctypes.c_void_p).value)
