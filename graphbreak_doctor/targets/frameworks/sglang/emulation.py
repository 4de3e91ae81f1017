"""What an emulated GPU changes, on top of itself, for SGLang.

SGLang decides its platform when it is imported and caches the answer; its
set-up and eager warm-up then run code that a CPU build of torch cannot run
on fake tensors. Each change below goes through an undo log and is named in
``CHANGES`` (the builder records the ones it used in the findings). The facts
behind them are in docs/design.md, "SGLang on an emulated GPU".

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
from pathlib import Path
from typing import Any, Iterator

import torch

from graphbreak_doctor.patching import UndoLog

CHANGES = {
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
    "inductor_as_eager",
    "isolate_caches",
    "scratch_folder",
]
