"""The CUDA runtime's device-memory and IPC calls, for a framework's own
ctypes wrapper of libcudart, where no GPU answers them.

A custom all-reduce shares buffers between the GPUs of a node: each rank
allocates one (``cudaMalloc``), exports it (``cudaIpcGetMemHandle``), gathers
its peers' handles and opens them (``cudaIpcOpenMemHandle``). Frameworks
make these calls through a wrapper class that loads the library once per
path and keeps it, with a table of its C functions by name, in two caches
(``path_to_library_cache``, ``path_to_dict_mapping``). The stand-in fills
both caches for a path, so the framework's own wrapper runs unchanged over
it: an allocation answers a distinct made-up device address (never
dereferenced: kernels run dry), a handle holds the address it exports, an
opened handle answers a new address (the peer's buffer as this rank maps
it), and set-device, synchronize, memset, memcpy and free return at once.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

from graphbreak_doctor.emulation.standins.nccl import EmulatedLibrary, write_through
from graphbreak_doctor.patching import UndoLog

# What the emulated library stands in for (where no real one is mapped).
EMULATED_PATH = "libcudart.so.12 (emulated)"
_SUCCESS = 0
_addresses = itertools.count(0x7F0000000000, 0x10000000)


def _address(pointer: Any) -> int:
    return int(getattr(pointer, "value", pointer) or 0)


def functions() -> dict[str, Callable[..., Any]]:
    def cudaMalloc(pointer: Any, size: int) -> int:
        write_through(pointer, next(_addresses))
        return _SUCCESS

    def cudaIpcGetMemHandle(handle: Any, pointer: Any) -> int:
        target = getattr(handle, "_obj", handle)
        raw = _address(pointer).to_bytes(8, "little")
        for i, byte in enumerate(raw):
            target.internal[i] = byte
        return _SUCCESS

    def cudaIpcOpenMemHandle(pointer: Any, handle: Any, flags: int = 0) -> int:
        write_through(pointer, next(_addresses))
        return _SUCCESS

    def cudaGetErrorString(error: int) -> bytes:
        return b"the emulated CUDA runtime reports no error"

    return {"cudaMalloc": cudaMalloc, "cudaIpcGetMemHandle": cudaIpcGetMemHandle,
            "cudaIpcOpenMemHandle": cudaIpcOpenMemHandle, "cudaGetErrorString": cudaGetErrorString}


def install(log: UndoLog, wrapper_cls: Any, so_file: str) -> None:
    """Put the emulated runtime in ``wrapper_cls``'s caches for ``so_file`` (undone with ``log``)."""
    names = [f.name for f in getattr(wrapper_cls, "exported_functions", ())]
    library = EmulatedLibrary(names, functions())
    log.setitem(wrapper_cls.path_to_library_cache, so_file, library)
    log.setitem(wrapper_cls.path_to_dict_mapping, so_file, dict(library.functions))


__all__ = ["EMULATED_PATH", "functions", "install"]
