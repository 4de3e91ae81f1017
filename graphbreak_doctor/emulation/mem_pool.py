"""Memory pools on an emulated GPU, as a CUDA build of torch has them.

`torch.cuda.MemPool` / `use_mem_pool`: on a CPU build the base class
`torch._C._MemPool` and the pool functions are placeholders from
`torch/_utils.py: _dummy_type` whose `__new__`/`__init__` raise. Only the
bodies of those placeholder functions are swapped (the function objects,
their names and files stay), so Dynamo's view -- a skipped call at the same
FlashInfer line -- is exactly the CPU build's, and the eager path runs.
"""

from __future__ import annotations

from typing import Any

import torch

from graphbreak_doctor.patching import UndoLog

# Placeholders torch/cuda/memory.py installs on a CPU build; each is a
# `_dummy_type` whose `__new__` (and `__init__`) raise.
POOL_FUNCTIONS = (
    "_cuda_beginAllocateCurrentThreadToPool",
    "_cuda_beginAllocateToPool",
    "_cuda_endAllocateToPool",
    "_cuda_releasePool",
)


def _pool_bodies() -> dict[str, Any]:
    # Bodies with the closure shape of torch/_utils.py `err_fn` (one free
    # variable, `is_init`), so they can replace its code in place.
    is_init = None

    def new_instance(obj, *args, **kwargs):
        is_init  # noqa: B018  (keeps the closure shape)
        return object.__new__(obj)

    def init_nothing(obj, *args, **kwargs):
        is_init  # noqa: B018
        return None

    def call_nothing(obj, *args, **kwargs):
        is_init  # noqa: B018
        return None  # not an instance of the placeholder: __init__ is skipped

    return {"new": new_instance.__code__, "init": init_nothing.__code__, "call": call_nothing.__code__}


def _is_placeholder(obj: Any) -> bool:
    new = vars(obj).get("__new__") if isinstance(obj, type) else None
    fn = getattr(new, "__func__", new)
    return getattr(getattr(fn, "__code__", None), "co_name", "") == "err_fn" and getattr(
        fn, "__module__", ""
    ) == "torch._utils"


_POOL_ID = (1, 0)  # one (emulated) pool id; the pool functions ignore it


# A CUDA build's MemPool is a pybind type whose constructor asks the driver,
# and whose Python subclass must call it; with no GPU the pool and the pool
# functions `use_mem_pool` calls are these instead, compiled under the file
# name of torch/cuda/memory.py so that Dynamo treats their frames as it
# treats torch's own (skipped), as on a CPU build.
_CUDA_BUILD_POOL = f"""
class MemPool:
    def __init__(self, allocator=None, use_on_oom=False, no_split=False):
        pass

    @property
    def id(self):
        return {_POOL_ID!r}

    def use_count(self):
        return 1

    def snapshot(self, include_traces=True):
        return []


def _cuda_beginAllocateCurrentThreadToPool(device, pool_id):
    pass


def _cuda_beginAllocateToPool(device, pool_id, filter=None):
    pass


def _cuda_endAllocateToPool(device, pool_id):
    pass


def _cuda_releasePool(device, pool_id):
    pass
"""


def _install_cuda_build_pool(log: UndoLog) -> None:
    import torch.cuda.memory as memory

    made: dict[str, Any] = {"__name__": memory.__name__}
    exec(compile(_CUDA_BUILD_POOL, memory.__file__, "exec"), made)  # noqa: S102 (our own source, above)
    made["MemPool"].__qualname__ = "MemPool"
    log.setattr(torch.cuda, "MemPool", made["MemPool"])
    log.setattr(memory, "MemPool", made["MemPool"])
    for name in POOL_FUNCTIONS:
        if hasattr(memory, name):
            log.setattr(memory, name, made[name])


def install(log: UndoLog) -> None:
    """Make `torch.cuda.MemPool()` and `use_mem_pool` run on a CPU build, and
    on a CUDA build with no GPU."""
    if torch.backends.cuda.is_built() and getattr(torch.cuda, "MemPool", None) is not None:
        _install_cuda_build_pool(log)
        return
    bodies = _pool_bodies()
    base = getattr(torch._C, "_MemPool", None)
    if base is not None and _is_placeholder(base):
        new = vars(base)["__new__"]  # type() made it a staticmethod
        log.replace_code(getattr(new, "__func__", new), bodies["new"])
        log.replace_code(vars(base)["__init__"], bodies["init"])
        # MemPool.id is `super().id`: the C base's property on a CUDA build.
        log.setattr(base, "id", _POOL_ID)
    for name in POOL_FUNCTIONS:
        placeholder = getattr(torch._C, name, None)
        if placeholder is not None and _is_placeholder(placeholder):
            new = vars(placeholder)["__new__"]
            log.replace_code(getattr(new, "__func__", new), bodies["call"])
