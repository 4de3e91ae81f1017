"""Make a CPU-only machine look like a chosen NVIDIA GPU to PyTorch and FlashInfer.

    with EmulatedDevice("sm120") as dev:
        x = torch.empty(128, 256, dtype=torch.bfloat16, device="cuda")  # FakeTensor
        flashinfer.fp4_quantize(x, scale)  # JIT requests recorded, kernel a no-op
    dev.describe(); dev.jit_requests

The emulation's own frames must never show up in a finding. Dynamo would
compile any Python frame that runs while a compiled function executes -- the
tvm-ffi loader and the audit hook of this package run inside FlashInfer's
calls -- so while an emulation is active this directory is on Dynamo's skip
list (`torch/_dynamo/trace_rules.py: add`, through the emulation's undo log).
Nothing here is ever called directly from traced code except the
`torch.cuda` replacements, which Dynamo finds in its own tables first (see
torch_surface.py).
"""

from graphbreak_doctor.emulation.preset import DevicePreset
from graphbreak_doctor.emulation.presets import DEFAULT_DEVICE, resolve_device


def __getattr__(name: str):
    # The emulation itself imports torch and FlashInfer; the device presets do
    # not, so the command line can offer --device without importing torch.
    if name == "EmulatedDevice":
        from graphbreak_doctor.emulation.device import EmulatedDevice

        return EmulatedDevice
    if name == "PRESETS":  # read on first use: a device plugin imports this package
        from graphbreak_doctor.emulation.presets import presets

        return presets()
    if name == "JitRecord":
        from graphbreak_doctor.emulation.flashinfer.recorder import JitRecord

        return JitRecord
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "DEFAULT_DEVICE",
    "PRESETS",
    "DevicePreset",
    "EmulatedDevice",
    "JitRecord",
    "resolve_device",
]
