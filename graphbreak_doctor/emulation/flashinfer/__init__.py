"""FlashInfer's JIT, running dry: all of its Python, none of the compiling.

What stays real (and is therefore seen by Dynamo exactly as on a GPU machine):
`gen_jit_spec` and the spec registry, `JitSpec.build_and_load` / `try_load` /
`build` / `load`, FileLock, `Path.exists` / `os.stat` / `mkdir` on the JIT
cache, writing build.ninja, `get_cuda_path` / `get_cuda_version`
(flashinfer/jit/cpp_ext.py) with their `subprocess` calls, `run_ninja`'s
`subprocess.run`, and `tvm_ffi.load_module` (tvm_ffi/module.py).

What is replaced, one module each:
- the CUDA toolkit: a throwaway toolkit with an `nvcc`, `nvidia-smi` and
  `ninja` that answer and compile nothing (toolkit.py), found the way the
  user's environment finds theirs (``toolkit_environment``);
- the shared-library load (loader.py): a dry tvm-ffi module (kernels.py)
  whose exports are no-ops, except host queries FlashInfer's Python reads
  (answers.py), tensors a MoE launcher allocates and returns
  (launcher_outputs.py) and host planners built for this machine
  (host_code.py);
- the JIT cache and target architectures, those of the emulated GPU
  (workspace.py); FlashInfer's caches and scratch buffers, kept apart
  (caches.py); NVIDIA's artifact repository, a dry local one
  (artifact_mirror.py).

FlashInfer is imported before anything is patched (imports.py). Each build,
load and download it asks for is reported to the innermost emulation's
recorder while the call that caused it is executing (recorder.py). Every
process-global change goes through the emulation's undo log; what cannot be
undone (an audit hook, symbols in tvm-ffi's system library) is made once per
process and stays inert or is reused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from graphbreak_doctor.emulation.flashinfer import (
    answers,
    artifact_mirror,
    caches,
    host_code,
    imports,
    kernels,
    launcher_outputs,
    loader,
    recorder,
    toolkit,
    workspace,
)
from graphbreak_doctor.emulation.flashinfer.answers import ANSWERS, answers_for, dry_module, prepare_answers
from graphbreak_doctor.emulation.flashinfer.artifact_mirror import install_artifact_mirror
from graphbreak_doctor.emulation.flashinfer.caches import clear_flashinfer_caches
from graphbreak_doctor.emulation.flashinfer.host_code import HOST_CODE, build_host_library, unanswered_planner
from graphbreak_doctor.emulation.flashinfer.imports import (
    device_read_at_import,
    flashinfer_installed,
    import_flashinfer,
    import_on_this_machine,
)
from graphbreak_doctor.emulation.flashinfer.kernels import NO_OP_KERNEL
from graphbreak_doctor.emulation.flashinfer.loader import SO_LOADER
from graphbreak_doctor.emulation.flashinfer.recorder import JitRecord, next_seq
from graphbreak_doctor.emulation.flashinfer.toolkit import make_toolkit
from graphbreak_doctor.emulation.preset import DevicePreset
from graphbreak_doctor.patching import UndoLog


def host_libraries() -> dict:
    """FlashInfer host code built for this machine so far, per module name."""
    return dict(host_code.STATE.libraries)


# The variables that name a CUDA toolkit, in the order FlashInfer's
# get_cuda_path (flashinfer/jit/cpp_ext.py) and torch's cpp_extension read them.
TOOLKIT_VARIABLES = ("CUDA_HOME", "CUDA_PATH")


def toolkit_environment(cuda_home: Path, log: UndoLog) -> str:
    """Present the emulated toolkit as the user's environment presents theirs,
    and say how (the findings' ``device.cuda_toolkit``).

    Each of ``TOOLKIT_VARIABLES`` the user has set names the emulated toolkit
    instead; one the user has not set stays unset, so that code that looks
    for a toolkit takes the branch it takes in the user's server (FlashInfer's
    ``get_cuda_path`` then runs ``which nvcc``). Either way the emulated
    ``bin`` comes first on PATH, where the user's nvcc would be."""
    named = [name for name in TOOLKIT_VARIABLES if os.environ.get(name)]
    for name in named:
        log.setenv(name, str(cuda_home))
    log.setenv("PATH", f"{cuda_home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    if named:
        return f"{' and '.join(named)} set here: the emulated toolkit stood in for it; its bin first on PATH"
    return (f"{' and '.join(TOOLKIT_VARIABLES)} unset here, so unset for the traced code too: "
            "a toolkit is found by nvcc on PATH (the emulated toolkit's bin first)")


def install(
    preset: DevicePreset,
    log: UndoLog,
    sink: Callable[..., JitRecord],
    scratch: Path,
    gpus: int = 0,
) -> dict:
    """Make FlashInfer see `preset` (a node of `gpus` of them, default the
    preset's) and run its JIT dry, with the emulated toolkit and the JIT
    cache in `scratch` (a folder the caller removes). Returns facts for
    describe()."""
    cuda_home = toolkit.make_toolkit(scratch, preset, gpus)
    found_by = toolkit_environment(cuda_home, log)
    flashinfer = imports.import_flashinfer()
    if flashinfer is None:
        return {"flashinfer": None, "cuda_toolkit": found_by}
    import tvm_ffi  # noqa: F401  (the dry parts below need it loaded)

    recorder.install_audit_hook()
    kernels.tvm_ffi_c_api()
    answers.prepare_answers()

    caches.clear_caches(log)
    jit_workspace, emulated = workspace.install(preset, log, scratch)
    loader.install(log)
    launcher_outputs.install(log)
    artifact_mirror.install_artifact_mirror(scratch, log)
    caches.keep_scratch_buffers(log)
    recorder.add_sink(sink, log)

    return {
        "flashinfer": getattr(flashinfer, "__version__", None),
        "cuda_toolkit": found_by,
        "flashinfer_arch_list": preset.arch_list,
        "flashinfer_target_archs": sorted(f"{ma}.{mi}" for ma, mi in emulated),
        "jit_cache": str(jit_workspace),
    }


__all__ = [
    "ANSWERS",
    "HOST_CODE",
    "NO_OP_KERNEL",
    "SO_LOADER",
    "JitRecord",
    "answers_for",
    "build_host_library",
    "clear_flashinfer_caches",
    "device_read_at_import",
    "dry_module",
    "flashinfer_installed",
    "host_libraries",
    "import_flashinfer",
    "import_on_this_machine",
    "install",
    "install_artifact_mirror",
    "make_toolkit",
    "toolkit_environment",
    "next_seq",
    "prepare_answers",
    "unanswered_planner",
]
