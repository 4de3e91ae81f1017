"""The GPUs the doctor can pretend to be, as plain data.

Numbers are what `torch.cuda.get_device_properties` reports on the real card
(NVIDIA data sheets / CUDA occupancy tables): shared memory is the opt-in
maximum per block (`cudaDevAttrMaxSharedMemoryPerBlockOptin`), which is what
kernels with large tiles check before they launch.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

KIB = 1024
GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class DevicePreset:
    """One selectable `--device`: an emulated GPU, or a mode without emulation."""

    name: str
    emulated: bool
    gpu: str = ""
    device_name: str = ""  # what torch.cuda.get_device_name() returns
    major: int = 0
    minor: int = 0
    sms: int = 0
    smem_optin_kib: int = 0
    smem_per_sm_kib: int = 0
    l2_mib: int = 0
    memory_gb: int = 0
    cuda: Optional[str] = None  # torch.version.cuda and `nvcc --version`

    @property
    def capability(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def arch_list(self) -> str:
        """FLASHINFER_CUDA_ARCH_LIST as a user of this GPU would set it.

        Given without a suffix on purpose: FlashInfer's own
        `CompilationContext._normalize_cuda_arch` (flashinfer/compilation_context.py)
        then picks "12.0f" / "12.0a" / "10.0a" from the CUDA version, as on the
        real machine.
        """
        return f"{self.major}.{self.minor}"

    def describe(self) -> dict:
        if not self.emulated:
            return {"name": self.name, "emulated": False}
        return {
            "name": self.name,
            "emulated": True,
            "gpu": self.gpu,
            "device_name": self.device_name,
            "capability": f"{self.major}.{self.minor}",
            "sms": self.sms,
            "smem_optin_kib": self.smem_optin_kib,
            "memory_gb": self.memory_gb,
            "cuda": self.cuda,
        }


PRESETS: dict[str, DevicePreset] = {
    "sm120": DevicePreset(
        name="sm120",
        emulated=True,
        gpu="RTX PRO 6000 Blackwell",
        device_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
        major=12,
        minor=0,
        sms=188,
        smem_optin_kib=99,
        smem_per_sm_kib=100,
        l2_mib=128,
        memory_gb=96,
        cuda="12.9",
    ),
    "sm100": DevicePreset(
        name="sm100",
        emulated=True,
        gpu="B200",
        device_name="NVIDIA B200",
        major=10,
        minor=0,
        sms=148,
        smem_optin_kib=227,
        smem_per_sm_kib=228,
        l2_mib=126,
        memory_gb=180,
        cuda="12.9",
    ),
    "sm90": DevicePreset(
        # H100 SXM; an H200 has the same SM count and shared memory, 141 GB.
        name="sm90",
        emulated=True,
        gpu="H100",
        device_name="NVIDIA H100 80GB HBM3",
        major=9,
        minor=0,
        sms=132,
        smem_optin_kib=227,
        smem_per_sm_kib=228,
        l2_mib=50,
        memory_gb=80,
        cuda="12.9",
    ),
    # No emulation: a real GPU, with real tensors and FlashInfer's real JIT.
    "cuda": DevicePreset(name="cuda", emulated=False),
    # No emulation: targets that run on plain CPU tensors.
    "cpu": DevicePreset(name="cpu", emulated=False),
}

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
