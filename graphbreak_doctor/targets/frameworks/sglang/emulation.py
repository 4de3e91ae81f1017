"""What an emulated GPU changes, on top of itself, for SGLang.

SGLang decides its platform when it is imported and caches the answer; its
set-up and eager warm-up then run code that a CPU build of torch cannot run
on fake tensors. Each change below goes through an undo log and is named in
``CHANGES`` (the builder records the ones it used in the findings). The facts
behind them are in docs/design.md, "SGLang on an emulated GPU".

- ``platform_window``: ``torch.cuda.is_available()`` answers True while
  SGLang is imported and the layers are built (SGLang's ``is_cuda()`` and
  every import-time branch on it), and only then: Dynamo must keep seeing
  False (see "Why torch.cuda.is_available stays False"). Fake tensor mode
  reads the same probe to decide whether a constant may be put on a real
  device; it keeps its CPU answer.
- ``fold_platform_probes``: while tracing, Dynamo ignores ``lru_cache`` and
  runs a cached platform probe's body again, which would now answer False;
  the body of each such probe is swapped for a constant, its import-time
  answer.
- ``isolate_caches``: SGLang's cache folders (its own JIT, and the
  third-party caches it points at its cache folder on import) go into the
  emulation's scratch folder, not the real home.
- ``inductor_as_eager``: SGLang's own nested ``torch.compile`` regions run in
  the eager warm-up; Inductor cannot compile for a fake CUDA device, so it
  hands back the captured graph (what ``backend="eager"`` does).
- ``consistent_fake_weights``: checkpoint sanity checks SGLang runs while it
  post-processes loaded weights read values; on fake weights they answer
  "consistent" (only warnings depend on them).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path
from typing import Any, Iterator

import torch

from graphbreak_doctor.emulation.platform_window import platform_window  # noqa: F401  (SGLang's window)
from graphbreak_doctor.patching import UndoLog

CHANGES = {
    "platform_window": "torch.cuda.is_available() answered True while SGLang was imported and the layer "
                       "was built, False while it was traced",
    "fold_platform_probes": "SGLang's cached platform probes ({names}) answered their import-time value "
                            "while traced (Dynamo ignores lru_cache)",
    "isolate_caches": "SGLang's cache folders in the emulation's scratch folder",
    "inductor_as_eager": "Inductor handed back the captured graph for SGLang's own nested torch.compile "
                         "regions (they ran in the eager warm-up on fake tensors)",
    "consistent_fake_weights": "checkpoint sanity checks on fake weights answered 'consistent' while "
                               "weights were post-processed (torch.allclose, bool of a tensor)",
}

# Environment variables SGLang points at its cache folder on import (as
# defaults); set here first, so nothing lands in the real home, and restored.
CACHE_VARIABLES = {
    "SGLANG_CACHE_DIR": "",
    "SGLANG_JIT_CACHE_DIR": "jit",
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "CUDA_CACHE_PATH": "nv",
    "TILELANG_CACHE_DIR": "tilelang",
}


# What a cached probe asks the platform: whether CUDA is there, and which
# device it is (a backend chosen by the capability answers None outside the
# platform window, where torch.cuda.is_available() is False).
_PLATFORM_QUERIES = {"is_available", "get_device_capability"}


def _probes(packages: tuple[str, ...]) -> list[functools._lru_cache_wrapper]:
    found: dict[int, functools._lru_cache_wrapper] = {}
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".", 1)[0] not in packages:
            continue
        for value in list(vars(module).values()):
            if not isinstance(value, functools._lru_cache_wrapper):
                continue
            wrapped = getattr(value, "__wrapped__", None)
            code = getattr(wrapped, "__code__", None)
            if code is None or code.co_argcount or code.co_kwonlyargcount or code.co_freevars:
                continue
            if _PLATFORM_QUERIES & set(code.co_names):
                found[id(value)] = value
    return sorted(found.values(), key=lambda f: f.__wrapped__.__qualname__)


def fold_platform_probes(log: UndoLog, packages: tuple[str, ...] = ("sglang", "sgl_kernel")) -> list[str]:
    """Call inside ``platform_window`` (each probe is asked there, or answers
    from its cache); the swapped bodies stay until ``log`` is undone.
    Returns the probes folded, as 'module.qualname=value'."""
    folded = []
    for probe in _probes(packages):
        value = probe()
        if not isinstance(value, (bool, int, float, str, type(None))):
            continue  # only a constant can be folded into code
        log.replace_code(probe.__wrapped__, (lambda: None).__code__.replace(co_consts=(value,)))
        folded.append(f"{probe.__wrapped__.__module__}.{probe.__wrapped__.__qualname__}={value}")
    return folded


def isolate_caches(log: UndoLog, scratch: Path) -> None:
    """Call before SGLang is imported."""
    root = scratch / "sglang-cache"
    for variable, sub in CACHE_VARIABLES.items():
        log.setenv(variable, str(root / sub) if sub else str(root))


def inductor_as_eager(log: UndoLog) -> None:
    import torch._inductor.compile_fx as compile_fx

    def captured_graph(model: Any, example_inputs: Any, *args: Any, **kwargs: Any) -> Any:
        return model.forward if hasattr(model, "forward") else model

    log.setattr(compile_fx, "compile_fx", captured_graph)


@contextlib.contextmanager
def consistent_fake_weights() -> Iterator[None]:
    from torch._subclasses.fake_tensor import FakeTensor

    allclose = torch.allclose

    def fake_allclose(a: Any, b: Any, *args: Any, **kwargs: Any) -> bool:
        if isinstance(a, FakeTensor) or isinstance(b, FakeTensor):
            return True
        return allclose(a, b, *args, **kwargs)

    with UndoLog() as checks:
        checks.setattr(torch, "allclose", fake_allclose)
        checks.setattr(FakeTensor, "__bool__", lambda self: True)
        yield


def scratch_folder() -> Path:
    """The active emulation's scratch folder (removed when it exits)."""
    from graphbreak_doctor.emulation.device import EmulatedDevice

    device = EmulatedDevice.active()
    if device is None or device.scratch is None:
        raise RuntimeError("SGLang's layers are built inside an emulated device")
    return device.scratch


__all__ = [
    "CHANGES",
    "consistent_fake_weights",
    "fold_platform_probes",
    "inductor_as_eager",
    "isolate_caches",
    "platform_window",
    "scratch_folder",
]
