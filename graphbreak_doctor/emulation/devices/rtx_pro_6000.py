"""sm120: RTX PRO 6000 Blackwell (Server Edition), the default device."""

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
    cuda="12.9",
)
