"""The CUDA driver's device queries, answered for the emulated GPU.

Kernel languages compile on this machine without a GPU (CuTe DSL), but a
compile may ask the driver about the device it targets: CuTe DSL asks for
the shared memory per multiprocessor when a kernel wants several blocks per
SM (``cutlass/base_dsl/runtime/cuda.py: get_device_attribute``, through
cuda-python's ``cuda.bindings.driver``). With no driver here,
cuda-python cannot even load it. While a device is emulated, the driver
module's device queries -- ``cuInit``, ``cuDriverGetVersion``,
``cuDeviceGetCount``, ``cuDeviceGet``, ``cuDeviceGetName`` and
``cuDeviceGetAttribute`` -- answer as the emulated node's driver would, with
cuda-python's own result types (``(CUresult, value)``); an attribute the
preset does not know answers ``CUDA_ERROR_NOT_SUPPORTED``, and the findings'
``device.emulated_entry_points`` name it. Everything else in the module stays
what it is (a launch or a module load fails as without a driver: kernels run
dry before they get there, dsl_dry.py).

``install`` patches the module when it is imported, now or later while the
log is open; it imports nothing.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

from graphbreak_doctor.emulation.dsl_dry import now_or_on_import
from graphbreak_doctor.emulation.preset import KIB, DevicePreset
from graphbreak_doctor.patching import UndoLog

_DRIVER = "cuda.bindings.driver"
# The driver release of a CUDA 12.9 toolkit's driver (cuDriverGetVersion).
_DRIVER_VERSION = 12090


def attributes(preset: DevicePreset) -> dict[str, int]:
    """``CU_DEVICE_ATTRIBUTE_<name>`` -> value, for the queries the preset answers."""
    return {
        "COMPUTE_CAPABILITY_MAJOR": preset.major,
        "COMPUTE_CAPABILITY_MINOR": preset.minor,
        "MULTIPROCESSOR_COUNT": preset.sms,
        "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": preset.smem_per_sm_kib * KIB,
        "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": preset.smem_optin_kib * KIB,
        "MAX_SHARED_MEMORY_PER_BLOCK": 48 * KIB,
        "MAX_THREADS_PER_MULTIPROCESSOR": preset.threads_per_sm,
        "MAX_THREADS_PER_BLOCK": 1024,
        "WARP_SIZE": 32,
        "MAX_REGISTERS_PER_BLOCK": 65536,
        "MAX_REGISTERS_PER_MULTIPROCESSOR": 65536,
        "L2_CACHE_SIZE": preset.l2_mib * 1024 * KIB,
        "CLUSTER_LAUNCH": int(preset.major >= 9),
        "INTEGRATED": 0,
        "CONCURRENT_KERNELS": 1,
    }


def install(log: UndoLog, preset: DevicePreset, gpus: int, note: Callable[[str], None]) -> None:
    """Answer the driver's device queries for ``gpus`` GPUs like ``preset``."""
    def patch(module: Any) -> None:
        _answer(log, module, preset, gpus, note)

    now_or_on_import(log, _DRIVER, patch)


def _answer(log: UndoLog, driver: Any, preset: DevicePreset, gpus: int, note: Callable[[str], None]) -> None:
    ok, unsupported, invalid = (driver.CUresult.CUDA_SUCCESS, driver.CUresult.CUDA_ERROR_NOT_SUPPORTED,
                                driver.CUresult.CUDA_ERROR_INVALID_DEVICE)
    known = {getattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"): value
             for name, value in attributes(preset).items()
             if hasattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")}

    def ordinal(device: Any) -> int:
        return int(device)

    def cuInit(flags: int = 0) -> tuple:
        note("cuda.bindings.driver.cuInit")
        return (ok,)

    def cuDriverGetVersion() -> tuple:
        return (ok, _DRIVER_VERSION)

    def cuDeviceGetCount() -> tuple:
        return (ok, gpus)

    def cuDeviceGet(index: int) -> tuple:
        note("cuda.bindings.driver.cuDeviceGet")
        if not 0 <= int(index) < gpus:
            return (invalid, driver.CUdevice(0))
        return (ok, driver.CUdevice(int(index)))

    def cuDeviceGetName(length: int, device: Any) -> tuple:
        if not 0 <= ordinal(device) < gpus:
            return (invalid, b"")
        return (ok, preset.device_name.encode()[: max(int(length) - 1, 0)])

    def cuDeviceGetAttribute(attribute: Any, device: Any) -> tuple:
        if not 0 <= ordinal(device) < gpus:
            return (invalid, 0)
        if attribute not in known:
            note(f"cuda.bindings.driver.cuDeviceGetAttribute({getattr(attribute, 'name', attribute)}): not answered")
            return (unsupported, 0)
        note("cuda.bindings.driver.cuDeviceGetAttribute")
        return (ok, known[attribute])

    for fn in (cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetAttribute):
        log.setattr(driver, fn.__name__, _native(fn))


def _native(fn: Callable[..., Any]) -> Any:
    """``fn`` as a native callable, as cuda-python's own functions are
    (compiled, not Python): Dynamo then meets an answered query where a
    traced kernel wrapper calls it exactly as it meets the driver's -- a
    call it cannot trace -- never a Python function of this package. A
    ctypes function of Python objects, holding the GIL; kept alive by the
    module attribute that holds it."""
    arity = fn.__code__.co_argcount
    native = ctypes.PYFUNCTYPE(ctypes.py_object, *[ctypes.py_object] * arity)(fn)
    _KEEP.append(native)
    return native


# The native callables made, for the life of the process (ctypes frees a
# callback's thunk when its object goes).
_KEEP: list[Any] = []
