"""An NCCL library for a rank of the emulated world, whose peers are not
there (and where libnccl cannot load at all: no GPU, no driver).

Serving frameworks drive NCCL directly, besides torch.distributed, through a
ctypes wrapper of their own (PyNccl): it is the communicator they enable
inside a CUDA-graph capture, where torch.distributed's collectives are not
used. The wrapper loads the library once per path and keeps it, with a
table of its C functions by name, in two caches of its class
(``path_to_library_cache``, ``path_to_dict_mapping``). The stand-in fills
both caches for the path the wrapper would load, so the framework's own
wrapper runs unchanged over it: every function the wrapper binds answers as
the library does for one rank of a world whose peers are not there -- the
version of NCCL that CUDA 12.9 builds of torch ship (2.27.3), a communicator
handle, and collectives that return at once, moving nothing (the fake
world's rule: docs/emulation.md, "The emulated world"), each told to the
world so that a CUDA-graph capture lists it ("nccl::ncclAllReduce"). A wrapper's
outputs, written through ``ctypes.byref`` in C, are written to the object
the reference points at.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

from graphbreak_doctor.emulation import world
from graphbreak_doctor.patching import UndoLog

# NCCL 2.27.3, as ncclGetVersion encodes it (major * 10000 + minor * 100 + patch).
VERSION = 22703
_SUCCESS = 0
_handles = itertools.count(0x10000, 0x100)


def write_through(reference: Any, value: int) -> None:
    """Write ``value`` where a ``ctypes.byref`` reference points (a C output argument)."""
    target = getattr(reference, "_obj", reference)
    if hasattr(target, "value"):
        target.value = value


def _functions() -> dict[str, Callable[..., Any]]:
    def ncclGetErrorString(result: int) -> bytes:
        return b"the emulated NCCL library reports no error"

    def ncclGetVersion(version: Any) -> int:
        write_through(version, VERSION)
        return _SUCCESS

    def ncclGetUniqueId(unique_id: Any) -> int:
        return _SUCCESS  # all zeros: one id for the whole (fake) world

    def ncclCommInitRank(comm: Any, *args: Any) -> int:
        write_through(comm, next(_handles))
        return _SUCCESS

    def ncclCommWindowRegister(comm: Any, buffer: Any, size: int, window: Any, *args: Any) -> int:
        write_through(window, next(_handles))
        return _SUCCESS

    def ncclMemAlloc(pointer: Any, size: int) -> int:
        write_through(pointer, next(_handles))
        return _SUCCESS

    return {"ncclGetErrorString": ncclGetErrorString, "ncclGetVersion": ncclGetVersion,
            "ncclGetUniqueId": ncclGetUniqueId, "ncclCommInitRank": ncclCommInitRank,
            "ncclCommInitRankConfig": ncclCommInitRank, "ncclCommWindowRegister": ncclCommWindowRegister,
            "ncclMemAlloc": ncclMemAlloc}


# The library's collectives and point-to-point calls: each is told to the
# emulated world (a CUDA-graph capture lists it) and moves nothing.
COLLECTIVES = ("ncclAllReduce", "ncclReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast", "ncclSend",
               "ncclRecv", "ncclAllToAll")


def _returns_at_once(*args: Any) -> int:
    """A group call, a free: nothing to do for one rank of a fake world."""
    return _SUCCESS


def _collective(name: str) -> Callable[..., int]:
    def run(*args: Any) -> int:
        world.ran_in_library(f"nccl::{name}")
        return _SUCCESS

    run.__name__ = name
    return run


class EmulatedLibrary:
    """What the wrapper keeps as the loaded library: each C function by name
    (``known``'s answer, or one that returns at once; NCCL's by default)."""

    def __init__(self, names: list[str], known: dict[str, Callable[..., Any]] | None = None) -> None:
        known = _functions() if known is None else known
        self.functions = {name: known.get(name) or (_collective(name) if name in COLLECTIVES else _returns_at_once)
                          for name in names}

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["functions"][name]
        except KeyError:
            raise AttributeError(f"the emulated library has no {name}") from None


def install(log: UndoLog, wrapper_cls: Any, so_file: str) -> bool:
    """Put the emulated library in ``wrapper_cls``'s caches for ``so_file``
    (undone with ``log``): in a world whose peers are not there, even a real
    libnccl that loads would wait for them at its first communicator.
    Whether it did (a wrapper without the caches is left alone)."""
    if not all(hasattr(wrapper_cls, cache) for cache in ("path_to_library_cache", "path_to_dict_mapping")):
        return False
    names = [f.name for f in list(getattr(wrapper_cls, "exported_functions", ()))
             + list(getattr(wrapper_cls, "exported_functions_symm_mem", ()))]
    library = EmulatedLibrary(names)
    log.setitem(wrapper_cls.path_to_library_cache, so_file, library)
    log.setitem(wrapper_cls.path_to_dict_mapping, so_file, dict(library.functions))
    return True


__all__ = ["COLLECTIVES", "VERSION", "EmulatedLibrary", "install", "write_through"]
