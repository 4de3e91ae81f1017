"""Looking up a ``--device`` among the registered presets (devices/)."""

from __future__ import annotations

from typing import Optional

from graphbreak_doctor.emulation.devices import REGISTRY
from graphbreak_doctor.emulation.preset import DevicePreset

PRESETS: dict[str, DevicePreset] = {p.name: p for p in REGISTRY}

DEFAULT_DEVICE = "sm120"


def resolve_device(name: Optional[str] = None) -> DevicePreset:
    """The preset for `--device NAME` (default sm120); ValueError if unknown."""
    if name is None:
        name = DEFAULT_DEVICE
    try:
        return PRESETS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown device {name!r}; choose one of: {', '.join(PRESETS)}"
        ) from None


def emulated_presets() -> tuple[DevicePreset, ...]:
    return tuple(p for p in REGISTRY if p.emulated)


def preset_for_capability(capability: tuple[int, int]) -> Optional[DevicePreset]:
    """The emulated preset of a real GPU's architecture, if there is one."""
    return next((p for p in emulated_presets() if p.capability == tuple(capability)), None)
