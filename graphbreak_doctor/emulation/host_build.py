"""A JIT module's host-side C++, compiled for this machine's CPU.

Some FlashInfer modules plan each call on the host, in C++: they inspect the
tensors' shapes and strides, pick a kernel variant, and hand Python a plan
(sizes of scratch buffers, a plan object to pass back to the kernel). A dry
no-op answers such a planner with None, and FlashInfer's Python then fails
where a GPU machine does not. Rather than imitate the planner, the emulation
builds FlashInfer's own host code with the host C++ compiler, and the dry
module answers those exports with it. Kernel launches stay dry.

How a library is made from a module's sources:
- Each source is compiled as C++ (``-x c++``) with the include flags
  FlashInfer's own build uses, against CUDA's host headers (``cuda_runtime.h``
  and friends: Triton's bundled copy, which SGLang's environment has, or a
  CUDA toolkit's; see ``cuda_host_headers``). The host pass of
  nvcc hides the bodies of device functions; a plain C++ compiler parses them,
  so the few device-only names they use (``threadIdx``, ``__ffs``, ...) are
  declared, never defined, by a forced include (``_DEVICE_NAMES``). A source
  that does not compile (kernels, ``<<<...>>>`` launches) is left out.
- An export is kept only if the code it reaches links with nothing but
  tvm-ffi and the C++ runtime: each is linked on its own with
  ``--gc-sections``, a version script that exports only it, and
  ``--no-undefined``. Anything that reaches a kernel launcher or the CUDA
  runtime fails that link and stays a dry no-op.
- The kept exports are linked into one library and loaded with tvm-ffi's own
  loader, so they are genuine ``tvm_ffi.Function`` objects over FlashInfer's
  code. They read fake CUDA tensors as a GPU build would: tvm-ffi hands C++
  the tensor's device (CUDA), shape, strides and dtype; the data pointer is
  the fake storage's (zero plus the view's offset), never dereferenced by a
  planner.

Libraries are cached by the hash of what went into them (compiler, flags,
sources, tvm-ffi version, and the caller's ``identity``: FlashInfer's version,
which stands for the headers the sources include) in ``host-build/`` of the
doctor's cache folder (``graphbreak_doctor/cache.py``). A build writes into a temporary folder and renames it into
place, so concurrent traces never see half a library.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

from graphbreak_doctor.cache import cache_root, folder_problem
from graphbreak_doctor.progress import Progress

EXPORT_RE = re.compile(r"TVM_FFI_DLL_EXPORT_TYPED_FUNC\(\s*([A-Za-z_]\w*)\s*,")

# Names only device code uses, declared for the host compiler's parse.
_DEVICE_NAMES = """#pragma once
// graphbreak-doctor: device-only names, declared (never defined) so that a
// host C++ compiler parses device functions a CUDA host pass would hide.
#include <vector_types.h>
extern const uint3 threadIdx, blockIdx;
extern const dim3 blockDim, gridDim;
extern const int warpSize;
int __ffs(int);
int __popc(unsigned int);
int __clz(int);
"""

_FLAGS = ("-std=c++17", "-O0", "-fPIC", "-ffunction-sections", "-fdata-sections", "-w")
_CUDA_HEADERS = ("cuda_runtime.h", "cuda_bf16.h", "vector_types.h", "crt/host_defines.h")


@dataclasses.dataclass
class HostLibrary:
    """What a host build gave: the library and the exports it answers, or why not."""

    name: str
    path: Optional[Path] = None
    exports: tuple[str, ...] = ()
    left_out: dict[str, str] = dataclasses.field(default_factory=dict)  # source or export -> why
    unavailable: str = ""  # why no library could be built at all


def export_names(text: str) -> tuple[str, ...]:
    """The tvm-ffi exports a C++ source declares, in order, once each."""
    return tuple(dict.fromkeys(EXPORT_RE.findall(text)))


def compiler() -> Optional[str]:
    for candidate in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        found = shutil.which(candidate) if candidate else None
        if found:
            return found
    return None


def cuda_host_headers() -> Optional[Path]:
    """A folder with all of CUDA's host headers: GRAPHBREAK_DOCTOR_CUDA_INCLUDE,
    Triton's bundled copy, or a CUDA toolkit's. (NVIDIA's pip wheels split them
    over two packages, so they are not looked for.)"""
    candidates: list[Path] = []
    if os.environ.get("GRAPHBREAK_DOCTOR_CUDA_INCLUDE"):
        candidates.append(Path(os.environ["GRAPHBREAK_DOCTOR_CUDA_INCLUDE"]))
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(location) / "backends" / "nvidia" / "include"
                       for location in spec.submodule_search_locations]
    candidates.append(Path("/usr/local/cuda/include"))
    candidates += sorted(Path("/usr/local").glob("cuda-*/include"), reverse=True)
    for folder in candidates:
        if all((folder / header).is_file() for header in _CUDA_HEADERS):
            return folder
    return None


def _first_error(text: str) -> str:
    lines = text.splitlines()
    for marker in ("undefined reference", "error"):
        for line in lines:
            if marker in line:
                return line.strip()[:300]
    return (lines or ["failed"])[-1].strip()[:300]


def _compile(cxx: str, flags: list[str], source: Path, obj: Path) -> str:
    """Compile one source; '' on success, else the first error."""
    result = subprocess.run(
        [cxx, *flags, "-x", "c++", "-c", str(source), "-o", str(obj)],
        capture_output=True, text=True, check=False,
    )
    return "" if result.returncode == 0 else _first_error(result.stderr)


def _link(cxx: str, objects: list[Path], exports: list[str], out: Path, tvm_ffi_lib: Path) -> str:
    """Link `objects` into `out` exporting only `exports`; '' on success."""
    script = out.with_suffix(".map")
    symbols = " ".join(f"__tvm_ffi_{name};" for name in exports)
    script.write_text(f"{{ global: {symbols} local: *; }};\n")
    result = subprocess.run(
        [cxx, "-shared", "-o", str(out), *map(str, objects), "-Wl,--gc-sections",
         f"-Wl,--version-script={script}", "-Wl,--no-undefined", str(tvm_ffi_lib),
         f"-Wl,-rpath,{tvm_ffi_lib.parent}"],
        capture_output=True, text=True, check=False,
    )
    return "" if result.returncode == 0 else _first_error(result.stderr)


def _key(cxx: str, flags: list[str], sources: list[Path], identity: str) -> str:
    import tvm_ffi

    digest = hashlib.sha256()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
    for part in (version, " ".join(flags), getattr(tvm_ffi, "__version__", ""), _DEVICE_NAMES, identity):
        digest.update(part.encode())
    for source in sources:
        digest.update(str(source).encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:20]


def _from_manifest(name: str, manifest: Path) -> HostLibrary:
    facts = json.loads(manifest.read_text())
    return HostLibrary(name, manifest.parent / facts["library"], tuple(facts["exports"]), dict(facts["left_out"]))


def compile_library(name: str, sources: list[Path], include_flags: list[str], identity: str = "") -> HostLibrary:
    """Build (or find in the cache) the host library of module `name`;
    `identity` names what the sources come from (their headers are not hashed)."""
    import tvm_ffi

    out = HostLibrary(name)
    cxx = compiler()
    headers = cuda_host_headers()
    if cxx is None:
        out.unavailable = "no C++ compiler on PATH (c++, g++ or clang++; or set CXX)"
        return out
    if headers is None:
        out.unavailable = ("CUDA's host headers (cuda_runtime.h) were not found: install triton, or a CUDA "
                           "toolkit, or set GRAPHBREAK_DOCTOR_CUDA_INCLUDE")
        return out
    sources = [Path(s) for s in sources if Path(s).is_file()]
    flags = [*_FLAGS, *include_flags, f"-I{headers}"]
    builds, unsafe = cache_root() / "host-build", folder_problem(cache_root())
    if unsafe:  # a library loaded from where others can write runs their code: built for this run alone
        builds = Path(tempfile.mkdtemp(prefix="graphbreak-doctor-host-build-"))
    folder = builds / f"{name}-{_key(cxx, flags, sources, identity)}"
    manifest = folder / "library.json"
    if manifest.is_file():
        return _from_manifest(name, manifest)

    folder.parent.mkdir(parents=True, exist_ok=True)
    Progress()(f"compiling FlashInfer's {name} host code for this machine "
               + (f"(not cached: {unsafe})" if unsafe else f"(once: cached in {folder.parent})"))
    work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder.parent))
    try:
        stub = work / "device_names.h"
        stub.write_text(_DEVICE_NAMES)
        compile_flags = [*flags, "-include", str(stub)]
        objects = {source: work / f"{i}-{source.stem}.o" for i, source in enumerate(sources)}
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            errors = dict(zip(sources, pool.map(
                lambda s: _compile(cxx, compile_flags, s, objects[s]), sources)))
        built = [objects[s] for s in sources if not errors[s]]
        out.left_out.update({s.name: why for s, why in errors.items() if why})
        candidates = [e for s in sources if not errors[s] for e in export_names(s.read_text(errors="replace"))]
        tvm_ffi_lib = Path(tvm_ffi.libinfo.find_libtvm_ffi())
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            links = dict(zip(candidates, pool.map(
                lambda e: _link(cxx, built, [e], work / f"probe-{e}.so", tvm_ffi_lib), candidates)))
        kept = [e for e in candidates if not links[e]]
        out.left_out.update({e: why for e, why in links.items() if why})
        if not kept:  # not cached: a broken compiler or header set may be fixed
            first = next(iter(out.left_out.values()), "no sources")
            out.unavailable = f"none of the module's exports builds for the host ({first})"
            return out
        library = f"lib{name}_host.so"
        why = _link(cxx, built, kept, work / library, tvm_ffi_lib)
        if why:
            out.unavailable = f"linking the host library failed: {why}"
            return out
        for leftover in work.iterdir():
            if leftover.name != library:
                leftover.unlink()
        (work / "library.json").write_text(json.dumps(
            {"library": library, "exports": kept, "left_out": out.left_out}, indent=1))
        try:
            work.rename(folder)
        except OSError:
            if not manifest.is_file():  # not another process's identical build
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _from_manifest(name, manifest)
