"""FlashInfer's JIT, running dry: all of its Python, none of the compiling.

What stays real (and is therefore seen by Dynamo exactly as on a GPU machine):
`gen_jit_spec` and the spec registry, `JitSpec.build_and_load` / `try_load` /
`build` / `load`, FileLock, `Path.exists` / `os.stat` / `mkdir` on the JIT
cache, writing build.ninja, `get_cuda_path` / `get_cuda_version`
(flashinfer/jit/cpp_ext.py) with their `subprocess` calls, `run_ninja`'s
`subprocess.run`, and `tvm_ffi.load_module` (tvm_ffi/module.py).

What is replaced, and where:
- The CUDA toolkit: a throwaway CUDA_HOME whose `bin/nvcc` is a shell script
  that answers `--version` / `--list-gpu-arch` for the preset's CUDA version
  and refuses to compile, and whose `bin/ninja` (first on PATH) succeeds
  without building anything. The subprocesses still run, from FlashInfer's code.
- The shared-library load: tvm_ffi's loader for ".so" files (the global
  function `ffi.Module.load_from_file.so`, which `ffi.ModuleLoadFromFile`
  dispatches to) is overridden. It returns a genuine `tvm_ffi.Module` (tvm_ffi's
  system library, `tvm_ffi.system_lib`) whose functions are genuine
  `tvm_ffi.Function` objects over one C-level no-op (a ctypes callback with
  tvm-ffi's safe-call ABI, registered with `TVMFFIEnvModRegisterSystemLibSymbol`).
  The function names are the ones the real library would export: the spec's
  sources are read for `TVM_FFI_DLL_EXPORT_TYPED_FUNC(name, ...)`.
  Destination-passing kernels therefore leave their (fake) outputs as they are.
- The JIT cache lives in a temporary directory for the duration of the
  emulation (`flashinfer.jit.env.FLASHINFER_*_DIR`), named after the emulated
  architecture as FlashInfer names it (`jit/env.py: _get_workspace_dir_name`).

Import-time state: FlashInfer is imported before anything is patched, so what
it computes at import reflects the real machine and is restored exactly; the
arch-dependent pieces it computed at import
(`flashinfer.jit.core.current_compilation_context.TARGET_CUDA_ARCHS`, the
workspace directories) are then recomputed by FlashInfer's own code under the
emulated environment.

Recording: a build is seen when FlashInfer's `run_ninja` starts ninja (a
`subprocess.Popen` audit event); a load when the overridden loader runs. Both
are reported synchronously, while the call that caused them is executing.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import importlib
import importlib.util
import itertools
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Optional

from .presets import DevicePreset
from .undo import UndoLog

SO_LOADER = "ffi.Module.load_from_file.so"
_EXPORT_RE = re.compile(r"TVM_FFI_DLL_EXPORT_TYPED_FUNC\(\s*([A-Za-z_]\w*)\s*,")
_SYMBOL_PREFIX = "graphbreak_doctor_dry_"


@dataclasses.dataclass(frozen=True)
class JitRequest:
    """One JIT step FlashInfer asked for while emulated: a build or a load."""

    seq: int  # global order, across devices and sessions
    name: str  # the JitSpec name, e.g. "fp4_quantization_120f"
    action: str  # "build" or "load"
    device: str  # preset name
    path: str  # build directory or library path FlashInfer used
    exports: tuple[str, ...] = ()  # kernel names the dry module offers (loads)

    def to_dict(self) -> dict:
        return {
            "seq": self.seq,
            "name": self.name,
            "action": self.action,
            "device": self.device,
            "path": self.path,
            "exports": list(self.exports),
        }


_seq = itertools.count(1)
_lock = threading.Lock()
# Active sinks, innermost last; each is a callable(action, name, path, exports).
_sinks: list[Callable[..., JitRequest]] = []


def flashinfer_installed() -> bool:
    return importlib.util.find_spec("flashinfer") is not None


def _next_seq() -> int:
    with _lock:
        return next(_seq)


# ---------------------------------------------------------------- recording


def _audit(event: str, args: tuple) -> None:
    # Installed once per process (audit hooks cannot be removed); inert unless
    # an emulation is active. Frames of this package are in Dynamo's skip list
    # (see __init__.py), so Dynamo never traces this hook.
    if event != "subprocess.Popen" or not _sinks:
        return
    try:
        argv = list(args[1]) if args[1] is not None else [args[0]]
    except TypeError:
        return
    if not argv or os.path.basename(str(argv[0])) != "ninja" or "-C" not in argv:
        return
    build_dir = str(argv[argv.index("-C") + 1])
    _sinks[-1]("build", os.path.basename(build_dir.rstrip("/")), build_dir, ())


_audit_installed = False


def _install_audit_hook() -> None:
    global _audit_installed
    with _lock:
        if not _audit_installed:
            sys.addaudithook(_audit)
            _audit_installed = True


# ------------------------------------------------------------- dry kernels

_SAFE_CALL = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p
)


def _no_op_kernel(handle, args, num_args, result):  # noqa: ARG001
    # tvm-ffi safe-call ABI: 0 = success; the result slot keeps its None.
    return 0


_NO_OP = _SAFE_CALL(_no_op_kernel)  # kept alive for the life of the process
_registered_symbols: set[str] = set()


@functools.cache
def _tvm_ffi_c_api() -> ctypes.CDLL:
    import tvm_ffi

    lib = ctypes.CDLL(tvm_ffi.libinfo.find_libtvm_ffi(), mode=ctypes.RTLD_GLOBAL)
    lib.TVMFFIEnvModRegisterSystemLibSymbol.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    lib.TVMFFIEnvModRegisterSystemLibSymbol.restype = ctypes.c_int
    return lib


def _export_names(sources: list[Path]) -> tuple[str, ...]:
    names: list[str] = []
    for source in sources:
        try:
            text = Path(source).read_text(errors="replace")
        except OSError:
            continue
        names.extend(_EXPORT_RE.findall(text))
    return tuple(dict.fromkeys(names))


def dry_module(name: str, exports: tuple[str, ...]):
    """A tvm_ffi Module named after `name` whose `exports` are no-op kernels.

    Symbols in tvm-ffi's system library cannot be unregistered, so each
    (module, kernel) symbol is registered once per process and reused.
    """
    import tvm_ffi

    prefix = f"{_SYMBOL_PREFIX}{name}__"
    lib = _tvm_ffi_c_api()
    for export in exports:
        symbol = f"__tvm_ffi_{prefix}{export}"
        if symbol not in _registered_symbols:
            rc = lib.TVMFFIEnvModRegisterSystemLibSymbol(
                symbol.encode(), ctypes.cast(_NO_OP, ctypes.c_void_p)
            )
            if rc != 0:
                raise RuntimeError(f"tvm-ffi refused the dry kernel symbol {symbol}")
            _registered_symbols.add(symbol)
    return tvm_ffi.system_lib(prefix)


def _spec_sources(name: str) -> list[Path]:
    core = sys.modules.get("flashinfer.jit.core")
    registry = getattr(core, "jit_spec_registry", None)
    spec = registry.get_all_specs().get(name) if registry is not None else None
    return list(getattr(spec, "sources", None) or [])


def _dry_load(path: str, fmt: str = "so") -> Any:  # noqa: ARG001
    # Called by tvm-ffi's C++ ModuleLoadFromFile (tvm_ffi/module.py load_module
    # -> _ffi_api.ModuleLoadFromFile) in place of dlopen.
    name = Path(path).stem
    exports = _export_names(_spec_sources(name))
    module = dry_module(name, exports)
    if _sinks:
        _sinks[-1]("load", name, str(path), exports)
    return module


# ------------------------------------------------------------ fake toolkit

_NVCC = """#!/bin/sh
# graphbreak-doctor emulated CUDA toolkit: answers FlashInfer's probes,
# compiles nothing.
case "$1" in
  --version)
    echo "nvcc: NVIDIA (R) Cuda compiler driver"
    echo "Copyright (c) 2005-2025 NVIDIA Corporation"
    echo "Cuda compilation tools, release {cuda}, V{cuda}.0"
    echo "Build cuda_{cuda}.r{cuda}/compiler.emulated_0"
    ;;
  --list-gpu-arch)
    for a in {archs}; do echo "compute_$a"; done
    ;;
  *)
    echo "graphbreak-doctor: emulated nvcc does not compile ($*)" >&2
    exit 1
    ;;
esac
"""

_NINJA = """#!/bin/sh
# graphbreak-doctor emulated build: FlashInfer's run_ninja gets a successful,
# empty build; nothing is compiled and no library is written.
exit 0
"""


def _cuda_archs(cuda: str) -> str:
    archs = [75, 80, 86, 87, 89, 90, 100, 101, 103, 120, 121]
    return " ".join(str(a) for a in archs)


def _write_exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def make_toolkit(root: Path, preset: DevicePreset) -> Path:
    cuda_home = root / "cuda"
    (cuda_home / "bin").mkdir(parents=True)
    (cuda_home / "include").mkdir()
    _write_exe(
        cuda_home / "bin" / "nvcc",
        _NVCC.replace("{cuda}", preset.cuda or "12.9").replace(
            "{archs}", _cuda_archs(preset.cuda or "12.9")
        ),
    )
    _write_exe(cuda_home / "bin" / "ninja", _NINJA)
    return cuda_home


# ------------------------------------------------------------ installation


def _flashinfer_caches() -> list[Any]:
    """functools caches at module level in FlashInfer (and in its classes)."""
    caches = []
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == "flashinfer" or mod_name.startswith("flashinfer.")):
            continue
        for value in list(vars(mod).values()):
            if hasattr(value, "cache_clear") and hasattr(value, "__wrapped__"):
                caches.append(value)
            elif isinstance(value, type) and value.__module__ == mod_name:
                for attr in list(vars(value).values()):
                    if hasattr(attr, "cache_clear") and hasattr(attr, "__wrapped__"):
                        caches.append(attr)
    return caches


def clear_flashinfer_caches() -> None:
    # Memoized answers (CUDA path and version, capability-keyed modules such as
    # get_fp4_quantization_module) must neither leak from the real machine into
    # the emulation nor from the emulation back out; clearing is a complete
    # restore for a pure cache.
    for cache in _flashinfer_caches():
        cache.cache_clear()


def import_flashinfer() -> Optional[Any]:
    if not flashinfer_installed():
        return None
    flashinfer = importlib.import_module("flashinfer")
    importlib.import_module("flashinfer.jit.core")
    importlib.import_module("flashinfer.jit.env")
    importlib.import_module("flashinfer.jit.cpp_ext")
    return flashinfer


def install(
    preset: DevicePreset,
    log: UndoLog,
    sink: Callable[..., JitRequest],
) -> dict:
    """Make FlashInfer see `preset` and run its JIT dry. Returns facts for describe()."""
    flashinfer = import_flashinfer()
    if flashinfer is None:
        return {"flashinfer": None}
    import tvm_ffi

    jit_core = sys.modules["flashinfer.jit.core"]
    jit_env = sys.modules["flashinfer.jit.env"]
    from flashinfer.compilation_context import CompilationContext

    _install_audit_hook()
    _tvm_ffi_c_api()

    root = Path(tempfile.mkdtemp(prefix=f"graphbreak-doctor-{preset.name}-"))
    log.call_on_undo(lambda: shutil.rmtree(root, ignore_errors=True))
    cuda_home = make_toolkit(root, preset)

    clear_flashinfer_caches()
    log.call_on_undo(clear_flashinfer_caches)

    log.setenv("CUDA_HOME", str(cuda_home))
    log.setenv("PATH", f"{cuda_home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    log.setenv("FLASHINFER_CUDA_ARCH_LIST", preset.arch_list)
    log.setenv("FLASHINFER_WORKSPACE_BASE", str(root / "home"))

    # jit/env.py computed these at import from the real environment.
    base = root / "home"
    log.setattr(jit_env, "FLASHINFER_BASE_DIR", base)
    log.setattr(jit_env, "FLASHINFER_CACHE_DIR", base / ".cache" / "flashinfer")
    workspace = jit_env._get_workspace_dir_name()  # FlashInfer's own naming, emulated arch
    log.setattr(jit_env, "FLASHINFER_WORKSPACE_DIR", workspace)
    log.setattr(jit_env, "FLASHINFER_JIT_DIR", workspace / "cached_ops")
    log.setattr(jit_env, "FLASHINFER_GEN_SRC_DIR", workspace / "generated")
    workspace.mkdir(parents=True, exist_ok=True)  # jit/core.py does this at import

    # jit/core.py: current_compilation_context is imported by name elsewhere,
    # so its set is updated in place (as refresh_current_compilation_context
    # does in 0.7.4) and restored in place.
    targets = jit_core.current_compilation_context.TARGET_CUDA_ARCHS
    saved = set(targets)

    def restore_targets() -> None:
        targets.clear()
        targets.update(saved)

    log.call_on_undo(restore_targets)
    emulated = CompilationContext().TARGET_CUDA_ARCHS
    targets.clear()
    targets.update(emulated)

    original_loader = tvm_ffi.registry.get_global_func(SO_LOADER)
    tvm_ffi.register_global_func(SO_LOADER, _dry_load, override=True)
    log.call_on_undo(
        lambda: tvm_ffi.register_global_func(SO_LOADER, original_loader, override=True)
    )

    _sinks.append(sink)
    log.call_on_undo(lambda: _sinks.remove(sink))

    return {
        "flashinfer": getattr(flashinfer, "__version__", None),
        "flashinfer_arch_list": preset.arch_list,
        "flashinfer_target_archs": sorted(f"{ma}.{mi}" for ma, mi in emulated),
        "jit_cache": str(workspace),
    }
