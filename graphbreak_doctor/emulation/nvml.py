"""NVML's answers (the management library behind ``nvidia-smi``), for the
emulated node.

Serving frameworks and FlashInfer ask NVML -- through its Python binding,
``pynvml`` -- what a server's GPUs are and how they reach each other before
they choose a communicator: a custom all-reduce runs only where every pair of
the group's GPUs is joined by NVLink, and FlashInfer's communication
workspaces ask whether confidential computing is on. With no driver here the
binding cannot load its library and every such check fails, so a launch
would pick the communicators of a machine without NVML, not those of the
server it emulates.

While a device is emulated, the binding's device queries answer as the
emulated node's NVML would: ``node_gpus`` GPUs of the preset's name,
capability and memory, peer-to-peer between every pair, NVLink between every
pair only where the preset's link is NVLink (an HGX board; a PCIe server has
none), no confidential computing, no running processes. Every other
``nvml*`` function raises the binding's own "not supported" error (what a
driver says of a feature it lacks) and is named in the findings'
``device.emulated_entry_points``. The binding's handles are plain objects
here (``EmulatedHandle``); only these functions read them.

``install`` patches the binding when it is imported, now or later while the
log is open; it imports nothing. A framework that ships its own copy of the
binding (vLLM's ``vllm.third_party.pynvml``) has it answered the same way
with ``answer_copy`` while a device is emulated.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

from graphbreak_doctor.emulation.dsl_dry import now_or_on_import
from graphbreak_doctor.emulation.preset import DevicePreset
from graphbreak_doctor.patching import UndoLog

_BINDING = "pynvml"
# The driver of a CUDA 12.9 toolkit (what nvmlSystemGetDriverVersion reports).
DRIVER_VERSION = "575.57.08"


@dataclass(frozen=True)
class EmulatedHandle:
    """One GPU of the emulated node, as NVML's device handle."""

    index: int

    @property
    def uuid(self) -> str:
        return f"GPU-00000000-0000-0000-0000-{self.index:012x}"


def links(preset: DevicePreset) -> int:
    """NVLinks per GPU the preset's link names ("NV18": 18); 0 for PCIe."""
    digits = preset.link[2:] if preset.nvlink else ""
    return int(digits) if digits.isdigit() else 0


def install(log: UndoLog, preset: DevicePreset, gpus: int, note: Callable[[str], None]) -> None:
    """Answer NVML's device queries for ``gpus`` GPUs like ``preset``."""
    def patch(module: Any) -> None:
        answer(log, module, preset, gpus, note)

    now_or_on_import(log, _BINDING, patch)
    log.setattr(sys.modules[__name__], "_copies", patch)


# While a device is emulated: what answers a copy of the binding (install's patch).
_copies: Callable[[Any], None] | None = None


def answer_copy(module: Any) -> bool:
    """Answer a framework's own copy of the binding as the emulated device
    answers ``pynvml`` (undone with the device); whether a device is emulated."""
    if _copies is None:
        return False
    _copies(module)
    return True


def answer(log: UndoLog, nvml: Any, preset: DevicePreset, gpus: int, note: Callable[[str], None]) -> None:
    """Patch one copy of the binding (``nvml``: pynvml, or a framework's own copy of it)."""
    if not hasattr(nvml, "NVMLError") or not hasattr(nvml, "nvmlInit"):
        return
    error = nvml.NVMLError

    def handle(index: Any) -> EmulatedHandle:
        if not isinstance(index, int) or not 0 <= index < gpus:
            raise error(nvml.NVML_ERROR_INVALID_ARGUMENT)
        return EmulatedHandle(index)

    def device(h: Any) -> EmulatedHandle:
        if not isinstance(h, EmulatedHandle):
            raise error(nvml.NVML_ERROR_INVALID_ARGUMENT)
        return h

    def nvmlInit(*args: Any) -> None:
        note("pynvml.nvmlInit")

    def nvmlShutdown() -> None:
        return None

    def nvmlSystemGetDriverVersion() -> str:
        return DRIVER_VERSION

    def nvmlDeviceGetCount() -> int:
        return gpus

    def nvmlDeviceGetHandleByIndex(index: int) -> EmulatedHandle:
        note("pynvml.nvmlDeviceGetHandleByIndex")
        return handle(index)

    def nvmlDeviceGetHandleByUUID(uuid: Any) -> EmulatedHandle:
        text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        for index in range(gpus):
            if EmulatedHandle(index).uuid == text:
                return EmulatedHandle(index)
        raise error(nvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetIndex(h: Any) -> int:
        return device(h).index

    def nvmlDeviceGetUUID(h: Any) -> str:
        return device(h).uuid

    def nvmlDeviceGetName(h: Any) -> str:
        device(h)
        return preset.device_name

    def nvmlDeviceGetCudaComputeCapability(h: Any) -> tuple[int, int]:
        device(h)
        return (preset.major, preset.minor)

    def nvmlDeviceGetMemoryInfo(h: Any, version: Any = None) -> Any:
        device(h)
        total = (preset.smi_memory_mib or preset.memory_gb * 1024) * 1024 * 1024
        used = preset.context_mib * 1024 * 1024
        return nvml.c_nvmlMemory_t(total, total - used, used)

    def nvmlDeviceGetP2PStatus(h1: Any, h2: Any, index: int) -> int:
        note("pynvml.nvmlDeviceGetP2PStatus")
        device(h1), device(h2)
        if index == nvml.NVML_P2P_CAPS_INDEX_NVLINK and not preset.nvlink:
            return nvml.NVML_P2P_STATUS_NOT_SUPPORTED
        return nvml.NVML_P2P_STATUS_OK

    def nvmlDeviceGetNvLinkState(h: Any, link: int) -> int:
        device(h)
        if not 0 <= link < links(preset):
            raise error(nvml.NVML_ERROR_NOT_SUPPORTED)
        return nvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkCapability(h: Any, link: int, capability: int) -> int:
        nvmlDeviceGetNvLinkState(h, link)
        return 1

    def nvmlDeviceGetComputeRunningProcesses(h: Any) -> list:
        device(h)
        return []

    def nvmlSystemGetConfComputeState() -> Any:
        return nvml.c_nvmlConfComputeSystemState_t(nvml.NVML_CC_SYSTEM_ENVIRONMENT_UNAVAILABLE,
                                                   nvml.NVML_CC_SYSTEM_FEATURE_DISABLED,
                                                   nvml.NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF)

    answered = {fn.__name__: fn for fn in (
        nvmlInit, nvmlShutdown, nvmlSystemGetDriverVersion, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex,
        nvmlDeviceGetHandleByUUID, nvmlDeviceGetIndex, nvmlDeviceGetUUID, nvmlDeviceGetName,
        nvmlDeviceGetCudaComputeCapability, nvmlDeviceGetMemoryInfo, nvmlDeviceGetP2PStatus,
        nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkCapability, nvmlDeviceGetComputeRunningProcesses,
        nvmlSystemGetConfComputeState)}
    answered["nvmlInitWithFlags"] = nvmlInit
    for name, value in list(vars(nvml).items()):
        if not name.startswith("nvml") or not callable(value) or isinstance(value, type):
            continue
        log.setattr(nvml, name, answered.get(name) or _unsupported(nvml, name, note))


def _unsupported(nvml: Any, name: str, note: Callable[[str], None]) -> Callable[..., Any]:
    def unanswered(*args: Any, **kwargs: Any) -> Any:
        note(f"pynvml.{name}: not answered")
        raise nvml.NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)

    unanswered.__name__ = name
    return unanswered


__all__ = ["DRIVER_VERSION", "EmulatedHandle", "answer", "answer_copy", "install", "links"]
