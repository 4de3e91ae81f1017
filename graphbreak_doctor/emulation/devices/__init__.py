"""The selectable devices: one module per emulated GPU, registered here.

A new GPU is a module defining ``PRESET = DevicePreset(...)`` plus one line in
``REGISTRY``; ``--device`` offers it, and FlashInfer's emulated toolkit lists
its architecture.
"""

from graphbreak_doctor.emulation.devices import b200, h100, rtx_pro_6000, unemulated

REGISTRY = (
    rtx_pro_6000.PRESET,
    b200.PRESET,
    h100.PRESET,
    unemulated.CUDA,
    unemulated.CPU,
)
