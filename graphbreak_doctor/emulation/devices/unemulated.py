"""Devices that emulate nothing: a real GPU (real tensors, FlashInfer's real
JIT) and plain CPU tensors."""

from graphbreak_doctor.emulation.preset import DevicePreset

CUDA = DevicePreset(name="cuda", emulated=False)
CPU = DevicePreset(name="cpu", emulated=False)
