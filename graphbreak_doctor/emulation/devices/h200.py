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

from graphbreak_doctor.emulation.preset import DevicePreset

PRESET = DevicePreset(
    name="h200",
    emulated=True,
    gpu="H200",
    device_name="NVIDIA H200",
    major=9,
    minor=0,
    sms=132,
    smem_optin_kib=227,
    smem_per_sm_kib=228,
    threads_per_sm=2048,
    l2_mib=60,
    memory_gb=141,
    total_memory_mib=143156,
    smi_memory_mib=143771,
    context_mib=614,
    node_gpus=8,
    link="NV18",
    cuda="12.9",
)
