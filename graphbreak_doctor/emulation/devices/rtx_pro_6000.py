"""sm120: RTX PRO 6000 Blackwell Server Edition, the default device; eight to
a PCIe server, with no NVLink (GPUs reach each other over PCIe peer-to-peer).

The figures are what the real card reports: `torch.cuda.get_device_properties`
prints name 'NVIDIA RTX PRO 6000 Blackwell Server Edition', 188 SMs, 128 MB of
L2 and total_memory=97250MB (MiB; torch 2.7.1, CUDA 12.8); `nvidia-smi` lists
97887 MiB per GPU; a serving framework's start-up snapshot sees 94.41 of
94.97 GiB free (about 573 MiB held by the CUDA context).
"""

from graphbreak_doctor.emulation.preset import DevicePreset

PRESET = DevicePreset(
    name="sm120",
    emulated=True,
    gpu="RTX PRO 6000 Blackwell",
    device_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
    major=12,
    minor=0,
    sms=188,
    smem_optin_kib=99,
    smem_per_sm_kib=100,
    threads_per_sm=1536,
    l2_mib=128,
    memory_gb=96,
    total_memory_mib=97250,
    smi_memory_mib=97887,
    context_mib=573,
    node_gpus=8,
    link="PCIe",
    cuda="12.9",
)
