"""Do a compiled target's outputs equal its eager outputs? Real tensors are
compared value for value; fake tensors (an emulated GPU) have no values, so
only their shapes, dtypes and devices are."""

from __future__ import annotations

from typing import Any

import torch


def same(a: Any, b: Any) -> bool:
    """``a`` and ``b`` hold the same values: tensors equal element for element
    (with shape and dtype), lists, tuples and dicts item for item, anything
    else by ``==``."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False
    return bool(a == b)


def same_shapes(a: Any, b: Any) -> bool:
    """As :func:`same`, but tensors match on shape, dtype and device alone
    (what fake tensors can say)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_shapes(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_shapes(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False
    return type(a) is type(b)
