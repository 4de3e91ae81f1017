"""NVML's answers on the emulated node (emulation/nvml.py): the GPUs, their
name, capability and memory as the preset says, peer-to-peer between every
pair, NVLink only where the preset's server has it; what is not answered
says "not supported" and is named among the emulated entry points; and
leaving the emulation puts the binding back."""

from __future__ import annotations

import pytest

from graphbreak_doctor.emulation.device import EmulatedDevice
from graphbreak_doctor.emulation.presets import resolve_device

pynvml = pytest.importorskip("pynvml")


@pytest.mark.parametrize("device, nvlink", [("sm100", True), ("sm90", True), ("sm120", False)])
def test_the_node_answers_as_the_presets_server(device, nvlink):
    preset = resolve_device(device)
    real = pynvml.nvmlInit
    with EmulatedDevice(device) as emulated:
        pynvml.nvmlInit()
        assert pynvml.nvmlDeviceGetCount() == preset.node_gpus
        first, last = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, preset.node_gpus - 1))
        assert pynvml.nvmlDeviceGetName(first) == preset.device_name
        assert pynvml.nvmlDeviceGetCudaComputeCapability(last) == (preset.major, preset.minor)
        assert pynvml.nvmlDeviceGetMemoryInfo(first).total == preset.smi_memory_mib * 1024 * 1024
        assert pynvml.nvmlDeviceGetHandleByUUID(pynvml.nvmlDeviceGetUUID(last)) == last
        status = pynvml.nvmlDeviceGetP2PStatus(first, last, pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
        assert (status == pynvml.NVML_P2P_STATUS_OK) is nvlink
        assert pynvml.nvmlDeviceGetP2PStatus(first, last, pynvml.NVML_P2P_CAPS_INDEX_READ) == pynvml.NVML_P2P_STATUS_OK
        with pytest.raises(pynvml.NVMLError):
            pynvml.nvmlDeviceGetHandleByIndex(preset.node_gpus)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetPowerUsage(first)
        state = pynvml.nvmlSystemGetConfComputeState()
        assert state.ccFeature == pynvml.NVML_CC_SYSTEM_FEATURE_DISABLED
        entry_points = emulated.describe()["emulated_entry_points"]
    assert "pynvml.nvmlDeviceGetP2PStatus" in entry_points
    assert "pynvml.nvmlDeviceGetPowerUsage: not answered" in entry_points
    assert pynvml.nvmlInit is real
