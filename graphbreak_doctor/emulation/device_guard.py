"""A CUDA device guard for a CPU-only build of torch, for fake CUDA tensors.

A CPU build registers no DeviceGuardImpl for CUDA, so every op whose C++
binding opens a device guard (``Tensor.contiguous``, indexing, ``mm`` on
views: torch/csrc/autograd/generated/python_variable_methods.cpp) fails on a
fake CUDA tensor with "PyTorch is not linked with support for cuda devices"
before the fake mode sees it. ``c10::impl::ensureCUDADeviceGuardSet`` only
replaces a guard that exists, so it does not help.

libc10 carries ``c10::impl::FakeGuardImpl<CUDA>`` (the no-op guard torch
itself uses for fake tensors on machines without GPUs); its vtable is in the
library's symbol table. An object of that class is nothing but its vtable
pointer (the guard's state is static), so we build one in a ctypes buffer and
hand it to the exported ``c10::impl::registerDeviceGuard``. No compiler and no
extension build are needed. On exit the slot is emptied again.
"""

from __future__ import annotations

import ctypes
import functools
import os
import struct

import torch

from graphbreak_doctor.patching import UndoLog

_REGISTER = "_ZN3c104impl19registerDeviceGuardENS_10DeviceTypeEPKNS0_24DeviceGuardImplInterfaceE"
_FAKE_CUDA_VTABLE = "_ZTVN3c104impl13FakeGuardImplILNS_10DeviceTypeE1EEE"
_CUDA = 1  # c10::DeviceType::CUDA
_SHT_SYMTAB = 2


def _elf_symbols(path: str, wanted: set[str]) -> dict[str, int]:
    """Values of ``wanted`` symbols in an ELF64 little-endian file's .symtab."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return {}
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    found: dict[str, int] = {}
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != _SHT_SYMTAB:
            continue
        strtab = sections[link][4]
        for entry in range(offset, offset + size, entsize or 24):
            st_name, _info2, _other, _shndx, value, _size = struct.unpack_from("<IBBHQQ", data, entry)
            start = strtab + st_name
            name = data[start:data.index(b"\0", start)].decode(errors="replace")
            if name in wanted:
                found[name] = value
    return found


@functools.cache
def _fake_guard() -> tuple[ctypes._CFuncPtr, ctypes.Array] | None:
    """(registerDeviceGuard, a FakeGuardImpl<CUDA> object), or None if this
    libc10 does not have them (then ops that open a device guard stay
    unsupported on fake CUDA tensors)."""
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")
    if not os.path.exists(path):
        return None
    symbols = _elf_symbols(path, {_REGISTER, _FAKE_CUDA_VTABLE})
    if len(symbols) != 2:
        return None
    lib = ctypes.CDLL(path)
    register = getattr(lib, _REGISTER)
    register.argtypes = [ctypes.c_int8, ctypes.c_void_p]
    register.restype = None
    base = ctypes.cast(register, ctypes.c_void_p).value - symbols[_REGISTER]
    # Itanium ABI: an object's vptr points two words into its vtable.
    obj = (ctypes.c_void_p * 1)(base + symbols[_FAKE_CUDA_VTABLE] + 2 * ctypes.sizeof(ctypes.c_void_p))
    return register, obj


def install(log: UndoLog) -> None:
    """Register the no-op CUDA guard when no CUDA guard exists (a CPU build)."""
    if torch.backends.cuda.is_built():
        return
    guard = _fake_guard()
    if guard is None:
        return
    register, obj = guard
    register(_CUDA, ctypes.addressof(obj))
    log.call_on_undo(lambda: register(_CUDA, None))
