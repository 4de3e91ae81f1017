"""sm100: B200."""

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
    cuda="12.9",
    cubin_archs=("Sm100a", "Sm100f"),
)
