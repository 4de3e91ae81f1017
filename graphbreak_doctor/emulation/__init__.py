"""Make a CPU-only machine look like a chosen NVIDIA GPU to PyTorch and FlashInfer.

    with EmulatedDevice("sm120") as dev:
        x = torch.empty(128, 256, dtype=torch.bfloat16, device="cuda")  # FakeTensor
        flashinfer.fp4_quantize(x, scale)  # JIT requests recorded, kernel a no-op
    dev.describe(); dev.jit_requests

The emulation's own frames must never show up in a finding. Dynamo would
compile any Python frame that runs while a compiled function executes -- the
tvm-ffi loader and the audit hook of this package run inside FlashInfer's
calls -- so this directory is put on Dynamo's skip list once, at import
(`torch/_dynamo/trace_rules.py: add`). Nothing here is ever called directly
from traced code except the `torch.cuda` replacements, which Dynamo finds in
its own tables first (see torch_surface.py).
"""

from torch._dynamo import trace_rules as _trace_rules

_trace_rules.add(__name__)

from .device import EmulatedDevice  # noqa: E402
from .flashinfer_dry import JitRequest  # noqa: E402
from .presets import DEFAULT_DEVICE, PRESETS, DevicePreset, resolve_device  # noqa: E402

__all__ = [
    "DEFAULT_DEVICE",
    "PRESETS",
    "DevicePreset",
    "EmulatedDevice",
    "JitRequest",
    "resolve_device",
]
