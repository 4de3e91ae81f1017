"""What is known of a large device tensor's values without holding them:
the range every element lies in.

A weight loader fills each parameter once (uniformly in a range, or with
one value) and then checks it on the host: whether a scale is still NaN,
whether a sentinel was overwritten. On the GPU the check reads the real
values; here a large tensor has none, only its shape. The range its fill
put it in is enough for such checks, and exact: ``isnan`` of a tensor whose
elements all lie in ``[-1, 1]`` is false everywhere, whatever the values.

``after`` gives the ranges an operator leaves, from the ranges of its
arguments, for the operators that keep an answer exact: fills, copies and
views, dtype conversions that stay finite, ``abs``, the NaN/Inf tests
(``isfinite`` is ``x == x`` and ``abs(x) != inf``), comparisons with a
number that the range decides, the product of two one-valued tensors, and
``any``/``all``/``amax``/``amin``.
Every other operator leaves its results without a range. A range ``(c, c)``
is the value itself; booleans are ``0``/``1``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch

aten = torch.ops.aten

Range = tuple[float, float]

# In-place fills: the range of the first argument after them.
_FILL_RANGES: dict[Any, Callable[..., Optional[Range]]] = {
    aten.uniform_: lambda _self, low=0.0, high=1.0, **_k: (float(low), float(high)),
    aten.fill_: lambda _self, value, **_k: (float(value), float(value)) if not isinstance(value, torch.Tensor)
    else None,
    aten.zero_: lambda _self, **_k: (0.0, 0.0),
}
# Factories that give every element one value.
_FACTORIES: dict[Any, Callable[..., Any]] = {
    aten.full: lambda _size, value, **_k: value if not isinstance(value, torch.Tensor) else math.nan,
    aten.zeros: lambda *_a, **_k: 0.0,
    aten.ones: lambda *_a, **_k: 1.0,
}
_TESTS = {aten.isnan: lambda lo, hi: (0.0, 0.0), aten.isinf: lambda lo, hi: (0.0, 0.0),
          aten.isfinite: lambda lo, hi: (1.0, 1.0)}
_COMPARE = {aten.gt: lambda lo, hi, v: (lo > v, hi > v), aten.ge: lambda lo, hi, v: (lo >= v, hi >= v),
            aten.lt: lambda lo, hi, v: (hi < v, lo < v), aten.le: lambda lo, hi, v: (hi <= v, lo <= v)}
# Elementwise products of two one-valued tensors (a bool "and").
_BOTH = {aten.mul, aten.logical_and, aten.bitwise_and}
_REDUCE = {aten.any, aten.all, aten.amax, aten.amin, aten.max, aten.min}


def _equal(bounds: Range, other: Any, itself: bool, range_of: Callable[[Any], Optional[Range]]
           ) -> Optional[bool]:
    """Whether every element equals ``other`` (True), none does (False), or
    the range does not say (None)."""
    if itself:  # x == x: true for every finite value
        return True
    if isinstance(other, torch.Tensor):
        other_bounds = range_of(other)
        if other_bounds is None or other_bounds[0] != other_bounds[1]:
            return None
        other = other_bounds[0]
    if not isinstance(other, (int, float)):
        return None
    if other < bounds[0] or other > bounds[1]:
        return False
    return True if bounds == (other, other) else None


def _finite_in(dtype: torch.dtype, bounds: Range) -> bool:
    """A value in ``bounds`` converted to ``dtype`` stays finite."""
    if dtype == torch.bool:
        return True
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    return info.min <= bounds[0] and bounds[1] <= info.max


def _converted(dtype: torch.dtype, bounds: Range) -> Optional[Range]:
    if not _finite_in(dtype, bounds):
        return None
    if dtype == torch.bool:  # nonzero or not
        if bounds == (0.0, 0.0):
            return bounds
        return (1.0, 1.0) if bounds[0] > 0 or bounds[1] < 0 else None
    # Rounding to the new dtype is monotone: the converted ends bound the
    # converted values (a small positive value may become zero).
    low, high = torch.tensor(bounds, dtype=torch.float64).to(dtype).tolist()
    return (float(low), float(high))


def after(func: Any, args: tuple, kwargs: dict, out: Any, range_of: Callable[[Any], Optional[Range]]
          ) -> list[tuple[torch.Tensor, Range]]:
    """The (tensor, range) pairs ``func(*args, **kwargs)`` -> ``out`` leaves,
    from ``range_of`` (a tensor's known range, or None)."""
    packet = func.overloadpacket
    if packet in _FACTORIES and isinstance(out, torch.Tensor):
        value = float(_FACTORIES[packet](*args, **kwargs))
        return [(out, (value, value))] if math.isfinite(value) else []
    first = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if first is None:
        return []
    if packet in _FILL_RANGES:
        bounds = _FILL_RANGES[packet](*args, **kwargs)
        return [(first, bounds)] if bounds is not None and all(map(math.isfinite, bounds)) else []
    if packet is aten.copy_:
        source = range_of(args[1]) if isinstance(args[1], torch.Tensor) else None
        bounds = _converted(first.dtype, source) if source is not None else None
        return [(first, bounds)] if bounds is not None else []
    bounds = range_of(first)
    if bounds is None or not isinstance(out, torch.Tensor):
        return []
    returns = func._schema.returns
    if func is aten._to_copy.default or (returns and returns[0].alias_info is not None
                                         and not returns[0].alias_info.is_write) or packet is aten.clone:
        converted = _converted(out.dtype, bounds) if out.dtype != first.dtype else bounds
        return [(out, converted)] if converted is not None else []
    if packet in _TESTS:
        return [(out, _TESTS[packet](*bounds))]
    if packet is aten.abs:
        low, high = sorted((abs(bounds[0]), abs(bounds[1])))
        return [(out, (0.0 if bounds[0] <= 0 <= bounds[1] else low, high))]
    if packet in (aten.eq, aten.ne) and len(args) > 1:
        equal = _equal(bounds, args[1], args[1] is first, range_of)
        if equal is None:
            return []
        return [(out, (float(equal == (packet is aten.eq)),) * 2)]
    if packet in _BOTH and len(args) > 1 and isinstance(args[1], torch.Tensor):
        other = range_of(args[1])
        if other is not None and bounds[0] == bounds[1] and other[0] == other[1]:
            value = float(bool(bounds[0]) and bool(other[0])) if out.dtype == torch.bool else bounds[0] * other[0]
            return [(out, (value, value))]
        return []
    if packet in _COMPARE and len(args) > 1 and isinstance(args[1], (int, float)):
        low, high = _COMPARE[packet](*bounds, float(args[1]))
        return [(out, (float(low), float(high)))] if low == high else []
    if packet in _REDUCE and out.dtype == torch.bool and bounds[0] == bounds[1]:
        return [(out, (float(bool(bounds[0])),) * 2)]
    if packet in _REDUCE and out.dtype == first.dtype:
        return [(out, bounds)]
    return []
