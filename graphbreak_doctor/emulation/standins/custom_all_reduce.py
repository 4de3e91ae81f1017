"""The custom all-reduce kernel library (the IPC all-reduce that SGLang's
sgl-kernel ships; vLLM's custom-AR extension has the same ops, and more:
its own shared-buffer allocation and IPC handles, an all-gather and a
reduce-scatter on the same communicator), stood in where its binary cannot
load.

What the real library does, and the stand-in keeps account of: each
communicator (``init_custom_ar``'s handle) holds the buffers it has
registered with the peer ranks -- its staging buffer, at set-up
(``register_buffer``). An ``all_reduce`` run while a stream captures does not
look its buffer up: it takes the next slot of the communicator's table of
peer addresses and remembers the buffer as a graph buffer, unregistered. The
framework registers them after the capture: it reads their handles
(``get_graph_buffer_ipc_meta``), exchanges them with the peers and hands the
peers' addresses back (``register_graph_buffers``), which fills those slots.
A graph replayed with a slot never filled reads peer addresses nobody wrote.

The stand-in's ``all_reduce`` moves nothing (kernels run dry; the fake
world's collectives return this rank's values) and, while a segment is
captured, owes the registration of its buffer to the emulated capture
(emulation/cuda_graph.py: ``unregistered``); ``register_graph_buffers``
settles what the communicator owes. What is still owed when the capture
phase ends is a capture hazard, at the frame of the all-reduce
(``cudagraph-unregistered-buffer``). ``all_reduce`` is declared to the
emulated world as a collective, so a capture lists it. Ops the library
declares that this process lacks are declared with the real library's
schemas first.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

import torch

from graphbreak_doctor.emulation import cuda_graph, world
from graphbreak_doctor.emulation.standins.binaries import StandIns, declared
from graphbreak_doctor.patching import UndoLog

# The library's ops, with the schemas its binaries declare.
SCHEMAS = {
    "init_custom_ar": "init_custom_ar(int[] ipc_tensors, Tensor rank_data, int rank, bool full_nvlink) -> int",
    "all_reduce": "all_reduce(int fa, Tensor inp, Tensor! out, int reg_buffer, int reg_buffer_sz_bytes) -> ()",
    "dispose": "dispose(int fa) -> ()",
    "meta_size": "meta_size() -> int",
    "register_buffer": "register_buffer(int fa, int[] fake_ipc_ptrs) -> ()",
    "get_graph_buffer_ipc_meta": "get_graph_buffer_ipc_meta(int fa) -> (int[], int[])",
    "register_graph_buffers": "register_graph_buffers(int fa, int[][] handles, int[][] offsets) -> ()",
}
# The bytes of a rank's signal block (its start and end flags for up to 36
# thread blocks, 8 ranks each, one set per phase, 32-bit): what meta_size
# answers, sizing the buffer the framework allocates in front of its staging
# buffer.
META_SIZE = (36 * 8 + 2 * 36 * 8) * 4
# An exported handle's bytes (cudaIpcMemHandle_t).
_HANDLE_BYTES = 64
_handles = itertools.count(1)
# handle -> what the communicator owes: the settle call of each graph buffer captured.
_owed: dict[int, list[Callable[[], None]]] = {}


def _init_custom_ar(ipc_tensors: list, rank_data: Any, rank: int, full_nvlink: bool) -> int:
    handle = next(_handles)
    _owed[handle] = []
    return handle


def _all_reduce(fa: int, inp: Any, out: Any, reg_buffer: int, reg_buffer_sz_bytes: int) -> None:
    """The all-reduce (and vLLM's all-gather and reduce-scatter on the same
    communicator, which look their input up the same way)."""
    if cuda_graph.capturing():
        what = ("the custom all-reduce's staging buffer, as a graph buffer" if reg_buffer
                else "the custom all-reduce's input, as a graph buffer")
        _owed.setdefault(int(fa), []).append(cuda_graph.unregistered(
            f"{what}: its peers' addresses are registered only by register_graph_buffers"))


def _dispose(fa: int) -> None:
    _owed.pop(int(fa), None)


def _meta_size() -> int:
    return META_SIZE


def _register_buffer(fa: int, fake_ipc_ptrs: list) -> None:
    return None


def _get_graph_buffer_ipc_meta(fa: int) -> tuple[list[int], list[int]]:
    pending = len(_owed.get(int(fa), ()))
    return [0] * (_HANDLE_BYTES * pending), [0] * pending


def _register_graph_buffers(fa: int, handles: list, offsets: list) -> None:
    owed = _owed.setdefault(int(fa), [])
    for settle in owed:
        settle()
    owed.clear()


# Made-up device addresses of the shared buffers (never dereferenced).
_addresses = itertools.count(0x7F0000000000, 0x10000000)


def _allocate_shared_buffer_and_handle(size: int) -> tuple[int, torch.Tensor]:
    """A buffer the peers can open: its address, and its exported handle's bytes (host memory)."""
    return next(_addresses), torch.zeros(_HANDLE_BYTES, dtype=torch.uint8, device="cpu")


def _open_mem_handle(mem_handle: Any) -> int:
    return next(_addresses)


def _free_shared_buffer(ptr: int) -> None:
    return None


_KERNELS = {"init_custom_ar": _init_custom_ar, "all_reduce": _all_reduce, "dispose": _dispose,
            "meta_size": _meta_size, "register_buffer": _register_buffer,
            "get_graph_buffer_ipc_meta": _get_graph_buffer_ipc_meta,
            "register_graph_buffers": _register_graph_buffers,
            # vLLM's extension only (given kernels where its library declares them):
            "allocate_shared_buffer_and_handle": _allocate_shared_buffer_and_handle,
            "open_mem_handle": _open_mem_handle, "free_shared_buffer": _free_shared_buffer,
            "custom_all_gather": _all_reduce, "custom_reduce_scatter": _all_reduce}
# Ops with a tensor argument: reached through the emulated GPU's fake tensors.
_ON_TENSORS = ("init_custom_ar", "all_reduce", "custom_all_gather", "custom_reduce_scatter")
# The collectives a capture lists.
_COLLECTIVES = ("all_reduce", "custom_all_gather", "custom_reduce_scatter")


def install(log: UndoLog, out: StandIns, namespace: str) -> None:
    """The library's ops in ``namespace`` get the stand-in's kernels (those
    missing declared first); ``all_reduce`` is a collective of the world."""
    library = out.library(log, namespace)
    done = []
    for name, kernel in _KERNELS.items():
        qualname = f"{namespace}::{name}"
        if not declared(qualname):
            if name not in SCHEMAS:
                continue  # an op of another library's
            library.define(SCHEMAS[name])
        if qualname in out.declared:
            out.declared.remove(qualname)
        if name in _ON_TENSORS:
            torch.library.register_fake(qualname, kernel, lib=library)
        else:
            library.impl(name, kernel, "CompositeExplicitAutograd")
        done.append(name)
    world.declare_collectives(log, {f"{namespace}::{name}": ("", "") for name in _COLLECTIVES if name in done})
    log.call_on_undo(_owed.clear)
    out.lines.append(f"{namespace}::{{{', '.join(done)}}}: the custom all-reduce library's ops, stood in: "
                     "each collective moves nothing, and one captured in a CUDA graph owes the registration of its "
                     "buffer with the peers until register_graph_buffers")


__all__ = ["META_SIZE", "SCHEMAS", "install"]
