"""Do a compiled target's outputs equal its eager outputs? Real tensors are
compared value for value; fake tensors (an emulated GPU) have no values, so
only their shapes, dtypes and devices are.

An object whose class defines no ``==`` of its own (a model's key-value
cache in its output, say) would equal only itself: two runs never give the
same one. It is compared by its attributes instead, as a dict would be, and
two objects of different classes differ."""

from __future__ import annotations

from typing import Any, Callable

import torch

# Attribute objects nested deeper than this compare by class alone (a cycle
# of references ends there too).
_DEPTH = 8


def _compare(a: Any, b: Any, tensors: Callable[[torch.Tensor, torch.Tensor], bool],
             other: Callable[[Any, Any], bool], depth: int = 0) -> bool:
    def inner(x: Any, y: Any) -> bool:
        return _compare(x, y, tensors, other, depth + 1)

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return tensors(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(inner(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(inner(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False
    if type(a) is type(b) and type(a).__eq__ is object.__eq__ and hasattr(a, "__dict__"):
        if a is b or depth >= _DEPTH:
            return True
        return inner(vars(a), vars(b))
    return other(a, b)


def same(a: Any, b: Any) -> bool:
    """``a`` and ``b`` hold the same values: tensors equal element for element
    (with shape and dtype), lists, tuples and dicts item for item, objects
    without an ``==`` of their own attribute for attribute, anything else by
    ``==``."""
    return _compare(a, b, lambda x, y: x.shape == y.shape and x.dtype == y.dtype and bool(torch.equal(x, y)),
                    lambda x, y: bool(x == y))


def same_shapes(a: Any, b: Any) -> bool:
    """As :func:`same`, but tensors match on shape, dtype and device alone
    (what fake tensors can say), and anything else on its class."""
    return _compare(a, b, lambda x, y: x.shape == y.shape and x.dtype == y.dtype and x.device == y.device,
                    lambda x, y: type(x) is type(y))
