"""The selectable devices: one module per emulated GPU, registered here.

A new GPU is a module defining ``PRESET = DevicePreset(...)`` plus one line in
``_EMULATED``, or an installed package's entry point in
``graphbreak_doctor.devices`` (graphbreak_doctor/plugins.py); ``--device``
offers it, and FlashInfer's emulated toolkit lists its architecture.
"""

import functools

from graphbreak_doctor import plugins
from graphbreak_doctor.emulation.devices import b200, h100, h200, rtx_pro_6000, unemulated
from graphbreak_doctor.emulation.preset import DevicePreset

_EMULATED = (
    rtx_pro_6000.PRESET,
    b200.PRESET,
    h100.PRESET,
    h200.PRESET,
)
_UNEMULATED = (
    unemulated.CUDA,
    unemulated.CPU,
)


@functools.cache
def registry() -> tuple[DevicePreset, ...]:
    """Every device: the built-in GPUs, the plugins' (read on first use, once
    every module has been imported), then a real GPU and the CPU."""
    taken = {p.name for p in (*_EMULATED, *_UNEMULATED)}
    return _EMULATED + plugins.load("devices", DevicePreset, taken) + _UNEMULATED
