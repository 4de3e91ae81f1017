"""FlashInfer's own caches, kept apart from the emulation.

Memoized answers (CUDA path and version, capability-keyed modules such as
get_fp4_quantization_module) must neither leak from the real machine into
the emulation nor from the emulation back out; clearing is a complete
restore for a pure cache. FlashInfer's scratch buffers and memory pools are
restored on exit.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from graphbreak_doctor.patching import UndoLog


def _is_functools_cache(value: Any) -> bool:
    # An isinstance check, not hasattr: some FlashInfer globals are lazy
    # library handles whose __getattr__ raises (flashinfer.comm.cuda_ipc's
    # libcudart wrapper when no CUDA runtime is loaded).
    return isinstance(value, functools._lru_cache_wrapper)


def flashinfer_caches() -> list[Any]:
    """functools caches at module level in FlashInfer (and in its classes)."""
    caches = []
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == "flashinfer" or mod_name.startswith("flashinfer.")):
            continue
        for value in list(vars(mod).values()):
            if _is_functools_cache(value):
                caches.append(value)
            elif isinstance(value, type) and value.__module__ == mod_name:
                caches.extend(attr for attr in list(vars(value).values()) if _is_functools_cache(attr))
    return caches


def clear_flashinfer_caches() -> None:
    for cache in flashinfer_caches():
        cache.cache_clear()


def clear_caches(log: UndoLog) -> None:
    """FlashInfer's caches cleared now and again when `log` is undone."""
    clear_flashinfer_caches()
    log.call_on_undo(clear_flashinfer_caches)


# flashinfer/utils.py keeps scratch buffers and memory pools in module-level
# containers (_get_cache_buf, _get_stream_cache_buf). Inside the emulation they
# fill with fake tensors and emulated pools; they are restored on exit so none
# of them reaches a later, real run.
SCRATCH = ("_cache_buf", "_stream_cache_buf", "_stream_cache_mem_pools", "_cache_buf_retired")


def keep_scratch_buffers(log: UndoLog) -> None:
    utils = sys.modules.get("flashinfer.utils")
    for name in SCRATCH:
        container = getattr(utils, name, None)
        if not isinstance(container, (dict, list)):
            continue
        saved = container.copy()

        def restore(container=container, saved=saved) -> None:
            container.clear()
            if isinstance(container, dict):
                container.update(saved)
            else:
                container.extend(saved)

        log.call_on_undo(restore)
