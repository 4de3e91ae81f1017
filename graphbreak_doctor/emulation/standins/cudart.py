"""A CUDA runtime library mapped into the process: FlashInfer 0.6's
``comm/cuda_ipc.py`` asserts at import that one is; dlopen needs no GPU and
nothing is called. The library mapped is one a wheel bundles (torchvision's,
or an ``nvidia-*`` package's)."""

from __future__ import annotations

import ctypes
import glob
import importlib
import importlib.util
import os
import site
import sys

from graphbreak_doctor.emulation.standins.binaries import StandIns
from graphbreak_doctor.patching import UndoLog


def map_cuda_runtime(log: UndoLog, out: StandIns) -> None:
    """Map a CUDA runtime library when FlashInfer's comm module refuses to
    import without one (FlashInfer 0.6)."""
    if importlib.util.find_spec("flashinfer") is None or "flashinfer.comm" in sys.modules:
        return
    try:
        importlib.import_module("flashinfer.comm")
        return
    except AssertionError as e:
        if "libcudart" not in str(e):
            raise
        why = str(e).splitlines()[0]
    candidates = []
    for root in site.getsitepackages():
        candidates += sorted(glob.glob(os.path.join(root, "*.libs", "libcudart*.so*")))
        candidates += sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "libcudart.so*")))
    if not candidates:
        raise RuntimeError(f"flashinfer.comm needs a CUDA runtime library mapped ({why}) and none is installed")
    handle = ctypes.CDLL(candidates[0], mode=ctypes.RTLD_LOCAL)
    log.call_on_undo(lambda: _dlclose(handle))
    importlib.import_module("flashinfer.comm")
    out.lines.append(f"{os.path.basename(candidates[0])} mapped, never called (flashinfer.comm asserts a CUDA "
                     f"runtime is loaded: {why})")


def _dlclose(handle: ctypes.CDLL) -> None:
    import _ctypes

    _ctypes.dlclose(handle._handle)
