"""The record a selectable ``--device`` is: an emulated GPU, or a mode without emulation.

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
