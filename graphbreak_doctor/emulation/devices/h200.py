"""h200: H200 SXM 141GB, eight to an HGX board. The same GH100 chip as the
H100 (capability 9.0, 132 SMs, the same shared memory) with more memory and
L2 -- and a serving framework sizes its defaults (running requests, CUDA-graph
batch sizes) from the memory, so the H200 is a device of its own.

The figures are what the real card reports: `torch.cuda.get_device_properties`
prints name 'NVIDIA H200', 132 SMs, 60 MB of L2 and total_memory=143156MB
(MiB); `nvidia-smi` lists 143771 MiB per GPU and NV18 between every pair of
the eight; a serving framework's start-up snapshot on one of them sees
139.21 of 139.81 GiB free (about 614 MiB held by the CUDA context).
"""

import dataclasses

from graphbreak_doctor.emulation.devices import h100

# The H100's chip (capability, SMs, shared memory, threads), with the
# H200's name, memory and L2.
PRESET = dataclasses.replace(
    h100.PRESET,
    name="h200",
    gpu="H200",
    device_name="NVIDIA H200",
    l2_mib=60,
    memory_gb=141,
    total_memory_mib=143156,
    smi_memory_mib=143771,
    context_mib=614,
)
