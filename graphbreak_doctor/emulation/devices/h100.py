"""sm90: H100 SXM5 80GB, eight to an HGX board.

The figures are what the real card reports: `torch.cuda.get_device_properties`
on HGX H100 nodes prints name 'NVIDIA H100 80GB HBM3', 132 SMs, 50 MB of L2
and total_memory=81089MB (MiB; torch 2.7, CUDA 12.8 -- a few MiB more or less
with other drivers); `nvidia-smi` lists 81559 MiB per GPU (454 MiB reserved
by the driver) and NV18 between every pair of the eight; a serving
framework's start-up snapshot sees 78.66 of 79.19 GiB free (about 543 MiB
held by the CUDA context).
"""

from graphbreak_doctor.emulation.preset import DevicePreset

PRESET = DevicePreset(
    name="sm90",
    emulated=True,
    gpu="H100",
    device_name="NVIDIA H100 80GB HBM3",
    major=9,
    minor=0,
    sms=132,
    smem_optin_kib=227,
    smem_per_sm_kib=228,
    threads_per_sm=2048,
    l2_mib=50,
    memory_gb=80,
    total_memory_mib=81089,
    smi_memory_mib=81559,
    context_mib=543,
    node_gpus=8,
    link="NV18",
    cuda="12.9",
)
