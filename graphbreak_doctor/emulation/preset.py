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

# The CUDA release the emulated toolkit reports for a preset that names none.
DEFAULT_CUDA = "12.9"

# What `nvcc --list-gpu-arch` of each CUDA release lists (the emulated
# toolkit's nvcc lists these and every registered GPU's architecture).
NVCC_ARCHS: dict[str, tuple[int, ...]] = {
    "12.9": (75, 80, 86, 87, 89, 90, 100, 101, 103, 120, 121),
}


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
    threads_per_sm: int = 0  # torch.cuda.get_device_properties().max_threads_per_multi_processor
    l2_mib: int = 0
    memory_gb: int = 0  # the product's memory as sold (80 GB, 141 GB, ...)
    # What the real card reports, in MiB: torch's total_memory (the driver
    # keeps a few hundred MiB of what nvidia-smi lists), nvidia-smi's
    # memory.total, and what a process has in use before it allocates
    # anything (the CUDA context: total less mem_get_info's free at start-up).
    total_memory_mib: int = 0
    smi_memory_mib: int = 0
    context_mib: int = 0
    # The GPUs of the server this GPU is sold in (an HGX board, a PCIe
    # server): what torch.cuda.device_count() answers on the emulated node.
    node_gpus: int = 1
    # How two GPUs of that server reach each other: "NV18" (eighteen NVLinks,
    # every pair of an HGX board) or "PCIe" (no NVLink; peer-to-peer over
    # the PCIe switches).
    link: str = "PCIe"
    cuda: Optional[str] = None  # torch.version.cuda and `nvcc --version`
    # The architectures of FlashInfer's prebuilt trtllm-gen kernels (cubins)
    # that run on this GPU, as FlashInfer names them in its kernel manifests.
    cubin_archs: tuple[str, ...] = ()

    @property
    def total_memory(self) -> int:
        """Bytes, as torch.cuda.get_device_properties().total_memory."""
        return (self.total_memory_mib or self.memory_gb * 1024) * 1024 * 1024

    @property
    def nvlink(self) -> bool:
        return self.link.startswith("NV")

    @property
    def capability(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def toolkit_cuda(self) -> str:
        """The CUDA release of the emulated toolkit (`nvcc --version`)."""
        return self.cuda or DEFAULT_CUDA

    @property
    def nvcc_archs(self) -> tuple[int, ...]:
        """What `nvcc --list-gpu-arch` of this GPU's toolkit lists."""
        return NVCC_ARCHS.get(self.toolkit_cuda, NVCC_ARCHS[DEFAULT_CUDA])

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
            "total_memory_mib": self.total_memory_mib,
            "node_gpus": self.node_gpus,
            "link": self.link,
            "cuda": self.cuda,
        }
