"""The current CUDA stream as torch's DLPack exchange API reports it, on a
CUDA build of torch with no GPU.

FlashInfer's JIT modules are called through TVM FFI, which turns each torch
tensor argument into a DLPack tensor through the table torch exposes as
``torch.Tensor.__dlpack_c_exchange_api__`` (a capsule named
"dlpack_exchange_api"), and asks that table's ``current_work_stream`` for
the stream of the first CUDA argument. A CPU build answers without a stream.
A CUDA build asks the CUDA device guard, and with no GPU present that guard
is torch's fake one (fake tensors install it), which cannot name a stream:
the call fails with "Backend doesn't support getting stream native handle".

While a device is emulated on a CUDA build, ``torch.Tensor`` carries a copy
of torch's table whose ``current_work_stream`` answers the default stream
(a null handle), as the emulated ``torch.cuda.current_stream()`` does
(cuda_runtime.py); every other entry is torch's own. TVM FFI reads the
attribute on the argument's class the first time it meets that class, and
keeps the table's address: the copy lives as long as the process. The
table (DLPack 1.x, dlpack.h): a header (version: two 32-bit integers, then
the previous table's pointer), then five function pointers, the stream
query last.
"""

from __future__ import annotations

import ctypes

import torch

from graphbreak_doctor.patching import UndoLog

_NAME = b"dlpack_exchange_api"
_ATTRIBUTE = "__dlpack_c_exchange_api__"


class _Header(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("prev_api", ctypes.c_void_p)]


# int (*)(DLDeviceType device_type, int32_t device_id, void** out_current_stream)
_STREAM_QUERY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))


class _Table(ctypes.Structure):
    _fields_ = [("header", _Header), ("managed_tensor_allocator", ctypes.c_void_p),
                ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
                ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
                ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
                ("current_work_stream", _STREAM_QUERY)]


@_STREAM_QUERY
def _default_stream(_device_type: int, _device_id: int, out: ctypes.POINTER(ctypes.c_void_p)) -> int:
    out[0] = None
    return 0


def install(log: UndoLog) -> None:
    """On a CUDA build whose torch exposes the table: the copy described
    above on ``torch.Tensor``, put back on undo."""
    capsule = getattr(torch.Tensor, _ATTRIBUTE, None)
    if not torch.backends.cuda.is_built() or capsule is None:
        return
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.argtypes, get_pointer.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_void_p
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.argtypes, new_capsule.restype = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p], ctypes.py_object
    if not _TABLES:
        torch_table = _Table.from_address(get_pointer(capsule, _NAME))
        if torch_table.header.major != 1:
            return  # a table of another layout: left as torch made it
        table = _Table()
        ctypes.pointer(table)[0] = torch_table
        table.current_work_stream = _default_stream
        _TABLES.append((table, new_capsule(ctypes.addressof(table), _NAME, None)))
    log.setattr(torch.Tensor, _ATTRIBUTE, _TABLES[0][1])


# The copy, made once and kept for the life of the process: TVM FFI keeps the
# table's address for each tensor class it has met, past the emulation's end
# (a second device emulated in the same process, --in-process).
_TABLES: list[tuple[_Table, object]] = []
