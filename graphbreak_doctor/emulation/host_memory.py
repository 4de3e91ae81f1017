"""The emulated machine's memory: the GPU's is fake, the host's is real.

On a GPU machine a kernel library keeps two kinds of tensors: device tensors,
whose values the doctor never needs (fake tensors: shape, dtype and device
only), and host tensors that it computes with in Python -- an attention
wrapper's ``plan`` reads the page-table offsets of a batch with ``.tolist()``,
a sampler reads its generator's seed and offset from a small CPU tensor. A
plain ``FakeTensorMode`` makes every tensor fake, so that host arithmetic ends
in "data-dependent" errors that never happen on the GPU.

``HostMemoryMode`` is a ``FakeTensorMode`` that runs an operator for real when
it touches host memory only: no fake tensor among its arguments and no device
other than the CPU asked for. Everything else -- a CUDA tensor, a copy from
the host to the device or back -- stays fake, as before. Pinned host memory,
which needs the CUDA driver, is ordinary host memory here.

The device keeps what the host wrote to it: a host tensor copied to the
device (``torch.tensor(lens, device="cuda")``, ``.to("cuda")``), and such a
copy converted to another dtype, is a fake tensor whose values the mode
remembers until an operator writes to it. Two data-dependent operators read
them, as the GPU would: ``repeat_interleave`` with tensor repeats (its output
size is their sum; an attention backend expands per-request offsets by the
batch's new-token counts this way) and reading one value back to the host
(``.item()``). With values the mode does not know, both stay what they are
on fake tensors: a data-dependent error.

While Dynamo or AOTAutograd trace (a tracing context is active) the mode is a
plain ``FakeTensorMode``: what a compiler traces must be fake.

Higher-order operators (a captured Triton launch) find their rules by the
mode's exact type, so this subclass hands them FakeTensorMode's rule itself.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten

# Pinning asks the CUDA driver for page-locked memory; here it is ordinary
# host memory that answers `is_pinned()` with True (it, and views of it).
_PIN = {aten._pin_memory.default, aten.pin_memory.default}
_IS_PINNED = {aten.is_pinned.default}


# What the device's remembered values answer (see the module docstring).
_REPEAT = aten.repeat_interleave.Tensor
_READ_BACK = aten._local_scalar_dense.default
_COPY = aten._to_copy.default
_CLONES = {aten.clone.default}


# Operators that act on the device whatever their arguments (Dynamo's
# stream and synchronization ops): always their fake rule.
_DEVICE_NAMESPACES = ("streams",)


def _on_host(func: Any, args: tuple, kwargs: dict) -> bool:
    if func.namespace in _DEVICE_NAMESPACES:
        return False
    flat, _ = tree_flatten((args, kwargs))
    if any(isinstance(a, FakeTensor) for a in flat):
        return False
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return False
    # Only real tensors (which live on the host on this machine) or none at all.
    return all(not isinstance(a, torch.Tensor) or a.device.type == "cpu" for a in flat)


def _same_values(func: Any, source: torch.Tensor, out: FakeTensor) -> bool:
    """``out`` holds ``source``'s values in the same order: a clone, or a
    view of all of it (detach, alias, reshape) laid out as it is."""
    returns = func._schema.returns
    aliases = bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write
    if not (aliases or func in _CLONES) or out.numel() != source.numel():
        return False
    return out.is_contiguous() and source.is_contiguous() and (
        not aliases or out.storage_offset() == source.storage_offset())


class HostMemoryMode(FakeTensorMode):
    """FakeTensorMode whose host tensors are real (see the module docstring)."""

    supports_higher_order_operators = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # id -> weak reference, for the pinned allocations (tensors compare
        # by value, so a WeakSet cannot hold them).
        self._pinned: dict[int, weakref.ref] = {}
        # Higher-order operators whose FakeTensorMode rule is running.
        self._hops: set = set()
        # id -> (weak reference, values on the host) of the device tensors
        # whose values the host wrote.
        self._written: dict[int, tuple[weakref.ref, torch.Tensor]] = {}

    def written(self, tensor: Any) -> torch.Tensor | None:
        """The values the host wrote to device tensor ``tensor`` (None: not known)."""
        entry = self._written.get(id(tensor)) if isinstance(tensor, FakeTensor) else None
        return entry[1] if entry is not None and entry[0]() is tensor else None

    def _remember(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        if self._written and func._schema.is_mutable:  # written to: no longer known
            for argument, value in zip(func._schema.arguments, args):
                if argument.alias_info is not None and argument.alias_info.is_write and isinstance(value, FakeTensor):
                    for t in (value, value._base):
                        self._written.pop(id(t), None)
        if not isinstance(out, FakeTensor) or not args or not isinstance(args[0], torch.Tensor):
            return
        if func is not _COPY and not self._written:  # nothing remembered to carry over
            return
        source = args[0]
        if func is _COPY:
            values = self.written(source) if isinstance(source, FakeTensor) else (
                source if source.device.type == "cpu" else None)
        elif _same_values(func, source, out):  # a view or copy of remembered values
            values = self.written(source)
        else:
            return
        if values is None or values.numel() > 1 << 16:
            return
        with unset_fake_temporarily():
            values = values.detach().to(dtype=out.dtype, copy=True)
        key = id(out)
        self._written[key] = (weakref.ref(out, lambda _ref: self._written.pop(key, None)), values)

    def _pin(self, tensor: torch.Tensor) -> None:
        key = id(tensor)
        self._pinned[key] = weakref.ref(tensor, lambda _ref: self._pinned.pop(key, None))

    def _is_pinned(self, tensor: torch.Tensor) -> bool:
        for t in (tensor, tensor._base):
            ref = self._pinned.get(id(t)) if t is not None else None
            if ref is not None and ref() is t:
                return True
        return False

    def _host(self, func: Any, args: tuple, kwargs: dict) -> Any:
        if func in _IS_PINNED:
            return self._is_pinned(args[0])
        if func in _PIN:
            out = args[0].clone()
        elif kwargs.get("pin_memory"):
            out = func(*args, **{**kwargs, "pin_memory": False})
        else:
            return func(*args, **kwargs)
        self._pin(out)
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            # FakeTensorMode's rule; some rules hand the operator back to the
            # mode's own __torch_dispatch__ (redirect_to_mode): that second
            # call is FakeTensorMode's.
            rule = func.python_key_table.get(FakeTensorMode)
            if rule is None or func in self._hops:
                return super().__torch_dispatch__(func, types, args, kwargs)
            self._hops.add(func)
            try:
                return rule(self, *args, **kwargs)
            finally:
                self._hops.discard(func)
        tracing = torch._guards.TracingContext.try_get() is not None
        if not tracing and _on_host(func, args, kwargs):
            with unset_fake_temporarily():
                return self._host(func, args, kwargs)
        if tracing:
            return super().__torch_dispatch__(func, types, args, kwargs)
        values = self.written(args[0]) if args else None
        if values is not None and func is _READ_BACK:
            return values.item()
        if values is not None and func is _REPEAT and kwargs.get("output_size") is None:
            kwargs = {**kwargs, "output_size": int(values.sum())}
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self._remember(func, args, kwargs, out)
        return out
