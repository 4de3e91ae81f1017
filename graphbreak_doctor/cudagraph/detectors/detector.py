"""The record every capture-hazard detector is, and what it is shown.

While a CUDA-graph segment is open, the recorder (cudagraph/recorder.py)
shows each ``Operation`` that runs to every registered detector; a detector
answers what ran, in words, when it is a hazard of its category ("" when it
is none). The recorder keeps where it ran (the frame to change) and counts
repeats; the category's recipe gives the fix (cudagraph/advice.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._pytree import tree_flatten

# What ran (``Operation.kind``):
OPERATOR = "operator"  # an operator dispatched to the emulated GPU (an aten OpOverload)
# An operator whose output size the emulated GPU cannot know: it needs the
# device's values (nonzero, a boolean mask). Torch's fake mode said so.
UNKNOWN_SIZE = "unknown-size"
FUNCTION = "function"  # a torch function or tensor method called (``Tensor.tolist``)
RUNTIME = "runtime"  # a CUDA runtime entry point (emulation/cuda_runtime.py's names: "torch.cuda.synchronize")


def on_device(value: Any) -> bool:
    """A tensor in device memory (on the emulated GPU, a fake tensor)."""
    return isinstance(value, torch.Tensor) and (isinstance(value, FakeTensor) or value.device.type != "cpu")


@dataclass
class Operation:
    """One thing that ran inside a captured segment."""

    kind: str  # OPERATOR, UNKNOWN_SIZE, FUNCTION or RUNTIME
    func: Any = None  # the operator or function (OPERATOR, UNKNOWN_SIZE, FUNCTION)
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    name: str = ""  # the runtime entry point (RUNTIME)

    @functools.cached_property
    def tensors(self) -> list[Any]:
        """Every argument, nested ones too (a list of tensors)."""
        return tree_flatten((self.args, self.kwargs))[0]

    @functools.cached_property
    def on_device(self) -> bool:
        """An argument lives in device memory."""
        return any(on_device(a) for a in self.tensors)


@dataclass(frozen=True)
class HazardDetector:
    name: str
    # The category its hazards fall in: a registered break category
    # (analysis/categories/), whose advice recipe is the hazard's fix.
    category: str
    # What ran, in words, when ``Operation`` is a hazard; "" when it is none.
    detect: Callable[[Operation], str]
    help: str = ""  # one line: what it finds


__all__ = ["FUNCTION", "OPERATOR", "RUNTIME", "UNKNOWN_SIZE", "HazardDetector", "Operation", "on_device"]
