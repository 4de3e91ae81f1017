"""sm90: H100 SXM; an H200 has the same SM count and shared memory, 141 GB."""

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
    cuda="12.9",
)
