"""Looking up a ``--device`` among the registered presets (devices/)."""

from __future__ import annotations

from typing import Any, Optional

from graphbreak_doctor.emulation.devices import registry
from graphbreak_doctor.emulation.preset import DevicePreset
from graphbreak_doctor.model import DEFAULT_DEVICE


def presets() -> dict[str, DevicePreset]:
    """Every device by name (also the module's ``PRESETS``)."""
    return {p.name: p for p in registry()}


def __getattr__(name: str) -> Any:
    if name == "PRESETS":
        return presets()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# trtllm-gen cubin architectures of GPUs no preset here emulates (B300, and
# Rubin's); FlashInfer's kernel manifests list them beside the presets' own.
UNEMULATED_CUBIN_ARCHS = ("Sm103a", "Sm107a")


def resolve_device(name: Optional[str] = None) -> DevicePreset:
    """The preset for `--device NAME` (default sm120); ValueError if unknown."""
    if name is None:
        name = DEFAULT_DEVICE
    known = presets()
    try:
        return known[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown device {name!r}; choose one of: {', '.join(known)}"
        ) from None


def emulated_presets() -> tuple[DevicePreset, ...]:
    return tuple(p for p in registry() if p.emulated)


def emulated_names() -> str:
    """The emulated devices' names, for a message: 'sm120, sm100, ...'."""
    return ", ".join(p.name for p in emulated_presets())


def preset_for_capability(capability: tuple[int, int]) -> Optional[DevicePreset]:
    """The emulated preset of a real GPU's architecture, if there is one."""
    return next((p for p in emulated_presets() if p.capability == tuple(capability)), None)


def toolkit_archs(preset: DevicePreset) -> tuple[int, ...]:
    """What the emulated `nvcc --list-gpu-arch` lists for `preset`: its
    toolkit's architectures and every registered GPU's, so a new device preset
    is listed too."""
    archs = set(preset.nvcc_archs) | {p.major * 10 + p.minor for p in emulated_presets()}
    return tuple(sorted(archs))


def cubin_archs() -> tuple[str, ...]:
    """The trtllm-gen cubin architectures of every registered GPU, then of
    those without a preset, each once."""
    return tuple(dict.fromkeys([a for p in emulated_presets() for a in p.cubin_archs]
                               + list(UNEMULATED_CUBIN_ARCHS)))
