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
  and refuses to compile, whose `bin/nvidia-smi` answers a serving
  framework's start-up queries, and whose `bin/ninja` (first on PATH) succeeds
  without building anything. The subprocesses still run, from FlashInfer's code.
- The shared-library load: tvm_ffi's loader for ".so" files (the global
  function `ffi.Module.load_from_file.so`, which `ffi.ModuleLoadFromFile`
  dispatches to) is overridden. It returns a genuine `tvm_ffi.Module` (tvm_ffi's
  system library, `tvm_ffi.system_lib`) whose functions are genuine
  `tvm_ffi.Function` objects over one C-level no-op (a ctypes callback with
  tvm-ffi's safe-call ABI, registered with `TVMFFIEnvModRegisterSystemLibSymbol`).
  The function names are the ones the real library would export: the spec's
  sources are read for `TVM_FFI_DLL_EXPORT_TYPED_FUNC(name, ...)` (for a
  library FlashInfer's registry does not know, the sources in its build
  folder: SGLang's JIT generates its export wrapper there).
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

import atexit
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

from graphbreak_doctor.emulation import host_build
from graphbreak_doctor.emulation.preset import DevicePreset
from graphbreak_doctor.patching import UndoLog

SO_LOADER = "ffi.Module.load_from_file.so"
_SYMBOL_PREFIX = "graphbreak_doctor_dry_"


@dataclasses.dataclass(frozen=True)
class JitRecord:
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


class DryJitState:
    """What the dry JIT keeps for the life of the process, in one place.

    Most of it cannot be undone by design: an audit hook cannot be removed, and
    symbols in tvm-ffi's system library cannot be unregistered, so dry kernels
    and answers are built once and reused. What an emulation adds while active
    (a recorder, a mirror) is added and removed through its undo log."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seq = itertools.count(1)
        # Active recorders, innermost last; each is a callable(action, name, path, exports).
        self.sinks: list[Callable[..., JitRecord]] = []
        # Dry artifact repositories of active emulations (see install_artifact_mirror).
        self.mirrors: list[str] = []
        self.audit_installed = False
        self.registered_symbols: set[str] = set()
        self.prepared: dict[str, Any] = {}  # runner modules built by prepare_answers
        self.answer_functions: dict[str, Any] = {}  # symbol -> (tvm_ffi.Function, ctypes callback)
        self.converted: dict[Any, Any] = {}  # answer callable -> tvm_ffi.Function
        self.stub_lock = threading.Lock()
        self.stub_path: Optional[Path] = None
        # Host code built for this machine (host_build.py), per module name.
        self.host_lock = threading.Lock()
        self.host_libraries: dict[str, host_build.HostLibrary] = {}
        self.host_functions: dict[str, dict[str, Any]] = {}
        # tvm-ffi's own .so loader, while the dry one is installed.
        self.real_so_loader: Any = None

    def next_seq(self) -> int:
        with self.lock:
            return next(self.seq)


STATE = DryJitState()


def flashinfer_installed() -> bool:
    return importlib.util.find_spec("flashinfer") is not None


# ---------------------------------------------------------------- recording


def _audit(event: str, args: tuple) -> None:
    # Installed once per process (audit hooks cannot be removed); inert unless
    # an emulation is active. Frames of this package are in Dynamo's skip list
    # (see __init__.py), so Dynamo never traces this hook.
    if not STATE.sinks:
        return
    if event == "shutil.copyfile" and STATE.mirrors:
        # flashinfer/jit/cubin_loader.py download_file: a repository that is a
        # local directory is "downloaded from" with shutil.copy.
        src, dst = str(args[0]), str(args[1])
        for mirror in STATE.mirrors:
            if src.startswith(mirror):
                STATE.sinks[-1]("download", src[len(mirror):].lstrip("/"), dst, ())
                return
        return
    if event != "subprocess.Popen":
        return
    try:
        argv = list(args[1]) if args[1] is not None else [args[0]]
    except TypeError:
        return
    if not argv or os.path.basename(str(argv[0])) != "ninja" or "-C" not in argv:
        return
    build_dir = str(argv[argv.index("-C") + 1])
    STATE.sinks[-1]("build", os.path.basename(build_dir.rstrip("/")), build_dir, ())


def _install_audit_hook() -> None:
    with STATE.lock:
        if not STATE.audit_installed:
            sys.addaudithook(_audit)
            STATE.audit_installed = True


# ------------------------------------------------------------- dry kernels

_SAFE_CALL = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p
)


def _no_op_kernel(handle, args, num_args, result):  # noqa: ARG001
    # tvm-ffi safe-call ABI: 0 = success; the result slot keeps its None.
    return 0


NO_OP_KERNEL = _SAFE_CALL(_no_op_kernel)  # kept alive for the life of the process


@functools.cache
def _tvm_ffi_c_api() -> ctypes.CDLL:
    import tvm_ffi

    lib = ctypes.CDLL(tvm_ffi.libinfo.find_libtvm_ffi(), mode=ctypes.RTLD_GLOBAL)
    lib.TVMFFIEnvModRegisterSystemLibSymbol.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    lib.TVMFFIEnvModRegisterSystemLibSymbol.restype = ctypes.c_int
    lib.TVMFFIFunctionCall.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p]
    lib.TVMFFIFunctionCall.restype = ctypes.c_int
    return lib


def _read_sources(sources: list[Path]) -> str:
    texts = []
    for source in sources:
        try:
            texts.append(Path(source).read_text(errors="replace"))
        except OSError:
            continue
    return "\n".join(texts)


def _export_names(sources: list[Path]) -> tuple[str, ...]:
    return host_build.export_names(_read_sources(sources))


# ------------------------------------------------ kernels that answer

# Most exports are destination-passing kernels: a no-op is faithful. A few are
# host-side queries or constructors whose result FlashInfer's Python uses
# (a runner object, a tactic count, a workspace size); a no-op would answer
# None and FlashInfer would fail where a GPU machine does not. Those answer
# with a plain value of the C++ return type, chosen so that FlashInfer takes
# its ordinary path (one tactic, no extra workspace).
#
# flashinfer/data/csrc/fused_moe/cutlass_backend/flashinfer_cutlass_fused_moe_binding.cu:
# `init(...)` returns a `FusedMoeRunner` module (kind "fused_moe_runner") whose
# GetFunction offers these names.
_CUTLASS_MOE_RUNNER = {
    "get_tactic_num": lambda *a: 1,
    "get_gemm1_tactic_count": lambda *a: 1,
    "get_gemm2_tactic_count": lambda *a: 1,
    "get_tactic_occupancy": lambda *a: 1,
    "get_tactic_supports_activation_fusion": lambda *a: False,
    "get_valid_tactics_for_shape": lambda *a: [0],
    "get_workspace_size": lambda *a: 0,
    "run_gemm_profile": None,
    "run_moe": None,
    "run_moe_min_latency": None,
}


def _cutlass_moe_init(*args: Any) -> Any:
    # Built by prepare_answers() before any trace: nothing here may run
    # tvm_ffi's (traceable) Python while Dynamo is active.
    return STATE.prepared["fused_moe_runner"]


# The batch attention modules' `plan` (prefill, decode, MLA) is a host-side
# scheduler returning the plan as an `Array<int64_t>`; FlashInfer's Python
# keeps it and hands it back to `run` (asserting it is not None) without
# reading it. Only the dry kernels would read it. Sixteen zeros: the length
# of the prefill plan. Where the C++ plan returns the plan together with the
# bytes it staged in the host workspace (`Tuple<Array<int64_t>, int64_t>`,
# FlashInfer's MLA plan since 0.7), the answer is that pair, nothing staged.
_PLAN_INFO_LENGTH = 16
_STAGED_PLAN = "Tuple<Array<int64_t>, int64_t>"


def _attention_plan(*args: Any) -> Any:
    return [0] * _PLAN_INFO_LENGTH


def _staged_attention_plan(*args: Any) -> Any:
    return ([0] * _PLAN_INFO_LENGTH, 0)


# (JitSpec name pattern, export, the module's sources must say) -> answer;
# the first that fits is taken; an answer of None is a no-op.
ANSWERS: list[tuple[re.Pattern, str, str, Callable[..., Any]]] = [
    (re.compile(r"^fused_moe_(\d+|sm\d+)"), "init", "", _cutlass_moe_init),
    (re.compile(r"^batch_"), "plan", _STAGED_PLAN, _staged_attention_plan),
    (re.compile(r"^batch_"), "plan", "", _attention_plan),
]


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
                unbuilt = [lib.unavailable for name, lib in STATE.host_libraries.items()
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
    spec = _spec(name)
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
    return host_build.build(name, sources, _include_flags(name, host_build.cuda_host_headers()),
                            identity=f"flashinfer {getattr(flashinfer, '__version__', '')}")


def _build_host_code(name: str, sources: list[Path]) -> host_build.HostLibrary:
    library = build_host_library(name, sources)
    if library.unavailable or library.path is None or not library.exports:
        return library
    import tvm_ffi

    module = STATE.real_so_loader(str(library.path), "so")
    # Loaded for good, as tvm_ffi.load_module loads: objects made by its code
    # (FlashInfer's plan objects) may outlive any Python reference to it,
    # until the interpreter's very end.
    tvm_ffi.get_global_func("ffi.ModuleGlobalsAdd")(module)
    STATE.host_functions[name] = {export: module.get_function(export) for export in library.exports}
    return library


def host_functions(name: str, sources: list[Path]) -> dict[str, Any]:
    """Export -> FlashInfer's own host function, for a module in HOST_CODE
    (built once per process; see host_build.py)."""
    if _host_code_of(name) is None or STATE.real_so_loader is None:
        return {}
    with STATE.host_lock:
        if name not in STATE.host_libraries:
            STATE.host_libraries[name] = _build_host_code(name, sources)
    return dict(STATE.host_functions.get(name, {}))


def answers_for(name: str, exports: tuple[str, ...], source_text: str = "") -> dict[str, Callable[..., Any]]:
    out: dict[str, Callable[..., Any]] = {}
    for pattern, export, says, answer in ANSWERS:
        if export in exports and export not in out and pattern.search(name) and says in source_text:
            out[export] = answer
    return out




def _as_function(answer: Callable[..., Any]) -> Any:
    function = STATE.converted.get(answer)
    if function is None:
        import tvm_ffi

        function = STATE.converted[answer] = tvm_ffi.convert(answer)
    return function


def prepare_answers() -> None:
    """Convert every answer and build the runner modules, once per process,
    when the emulation is entered: answers run inside FlashInfer calls that a
    compiled function may be executing (outside the loader, which runs with
    Dynamo off), and must then only use what exists already."""
    with STATE.lock:
        for *_match, answer in ANSWERS:
            _as_function(answer)
        for answer in _CUTLASS_MOE_RUNNER.values():
            if answer is not None:
                _as_function(answer)
    if "fused_moe_runner" not in STATE.prepared:
        STATE.prepared["fused_moe_runner"] = dry_module(
            "fused_moe_runner", tuple(_CUTLASS_MOE_RUNNER), _CUTLASS_MOE_RUNNER
        )


def _answer_symbol(symbol: str, answer: Callable[..., Any]) -> Any:
    """A C symbol with tvm-ffi's safe-call ABI that forwards to `answer`.

    `answer` becomes a genuine tvm_ffi.Function (tvm_ffi.convert); the C entry
    point hands the packed arguments and the result slot to it through
    `TVMFFIFunctionCall`, so tvm-ffi itself converts arguments and the result
    (objects included) with the usual ownership rules.
    """
    lib = _tvm_ffi_c_api()
    function = _as_function(answer)
    handle = ctypes.c_void_p(function.__chandle__())

    def forward(_handle, args, num_args, result):
        return lib.TVMFFIFunctionCall(handle, args, num_args, result)

    callback = _SAFE_CALL(forward)
    STATE.answer_functions[symbol] = (function, callback)
    return callback


def dry_module(
    name: str,
    exports: tuple[str, ...],
    answers: Optional[dict[str, Optional[Callable[..., Any]]]] = None,
    source_text: str = "",
):
    """A tvm_ffi Module named after `name` whose `exports` are no-op kernels,
    except those in `answers` (see ANSWERS).

    Symbols in tvm-ffi's system library cannot be unregistered, so each
    (module, kernel) symbol is registered once per process and reused.
    """
    import tvm_ffi

    answers = answers if answers is not None else answers_for(name, exports, source_text)
    prefix = f"{_SYMBOL_PREFIX}{name}__"
    lib = _tvm_ffi_c_api()
    for export in exports:
        symbol = f"__tvm_ffi_{prefix}{export}"
        if symbol not in STATE.registered_symbols:
            answer = answers.get(export)
            entry = NO_OP_KERNEL if answer is None else _answer_symbol(symbol, answer)
            rc = lib.TVMFFIEnvModRegisterSystemLibSymbol(
                symbol.encode(), ctypes.cast(entry, ctypes.c_void_p)
            )
            if rc != 0:
                raise RuntimeError(f"tvm-ffi refused the dry kernel symbol {symbol}")
            STATE.registered_symbols.add(symbol)
    return tvm_ffi.system_lib(prefix)


def _spec(name: str) -> Any:
    core = sys.modules.get("flashinfer.jit.core")
    registry = getattr(core, "jit_spec_registry", None)
    return registry.get_all_specs().get(name) if registry is not None else None


def _spec_sources(name: str) -> list[Path]:
    return list(getattr(_spec(name), "sources", None) or [])


def _sources_beside(path: str) -> list[Path]:
    """The sources in a library's own build folder: another JIT than
    FlashInfer's (SGLang's) builds there, generated export wrapper included."""
    folder = Path(path).parent
    return sorted(p for suffix in ("*.cu", "*.cuh", "*.cpp", "*.cc") for p in folder.glob(suffix))


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
    sources = _spec_sources(name) or _sources_beside(path)
    exports = _export_names(sources)
    answers = {**answers_for(name, exports, _read_sources(sources)), **host_functions(name, sources)}
    module = dry_module(name, exports, answers)
    if _opens_cubin_loader(sources) and not Path(path).exists():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_cubin_loader_stub(), path)
    if STATE.sinks:
        STATE.sinks[-1]("load", name, str(path), exports)
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

# The driver's query tool, for the queries serving frameworks make at start-up
# (total memory, compute capability, name, the GPU list); anything else fails
# as on a machine where it cannot answer.
_NVIDIA_SMI = """#!/bin/sh
# graphbreak-doctor emulated nvidia-smi ({device_name})
case "$*" in
  *--query-gpu=memory.total*) echo "{memory_mib}" ;;
  *--query-gpu=compute_cap*) echo "{capability}" ;;
  *--query-gpu=name*) echo "{device_name}" ;;
  *--list-gpus*|-L) echo "GPU 0: {device_name} (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
  *) echo "graphbreak-doctor: emulated nvidia-smi does not answer: $*" >&2; exit 1 ;;
esac
"""


# What `nvcc --list-gpu-arch` of CUDA 12.9 lists; every registered GPU's
# architecture is added, so a new device preset is listed too.
_NVCC_ARCHS = (75, 80, 86, 87, 89, 90, 100, 101, 103, 120, 121)


def _cuda_archs() -> str:
    from graphbreak_doctor.emulation.presets import emulated_presets

    archs = set(_NVCC_ARCHS) | {p.major * 10 + p.minor for p in emulated_presets()}
    return " ".join(str(a) for a in sorted(archs))


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
            "{archs}", _cuda_archs()
        ),
    )
    _write_exe(cuda_home / "bin" / "ninja", _NINJA)
    _write_exe(cuda_home / "bin" / "nvidia-smi", _NVIDIA_SMI.format(
        device_name=preset.device_name, memory_mib=preset.memory_gb * 1024,
        capability=f"{preset.major}.{preset.minor}"))
    return cuda_home


# ------------------------------------------------------------ installation


def _is_functools_cache(value: Any) -> bool:
    # An isinstance check, not hasattr: some FlashInfer globals are lazy
    # library handles whose __getattr__ raises (flashinfer.comm.cuda_ipc's
    # libcudart wrapper when no CUDA runtime is loaded).
    return isinstance(value, functools._lru_cache_wrapper)


def _flashinfer_caches() -> list[Any]:
    """functools caches at module level in FlashInfer (and in its classes)."""
    caches = []
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == "flashinfer" or mod_name.startswith("flashinfer.")):
            continue
        for value in list(vars(mod).values()):
            if _is_functools_cache(value):
                caches.append(value)
            elif isinstance(value, type) and value.__module__ == mod_name:
                caches.extend(attr for attr in list(vars(value).values()) if _is_functools_cache(attr))
    return caches


def clear_flashinfer_caches() -> None:
    # Memoized answers (CUDA path and version, capability-keyed modules such as
    # get_fp4_quantization_module) must neither leak from the real machine into
    # the emulation nor from the emulation back out; clearing is a complete
    # restore for a pure cache.
    for cache in _flashinfer_caches():
        cache.cache_clear()


def device_read_at_import(error: BaseException) -> str:
    """Where FlashInfer's import asked torch.cuda about the device and failed
    ('flashinfer/...py:LINE'), or '' if ``error`` is not that. Some releases
    query the device in a module body (0.6.18: the GDN kernels' SM count):
    on a machine without a GPU they import only while an emulated device
    answers."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    for i in range(len(frames) - 1, -1, -1):
        parts = Path(frames[i].filename).parts
        if "flashinfer" in parts:
            rest = frames[i + 1:]
            if rest and all(Path(f.filename).parts[-2:-1] == ("cuda",) and "torch" in Path(f.filename).parts
                            for f in rest):
                return f"{'/'.join(parts[parts.index('flashinfer'):])}:{frames[i].lineno}"
            return ""
    return ""


def import_on_this_machine() -> str:
    """Import FlashInfer as far as this machine allows: '' when it imported,
    else where its import asked the device ('flashinfer/...py:LINE'; the
    package imports under an emulated device, install)."""
    try:
        import_flashinfer()
    except (AssertionError, RuntimeError) as e:
        where = device_read_at_import(e)
        if not where:
            raise
        return where
    return ""


def import_flashinfer() -> Optional[Any]:
    if not flashinfer_installed():
        return None
    flashinfer = importlib.import_module("flashinfer")
    importlib.import_module("flashinfer.jit.core")
    importlib.import_module("flashinfer.jit.env")
    importlib.import_module("flashinfer.jit.cpp_ext")
    _bind_submodules()
    return flashinfer


def _bind_submodules() -> None:
    """After an import that failed part-way (device_read_at_import), the
    submodules it loaded stay in sys.modules, and importing the package again
    does not bind them on their parents as a first import does: bind those
    missing (``flashinfer.utils`` and the like)."""
    for name, module in list(sys.modules.items()):
        parent_name, _, child = name.rpartition(".")
        if module is None or parent_name.split(".")[0] != "flashinfer":
            continue
        parent = sys.modules.get(parent_name)
        if parent is not None and not hasattr(parent, child):
            setattr(parent, child, module)


def install(
    preset: DevicePreset,
    log: UndoLog,
    sink: Callable[..., JitRecord],
    scratch: Path,
) -> dict:
    """Make FlashInfer see `preset` and run its JIT dry, with the emulated
    toolkit and the JIT cache in `scratch` (a folder the caller removes).
    Returns facts for describe()."""
    cuda_home = make_toolkit(scratch, preset)
    log.setenv("CUDA_HOME", str(cuda_home))
    log.setenv("PATH", f"{cuda_home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    flashinfer = import_flashinfer()
    if flashinfer is None:
        return {"flashinfer": None}
    import tvm_ffi

    jit_core = sys.modules["flashinfer.jit.core"]
    jit_env = sys.modules["flashinfer.jit.env"]
    from flashinfer.compilation_context import CompilationContext

    _install_audit_hook()
    _tvm_ffi_c_api()
    prepare_answers()

    root = scratch
    clear_flashinfer_caches()
    log.call_on_undo(clear_flashinfer_caches)

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
    # The loader runs inside FlashInfer calls that a compiled function may be
    # executing; Dynamo would compile the Python it calls (tvm-ffi's, and
    # FlashInfer's build flags), so it runs with Dynamo off.
    import torch._dynamo

    tvm_ffi.register_global_func(SO_LOADER, torch._dynamo.disable(_dry_load), override=True)
    log.call_on_undo(
        lambda: tvm_ffi.register_global_func(SO_LOADER, original_loader, override=True)
    )
    log.setattr(STATE, "real_so_loader", original_loader)

    install_artifact_mirror(root, log)
    _keep_scratch_buffers(log)

    STATE.sinks.append(sink)
    log.call_on_undo(lambda: STATE.sinks.remove(sink))

    return {
        "flashinfer": getattr(flashinfer, "__version__", None),
        "flashinfer_arch_list": preset.arch_list,
        "flashinfer_target_archs": sorted(f"{ma}.{mi}" for ma, mi in emulated),
        "jit_cache": str(workspace),
    }


# ------------------------------------------------------- artifact repository
#
# Some modules fetch files from NVIDIA's artifact repository while their JIT
# spec is generated (flashinfer/jit/fused_moe.py
# gen_trtllm_gen_fused_moe_sm100_module: the batched-GEMM `checksums.txt`,
# `flashinferMetaInfo.h` and the export headers, through
# jit/cubin_loader.py get_artifact -> load_cubin -> download_file). There is no
# network here, and the build that would use the files is dry anyway.
#
# FlashInfer reads the repository location from FLASHINFER_CUBINS_REPOSITORY
# and accepts a local directory (download_file's "local file copy" branch).
# The emulation serves a dry repository: files with the names FlashInfer asks
# for, a `checksums.txt` that lists their real sha256, and the pinned hash of
# that `checksums.txt` (artifacts.CheckSumHash) set to match it -- what the
# real repository at the pinned revision provides. The local artifact cache
# (FLASHINFER_CUBIN_DIR) starts empty, so every fetch runs FlashInfer's whole
# Python path (cache miss, file lock, copy, sha256 verification) and is
# recorded as a "download" JIT request. Kernel cubins are fetched by the
# compiled library at launch (cubin_loader.setup_cubin_loader); launches are
# dry, so none are.


def _dry_metainfo() -> str:
    """A kernel manifest with one (empty) entry per cubin architecture.

    flashinfer/jit/trtllm_gen_metainfo.py filter_metainfo parses the manifest
    (0.7+) and refuses one without a kernel list or without an entry for the
    module's architecture family; the layout below is the one it parses.
    """
    archs = ["Sm100a", "Sm100f", "Sm103a", "Sm107a"]
    meta = sys.modules.get("flashinfer.jit.trtllm_gen_metainfo")
    if meta is not None:
        archs = list(
            dict.fromkeys(
                list(getattr(meta, "BLACKWELL_CUBIN_ARCHS", ())) + list(getattr(meta, "RUBIN_CUBIN_ARCHS", ()))
            )
        ) or archs
    lines = [
        "// graphbreak-doctor dry artifact: an empty batched-GEMM kernel manifest",
        "#pragma once",
        f"static constexpr size_t tllmGenBatchedGemmListLen = {len(archs)};",
        "static const batchedGemm::BatchedGemmConfig tllmGenBatchedGemmList[] = {",
    ]
    for arch in archs:
        lines += ["{nullptr, 0, 0, 0,", f" }}, gemm::SmVersion::{arch}}},"]
    lines += ["};", ""]
    return "\n".join(lines)


def _bmm_files(fused_moe_jit: Any) -> dict[str, bytes]:
    headers = list(getattr(fused_moe_jit, "BMM_EXPORT_HEADERS", []) or [])
    files = {"include/flashinferMetaInfo.h": _dry_metainfo().encode()}
    for header in headers:
        files[f"include/trtllmGen_bmm_export/{header}"] = (
            f"// graphbreak-doctor dry artifact: {header}\n".encode()
        )
    return files


def _write_checksummed(directory: Path, files: dict[str, bytes]) -> str:
    import hashlib

    lines = []
    for rel, data in files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        lines.append(f"{hashlib.sha256(data).hexdigest()}  {rel}")
    checksums = ("\n".join(lines) + "\n").encode()
    (directory / "checksums.txt").write_bytes(checksums)
    return hashlib.sha256(checksums).hexdigest()


def install_artifact_mirror(root: Path, log: UndoLog) -> None:
    try:
        artifacts = importlib.import_module("flashinfer.artifacts")
        cubin_loader = importlib.import_module("flashinfer.jit.cubin_loader")
        fused_moe_jit = importlib.import_module("flashinfer.jit.fused_moe")
    except ImportError:
        return
    paths = getattr(artifacts, "ArtifactPath", None)
    hashes = getattr(artifacts, "CheckSumHash", None)
    if paths is None or hashes is None or not hasattr(paths, "TRTLLM_GEN_BMM"):
        return
    mirror = root / "artifacts"
    cache = root / "cubins"
    cache.mkdir(parents=True, exist_ok=True)
    bmm_sha = _write_checksummed(mirror / paths.TRTLLM_GEN_BMM, _bmm_files(fused_moe_jit))
    log.setattr(hashes, "TRTLLM_GEN_BMM", bmm_sha)
    if hasattr(paths, "TRTLLM_GEN_FMHA") and hasattr(hashes, "TRTLLM_GEN_FMHA"):
        # TensorRT-LLM's attention kernels (trtllm-gen FMHA, MLA decode):
        # the module is built against one header of the release, never parsed
        # in Python; a dry build only needs it to exist.
        fmha = {"include/flashInferMetaInfo.h": b"// graphbreak-doctor dry artifact: FMHA kernel manifest\n"}
        log.setattr(hashes, "TRTLLM_GEN_FMHA", _write_checksummed(mirror / paths.TRTLLM_GEN_FMHA, fmha))

    repository = str(mirror) + "/"
    real_repository = cubin_loader.FLASHINFER_CUBINS_REPOSITORY
    real_cache = sys.modules["flashinfer.jit.env"].FLASHINFER_CUBIN_DIR
    # Both are module constants computed at import and imported by name.
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == "flashinfer" or mod_name.startswith("flashinfer.")):
            continue
        if vars(mod).get("FLASHINFER_CUBINS_REPOSITORY") == real_repository:
            log.setattr(mod, "FLASHINFER_CUBINS_REPOSITORY", repository)
        if vars(mod).get("FLASHINFER_CUBIN_DIR") == real_cache:
            log.setattr(mod, "FLASHINFER_CUBIN_DIR", cache)
    log.setenv("FLASHINFER_CUBINS_REPOSITORY", repository)
    log.setenv("FLASHINFER_CUBIN_DIR", str(cache))
    STATE.mirrors.append(str(mirror))
    log.call_on_undo(lambda: STATE.mirrors.remove(str(mirror)))


# flashinfer/utils.py keeps scratch buffers and memory pools in module-level
# containers (_get_cache_buf, _get_stream_cache_buf). Inside the emulation they
# fill with fake tensors and emulated pools; they are restored on exit so none
# of them reaches a later, real run.
_SCRATCH = ("_cache_buf", "_stream_cache_buf", "_stream_cache_mem_pools", "_cache_buf_retired")


def _keep_scratch_buffers(log: UndoLog) -> None:
    utils = sys.modules.get("flashinfer.utils")
    for name in _SCRATCH:
        container = getattr(utils, name, None)
        if not isinstance(container, (dict, list)):
            continue
        saved = container.copy()

        def restore(container=container, saved=saved) -> None:
            container.clear()
            if isinstance(container, dict):
                container.update(saved)
            else:
                container.extend(saved)

        log.call_on_undo(restore)
