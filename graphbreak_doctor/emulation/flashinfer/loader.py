"""The shared-library load, run dry.

tvm-ffi's loader for ".so" files (the global function
`ffi.Module.load_from_file.so`, which `ffi.ModuleLoadFromFile` dispatches
to) is overridden while emulated. It returns a dry module (kernels.py) whose
function names are the ones the real library would export: the spec's
sources are read for `TVM_FFI_DLL_EXPORT_TYPED_FUNC(name, ...)` (for a
library FlashInfer's registry does not know, the sources in its build
folder: SGLang's JIT generates its export wrapper there). Each load is
reported to the recorder.

A library with no sources anywhere (not built by a JIT: a package's own
binding, such as a grammar library's) that exists is loaded for real when it
loads on this machine; only when its load fails here is it dry.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any, Optional

from graphbreak_doctor.emulation.flashinfer import answers, host_code, recorder, specs
from graphbreak_doctor.patching import UndoLog

SO_LOADER = "ffi.Module.load_from_file.so"


@dataclasses.dataclass
class LoaderState:
    """tvm-ffi's own .so loader while the dry one is installed (host code is
    loaded with it), and the cubin loader stub, built once per process."""

    real_so_loader: Any = None
    stub_lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    stub_path: Optional[Path] = None


STATE = LoaderState()


# Some libraries are also opened with ctypes, by FlashInfer's Python, for C
# entry points outside tvm-ffi: jit/cubin_loader.py setup_cubin_loader calls
# `FlashInferSetCubinCallback` (include/flashinfer/cubin_loader.h) in every
# module whose sources include that header (trtllm-gen MoE/GEMM/FMHA, cuDNN).
# For those the dry load leaves, at the library path, a host-only stub that
# exports the entry points as no-ops (built once per process with the host C
# compiler; no CUDA). Other dry loads write no file.
_CUBIN_LOADER_STUB = r"""
void FlashInferSetCubinCallback(void (*callback)(const char*, const char*)) { (void)callback; }
void FlashInferSetCurrentCubin(const char* binary, int size) { (void)binary; (void)size; }
"""


def _cubin_loader_stub() -> Path:
    with STATE.stub_lock:
        if STATE.stub_path is not None and STATE.stub_path.exists():
            return STATE.stub_path
        import subprocess

        compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
        if compiler is None:
            raise RuntimeError(
                "emulating a FlashInfer module that is opened with ctypes "
                "(cubin loader) needs a host C compiler (cc/gcc/clang) on PATH"
            )
        out_dir = Path(tempfile.mkdtemp(prefix="graphbreak-doctor-stub-"))
        # Built once per process and kept while it runs; removed when it exits.
        atexit.register(shutil.rmtree, out_dir, True)
        source = out_dir / "cubin_loader_stub.c"
        source.write_text(_CUBIN_LOADER_STUB)
        library = out_dir / "libcubin_loader_stub.so"
        subprocess.run(
            [compiler, "-shared", "-fPIC", "-O0", "-o", str(library), str(source)],
            check=True,
            capture_output=True,
        )
        STATE.stub_path = library
        return library


def _opens_cubin_loader(sources: list[Path]) -> bool:
    for source in sources:
        try:
            if "cubin_loader.h" in Path(source).read_text(errors="replace"):
                return True
        except OSError:
            continue
    return False


def _dry_load(path: str, fmt: str = "so") -> Any:  # noqa: ARG001
    # Called by tvm-ffi's C++ ModuleLoadFromFile (tvm_ffi/module.py load_module
    # -> _ffi_api.ModuleLoadFromFile) in place of dlopen.
    name = Path(path).stem
    sources = specs.spec_sources(name) or specs.sources_beside(path)
    if not sources and Path(path).is_file():
        real = _real_load(path, fmt)
        if real is not None:
            return real
    exports = specs.export_names(sources)
    answered = {**answers.answers_for(name, exports, specs.read_sources(sources)),
                **host_code.host_functions(name, sources, STATE.real_so_loader)}
    module = answers.dry_module(name, exports, answered)
    if _opens_cubin_loader(sources) and not Path(path).exists():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_cubin_loader_stub(), path)
    recorder.report("load", name, str(path), exports)
    return module


def _real_load(path: str, fmt: str) -> Any:
    """The library loaded by tvm-ffi's own loader, or None when it does not
    load on this machine (built against CUDA): the caller then loads it dry,
    and the recorder hears of that load as of any dry one."""
    try:
        return STATE.real_so_loader(path, fmt)
    except Exception:  # noqa: BLE001 -- the dry load that follows is the answer, and is recorded
        return None


def install(log: UndoLog) -> None:
    """tvm-ffi's .so loader replaced by the dry one until `log` is undone."""
    import tvm_ffi

    original_loader = tvm_ffi.registry.get_global_func(SO_LOADER)
    # The loader runs inside FlashInfer calls that a compiled function may be
    # executing; Dynamo would compile the Python it calls (tvm-ffi's, and
    # FlashInfer's build flags), so it runs with Dynamo off.
    import torch._dynamo

    tvm_ffi.register_global_func(SO_LOADER, torch._dynamo.disable(_dry_load), override=True)
    log.call_on_undo(
        lambda: tvm_ffi.register_global_func(SO_LOADER, original_loader, override=True)
    )
    log.setattr(STATE, "real_so_loader", original_loader)
