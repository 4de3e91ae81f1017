"""What an emulated GPU changes, on top of itself, for vLLM. Each change
goes through an undo log and is named in ``CHANGES`` (the findings list the
ones used).

- ``platform``: vLLM decides its platform once, lazily, from probes that
  need a GPU (NVML); the doctor puts vLLM's own CUDA platform class (the one
  it picks without NVML, which reads ``torch.cuda``, which the emulation
  answers) in place before anything else of vLLM is imported, so that every
  import-time choice (which model class an architecture maps to, which
  kernels exist) is made for the emulated GPU.
- ``inspect_in_process``: vLLM inspects a model class in a fresh
  interpreter, which would start without the emulation; here it runs in
  this process, inside it.
- ``isolate_caches``: vLLM's cache and config folders (and the JIT caches
  of what it imports) go into the emulation's scratch folder, not the home.
- ``aot_compile_off``: vLLM's AOT compile and compile cache (the compiled
  artifact saved, and loaded at the next start) are off.
- ``accelerator_streams``: the generic stream and event classes on the
  CUDA device (or on the current accelerator, the GPU on a GPU machine)
  make the emulated stream and event.
- ``eager_phases``: the decorated forward runs eagerly while the phases
  run (vLLM's backend compiles pieces with Inductor for the device, which a
  CPU build cannot); the doctor then traces it as vLLM compiles it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from graphbreak_doctor.emulation import nvml
from graphbreak_doctor.patching import UndoLog

CHANGES = {
    "platform": "vLLM's CUDA platform (its NVML-free class, which reads torch.cuda) installed as its current "
                "platform before any other vLLM import",
    "inspect_in_process": "vLLM's model-class inspection run in this process (it starts a fresh interpreter)",
    "isolate_caches": "vLLM's cache and config folders in the emulation's scratch folder",
    "aot_compile_off": "vLLM's AOT compile and compile cache off (they save and load the compiled artifact; "
                       "Dynamo traces the same forward)",
    "accelerator_streams": "torch.Stream() and torch.Event() on the CUDA device or the current accelerator "
                           "answered with an emulated stream and event",
    "eager_phases": "the compiled forward ran eagerly while the phases ran (vLLM's backend compiles with "
                    "Inductor for the device); it is traced as vLLM compiles it",
}

CACHE_VARIABLES = {
    "VLLM_CACHE_ROOT": "vllm-cache",
    "VLLM_CONFIG_ROOT": "vllm-config",
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "CUDA_CACHE_PATH": "nv",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
}


def scratch(log: UndoLog) -> Path:
    folder = tempfile.TemporaryDirectory(prefix="graphbreak-doctor-vllm-")
    log.call_on_undo(folder.cleanup)
    return Path(folder.name)


def isolate_caches(log: UndoLog, folder: Path) -> None:
    """Call before vLLM is imported (it reads them at import)."""
    for variable, sub in CACHE_VARIABLES.items():
        log.setenv(variable, str(folder / sub))
    # Usage statistics are never sent from here.
    log.setenv("VLLM_NO_USAGE_STATS", "1")
    log.setenv("DO_NOT_TRACK", "1")


def install_platform(log: UndoLog) -> Any:
    """vLLM's CUDA platform as its current platform, chosen as vLLM chooses
    it when its platform module is imported: the one that asks NVML where
    NVML starts (the emulated node answers it: emulation/nvml.py), else the
    one without; returns it."""
    import vllm.platforms as platforms
    from vllm.platforms import cuda

    binding = getattr(cuda, "pynvml", None)  # vLLM's own copy of NVML's binding
    chosen = cuda.NonNvmlCudaPlatform
    if binding is not None and hasattr(cuda, "NvmlCudaPlatform"):
        nvml.answer_copy(binding)
        if _nvml_starts(binding):
            chosen = cuda.NvmlCudaPlatform
    platform = chosen()
    log.setattr(platforms, "_current_platform", platform)
    return platform


def _nvml_starts(nvml: Any) -> bool:
    """vLLM's test: NVML initializes (its error says it does not)."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return False
    nvml.nvmlShutdown()
    return True


def inspect_in_process(log: UndoLog) -> None:
    from vllm.model_executor.models import registry

    log.setattr(registry, "_run_in_subprocess", lambda fn: fn())


def accelerator_streams(log: UndoLog) -> None:
    """The generic ``torch.Stream`` and ``torch.Event`` classes (vLLM's
    attention layers make side streams and events with them) on the CUDA
    device, or on none, which means the current accelerator -- the GPU on a
    GPU machine -- answer with the emulated stream and event, as
    ``torch.cuda.Stream()`` and ``torch.cuda.Event()`` do on the emulated
    device. An emulated one is still an instance of the generic class."""
    import torch

    from graphbreak_doctor.emulation import cuda_runtime

    def generic(real: type, emulated: Any) -> type:
        class Meta(type(real)):  # type: ignore[misc]
            def __instancecheck__(cls, instance: Any) -> bool:
                return isinstance(instance, real)

            def __subclasscheck__(cls, subclass: type) -> bool:
                return issubclass(subclass, real)

        class Generic(real, metaclass=Meta):  # type: ignore[misc, valid-type]
            def __new__(cls, device: Any = None, *args: Any, **kwargs: Any) -> Any:
                if cls is not Generic:  # a subclass (the emulated ones): the real constructor
                    return real.__new__(cls, *((device,) if device is not None else ()), *args, **kwargs)
                if device is None or torch.device(device).type == "cuda":
                    return emulated()
                return real(device, *args, **kwargs)

        Generic.__qualname__ = Generic.__name__ = real.__name__
        Generic.__module__ = real.__module__
        return Generic

    log.setattr(torch, "Stream", generic(torch.Stream, cuda_runtime.cuda_stream))
    log.setattr(torch, "Event", generic(torch.Event, cuda_runtime.cuda_event))


def aot_compile_off(log: UndoLog) -> None:
    """vLLM's AOT compile (it saves the compiled artifact, and loads it on the
    next start) off: Dynamo traces the same forward, and nothing is cached."""
    log.setenv("VLLM_USE_AOT_COMPILE", "0")
    log.setenv("VLLM_DISABLE_COMPILE_CACHE", "1")


__all__ = ["CHANGES", "accelerator_streams", "aot_compile_off", "inspect_in_process", "install_platform",
           "isolate_caches", "scratch"]
