"""sm100: B200, eight to an HGX board.

The figures are what the real card reports: `torch.cuda.get_device_properties`
prints name 'NVIDIA B200', 148 SMs, 126 MB of L2 and total_memory=182631MB
(MiB; 182642 with another driver); `nvidia-smi` lists 183359 MiB per GPU and
NV18 between every pair of the eight. No start-up free-memory figure of a
B200 is recorded here: its CUDA context is taken as the other presets'
(about 550 MiB).
"""

from graphbreak_doctor.emulation.preset import DevicePreset

PRESET = DevicePreset(
    name="sm100",
    emulated=True,
    gpu="B200",
    device_name="NVIDIA B200",
    major=10,
    minor=0,
    sms=148,
    smem_optin_kib=227,
    smem_per_sm_kib=228,
    threads_per_sm=2048,
    l2_mib=126,
    memory_gb=180,
    total_memory_mib=182631,
    smi_memory_mib=183359,
    context_mib=550,
    node_gpus=8,
    link="NV18",
    cuda="12.9",
    cubin_archs=("Sm100a", "Sm100f"),
)
