"""FlashInfer's host-side C++ built for this machine (host_build.py), for the
modules whose planners decide on the host how a call runs; their kernels
stay dry."""

from __future__ import annotations

import dataclasses
import re
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Optional

from graphbreak_doctor.emulation import host_build
from graphbreak_doctor.emulation.flashinfer import specs

# Modules whose host-side C++ (a planner that reads shapes and strides and
# returns sizes and a plan object) the emulation compiles for this machine, so
# that those exports answer with FlashInfer's own code (host_build.py); their
# kernels stay dry. (JitSpec name pattern, the Python package that asks, what
# the host code does.)
HOST_CODE: list[tuple[re.Pattern, str, str]] = [
    (re.compile(r"^sparse_mla_sm120$"), "flashinfer.mla._sparse_mla_sm120",
     "FlashInfer's SM120 sparse MLA plans each call on the host in its C++ (inspect_metadata, "
     "metadata_candidates, resolve_attention)"),
]


@dataclasses.dataclass
class HostCodeState:
    """Host code built for this machine, per module name, built once and
    kept loaded for the life of the process."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    libraries: dict[str, host_build.HostLibrary] = dataclasses.field(default_factory=dict)
    functions: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


STATE = HostCodeState()


def _host_code_of(name: str) -> Optional[tuple[re.Pattern, str, str]]:
    return next((entry for entry in HOST_CODE if entry[0].search(name)), None)


def unanswered_planner(error: BaseException) -> str:
    """Why the emulation could not answer the host planner `error` came out
    of (its host code could not be built here), or ''."""
    tb = error.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        for pattern, package, what in HOST_CODE:
            if module == package or module.startswith(package + "."):
                unbuilt = [lib.unavailable for name, lib in STATE.libraries.items()
                           if pattern.search(name) and lib.unavailable]
                if unbuilt:
                    return f"{what}; the emulation builds that code for this machine, but cannot here: {unbuilt[0]}"
        tb = tb.tb_next
    return ""


def _include_flags(name: str, headers: Optional[Path]) -> list[str]:
    """The include flags FlashInfer's own build of `name` uses, with CUDA's
    host headers from `headers` (jit/cpp_ext.py build_common_cflags)."""
    cpp_ext = sys.modules.get("flashinfer.jit.cpp_ext")
    common = getattr(cpp_ext, "build_common_cflags", None)
    if common is None or headers is None:
        return []
    spec = specs.spec(name)
    flags: list[str] = []
    for flag in common(str(headers.parent), getattr(spec, "extra_include_dirs", None)):
        flag = str(flag).replace("$cuda_home/include", str(headers))
        flags += flag.split(" ", 1) if flag.startswith("-isystem ") else [flag]
    return flags


def build_host_library(name: str, sources: list[Path]) -> host_build.HostLibrary:
    """FlashInfer module ``name``'s host code built (or found in the cache
    folder) with the headers and flags its own JIT spec gives, keyed by the
    FlashInfer release as well; not loaded."""
    flashinfer = sys.modules["flashinfer"]
    return host_build.compile_library(name, sources, _include_flags(name, host_build.cuda_host_headers()),
                            identity=f"flashinfer {getattr(flashinfer, '__version__', '')}")


def _build_host_code(name: str, sources: list[Path], load: Callable[..., Any]) -> host_build.HostLibrary:
    library = build_host_library(name, sources)
    if library.unavailable or library.path is None or not library.exports:
        return library
    import tvm_ffi

    module = load(str(library.path), "so")
    # Loaded for good, as tvm_ffi.load_module loads: objects made by its code
    # (FlashInfer's plan objects) may outlive any Python reference to it,
    # until the interpreter's very end.
    tvm_ffi.get_global_func("ffi.ModuleGlobalsAdd")(module)
    STATE.functions[name] = {export: module.get_function(export) for export in library.exports}
    return library


def host_functions(name: str, sources: list[Path], load: Optional[Callable[..., Any]]) -> dict[str, Any]:
    """Export -> FlashInfer's own host function, for a module in HOST_CODE
    (built once per process and loaded with `load`, tvm-ffi's own loader;
    none without it; see host_build.py)."""
    if _host_code_of(name) is None or load is None:
        return {}
    with STATE.lock:
        if name not in STATE.libraries:
            STATE.libraries[name] = _build_host_code(name, sources, load)
    return dict(STATE.functions.get(name, {}))
