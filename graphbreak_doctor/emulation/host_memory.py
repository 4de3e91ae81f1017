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
remembers. What the device computes from such values alone -- an operator
whose every device argument has known values, each of at most 65,536
elements -- is computed on host copies too, and its results (and what it
wrote) are known in turn; an in-place fill (``uniform_``, ``fill_``,
``copy_``) and an ``out=`` argument need no known values in the tensor
they overwrite. A device tensor made from shapes and scalars alone
(``zeros``, ``ones``, ``full``, ``arange``) is known, and a ``*_like`` one
needs no known values in the tensor it copies the shape of. A write of
known values through a view (``indptr[1:] = cumsum(lens)``) is made on the
host copy of every known contiguous tensor of the same memory too, so the
buffer stays known; a copy of known device values to the host
(``indptr.to("cpu")``, ``staged.copy_(indptr)``) holds them. A random fill
draws from a host generator seeded from the emulated device generator: the
values are not the GPU's, their distribution is. A tensor written by an
operator with unknown values is no longer known, nor is any other view of
its memory. Data-dependent operators
read known values as the GPU would: ``repeat_interleave`` with tensor
repeats (its output size is their sum; an attention backend expands
per-request offsets by the batch's new-token counts this way), ``unique``
and the like, and reading one value back to the host (``.item()``, a
Python ``if`` on a tensor). Larger tensors keep only the range their fill put
them in (``device_bounds``), which answers a weight loader's checks (still
NaN? positive?) exactly. With values the mode does not know, these
operators stay what they are on fake tensors: a data-dependent error.

The mode counts the device memory its fake tensors hold (``allocated``):
each device storage from the moment an operator makes it until its last
tensor is gone, as the caching allocator hands memory out and takes it back.
``torch.cuda.mem_get_info()`` answers its free memory from that count
(torch_surface.py), so what a framework sizes from free memory -- a KV cache
after the weights are loaded -- is sized as on the GPU.

While Dynamo or AOTAutograd trace (a tracing context is active) the mode is a
plain ``FakeTensorMode``: what a compiler traces must be fake.

Higher-order operators (a captured Triton launch) find their rules by the
mode's exact type, so this subclass hands them FakeTensorMode's rule itself.
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Optional

import torch
from torch._subclasses.fake_tensor import (DataDependentOutputException, DynamicOutputShapeException, FakeTensor,
                                          FakeTensorMode, unset_fake_temporarily)
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from graphbreak_doctor.emulation import cuda_graph, device_bounds

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
# Device values are known for tensors up to this many elements.
_KNOWN_LIMIT = 1 << 16
_UNKNOWN = object()
# Operators that read or change how a tensor lies in its memory (sizes,
# strides, offset into the storage): a host copy has a layout of its own.
_GEOMETRY = {aten.as_strided, aten.as_strided_, aten.as_strided_scatter, aten.set_, aten._reshape_alias,
             aten.resize_, aten.resize_as_}
# In-place operators whose result does not depend on what their first
# argument held: it is known after them when their other arguments are.
_OVERWRITES = {aten.fill_, aten.zero_, aten.copy_, aten.uniform_, aten.normal_, aten.random_,
               aten.exponential_, aten.geometric_, aten.log_normal_, aten.cauchy_, aten.bernoulli_}
# Operators whose result's values are fixed by their arguments' shapes and
# scalars alone: a device tensor they make is known (``torch.zeros(n + 1,
# device="cuda")``, an index buffer a backend then fills), and the tensor a
# ``*_like`` one copies the shape of needs no known values.
_CONSTANT_FACTORIES = {aten.zeros, aten.ones, aten.full, aten.arange, aten.eye, aten.scalar_tensor}
_SHAPE_ONLY = {aten.zeros_like, aten.ones_like, aten.full_like}


def _written_arguments(func: Any, args: tuple, kwargs: dict, outs_only: bool = False) -> list[Any]:
    """The arguments ``func``'s schema says it writes (``outs_only``: its
    out= arguments), positional or by keyword (None where one is not given)."""
    out = []
    for index, argument in enumerate(func._schema.arguments):
        if argument.alias_info is not None and argument.alias_info.is_write and (argument.is_out or not outs_only):
            out.append(args[index] if index < len(args) else kwargs.get(argument.name))
    return out


def _storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage()._cdata


def _as_scalar(value: float, dtype: torch.dtype) -> Any:
    if dtype == torch.bool:
        return bool(value)
    return value if dtype.is_floating_point or dtype.is_complex else int(value)


def _host_generator(generator: Any) -> torch.Generator:
    """A host generator standing in for an emulated device generator: seeded
    from its seed and offset, whose offset it advances (the values drawn are
    not the GPU's, their distribution is)."""
    host = torch.Generator()
    host.manual_seed((generator.initial_seed() * 1_000_003 + generator.get_offset()) & ((1 << 63) - 1))
    generator.set_offset(generator.get_offset() + 4)
    return host


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
        # id -> (weak reference, range) of the large device tensors whose
        # values lie in a known range (device_bounds).
        self._ranges: dict[int, tuple[weakref.ref, device_bounds.Range]] = {}
        # storage -> ids of the tensors above that view it: a write through
        # one of them makes all of them unknown.
        self._by_storage: dict[int, set[int]] = {}
        # device storage -> (device index, bytes) while a tensor holds it.
        self._allocations: dict[int, tuple[int, int]] = {}

    def allocated(self, index: int = 0) -> int:
        """Bytes of device memory the mode's live tensors hold on GPU ``index``."""
        return sum(nbytes for device, nbytes in self._allocations.values() if device == index)

    def _count(self, out: Any) -> None:
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, FakeTensor) or tensor.device.type != "cuda":
                continue
            storage = tensor.untyped_storage()
            key = storage._cdata
            if key not in self._allocations:
                self._allocations[key] = (tensor.device.index or 0, storage.nbytes())
                weakref.finalize(storage, self._allocations.pop, key, None)

    def written(self, tensor: Any) -> torch.Tensor | None:
        """The values of device tensor ``tensor`` (None: not known)."""
        entry = self._written.get(id(tensor)) if isinstance(tensor, FakeTensor) else None
        return entry[1] if entry is not None and entry[0]() is tensor else None

    def _remember(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        self._forget_written(func, args, kwargs)
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
        self._keep(out, values)

    def _compute_known(self, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        """An operator on small device tensors whose values the mode knows,
        computed on their host copies as well (see the module docstring):
        its result, with the values of what it returned or wrote remembered;
        ``_UNKNOWN`` where some device value it reads is not known."""
        if (func is _READ_BACK or not isinstance(func, torch._ops.OpOverload) or func.namespace != "aten"
                or func.overloadpacket in _GEOMETRY or cuda_graph.capturing()):
            # Only torch's own operators run on the host (a library's op has
            # no host kernel here); an operator that reads the memory's own
            # layout has no meaning on a host copy. While a CUDA graph
            # captures, an output sized by the device's values stays the error
            # it is to a capture (cudagraph/recorder.py).
            return _UNKNOWN
        flat, spec = tree_flatten((args, kwargs))
        fakes = [i for i, a in enumerate(flat) if isinstance(a, FakeTensor)]
        if not fakes or any(flat[i].numel() > _KNOWN_LIMIT for i in fakes):
            return _UNKNOWN
        # Tensors the operator overwrites whole: an in-place fill's, an out=
        # argument; and the one a *_like operator reads only the shape of.
        overwritten = {id(a) for a in _written_arguments(func, args, kwargs, outs_only=True)}
        if func.overloadpacket in _OVERWRITES | _SHAPE_ONLY and args and isinstance(args[0], FakeTensor):
            overwritten.add(id(args[0]))
        host = list(flat)
        with unset_fake_temporarily():
            for i in fakes:
                values = self.written(flat[i])
                if values is None and id(flat[i]) in overwritten:
                    values = torch.empty(flat[i].shape, dtype=flat[i].dtype)
                if values is None or values.numel() != flat[i].numel():
                    return _UNKNOWN
                host[i] = values.clone().reshape(flat[i].shape)  # a view of all of it: same order
            for i, a in enumerate(host):
                if isinstance(a, torch._C.Generator) and a.device.type != "cpu":
                    host[i] = _host_generator(a)
                elif isinstance(a, torch.device) and a.type != "cpu":
                    host[i] = torch.device("cpu")
            host_args, host_kwargs = tree_unflatten(host, spec)
            try:
                out = super().__torch_dispatch__(func, types, args, kwargs)
            except (DynamicOutputShapeException, DataDependentOutputException):
                out = None
            try:
                host_out = func(*host_args, **host_kwargs)
            except (RuntimeError, NotImplementedError, TypeError, ValueError):
                host_out = _UNKNOWN  # the host cannot compute it: what it returns or writes is not known
        if host_out is _UNKNOWN:
            if out is None:  # the fake mode's own error, from the usual path
                return _UNKNOWN
            self._remember(func, args, kwargs, out)
            self._bound(func, args, kwargs, out)
            return out
        if out is None:  # an output shape that depends on the values: the host's
            device = flat[fakes[0]].device
            out = tree_map(lambda t: self.__torch_dispatch__(_COPY, types, (t,), {"device": device})
                           if isinstance(t, torch.Tensor) else t, host_out)
        outs, _ = tree_flatten(out)
        host_outs, _ = tree_flatten(host_out)
        written = list(zip(_written_arguments(func, args, kwargs), _written_arguments(func, host_args, host_kwargs)))
        wholes = self._known_wholes([fake for fake, _ in written])
        self._forget_written(func, args, kwargs)
        for fake, values in written:
            if isinstance(fake, FakeTensor) and isinstance(values, torch.Tensor):
                self._keep(fake, values)
                self._carry_write(fake, values, wholes)
        for made, values in zip(outs, host_outs):
            if isinstance(made, FakeTensor) and isinstance(values, torch.Tensor) and values.numel() <= _KNOWN_LIMIT:
                self._keep(made, values)
            elif (isinstance(made, torch.Tensor) and isinstance(values, torch.Tensor) and made.device.type == "cpu"
                  and made.shape == values.shape):
                # A copy to the host (``indptr.to("cpu")``): real host memory,
                # which gets the device's known values.
                with unset_fake_temporarily():
                    made.copy_(values)
        return out

    def _constant(self, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        """A device tensor made from shapes and scalars alone, its values
        computed on the host too and remembered (small ones)."""
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self._count(out)
        if isinstance(out, FakeTensor) and out.numel() <= _KNOWN_LIMIT:
            with unset_fake_temporarily():
                values = func(*args, **{**kwargs, "device": torch.device("cpu"), "pin_memory": False})
            self._keep(out, values)
        else:
            self._bound(func, args, kwargs, out)
        return out

    def range_of(self, tensor: Any) -> Optional[device_bounds.Range]:
        """The range a device tensor's values lie in, where the mode knows it."""
        if not isinstance(tensor, FakeTensor):
            return None
        values = self.written(tensor)
        if values is not None:
            if values.numel() == 0 or values.is_complex():
                return None
            with unset_fake_temporarily():
                if values.dtype.is_floating_point and values.element_size() == 1:
                    values = values.float()  # torch has no min/max of 8-bit floats on the host
                low, high = float(values.min()), float(values.max())
            return (low, high) if math.isfinite(low) and math.isfinite(high) else None
        entry = self._ranges.get(id(tensor))
        return entry[1] if entry is not None and entry[0]() is tensor else None

    def _bound(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        if not isinstance(func, torch._ops.OpOverload):
            return
        self._forget_written(func, args, kwargs)
        for tensor, bounds in device_bounds.after(func, args, kwargs, out, self.range_of):
            if isinstance(tensor, FakeTensor):
                key = id(tensor)
                self._ranges[key] = (weakref.ref(tensor, lambda _ref: self._ranges.pop(key, None)), bounds)
                self._by_storage.setdefault(_storage(tensor), set()).add(key)

    def _known_wholes(self, targets: list) -> list[tuple[FakeTensor, torch.Tensor]]:
        """The live contiguous tensors with known values that share memory
        with one of ``targets`` (before a write to the targets forgets them)."""
        storages = {_storage(t) for t in targets if isinstance(t, FakeTensor)}
        out = []
        for entry in list(self._written.values()):
            whole = entry[0]()
            if whole is not None and whole.is_contiguous() and _storage(whole) in storages:
                out.append((whole, entry[1]))
        return out

    def _carry_write(self, view: FakeTensor, values: torch.Tensor,
                     wholes: list[tuple[FakeTensor, torch.Tensor]]) -> None:
        """A write of known ``values`` through ``view`` into the memory of a
        contiguous tensor whose values were known (``qo_indptr[1:] =
        cumsum(lens)`` into ``qo_indptr``) keeps that tensor known: the write
        is made on its host copy too, element for element, where the view
        lies inside it with the same dtype (a view of the memory as another
        dtype reinterprets bits, which the host copy does not: forgotten)."""
        for whole, known in wholes:
            if whole is view or whole.dtype != view.dtype or _storage(whole) != _storage(view):
                continue
            start = view.storage_offset() - whole.storage_offset()
            last = start + sum((n - 1) * st for n, st in zip(view.shape, view.stride()) if n > 0)
            if start < 0 or last >= whole.numel() or view.numel() == 0:
                continue
            with unset_fake_temporarily():
                updated = known.detach().clone().reshape(-1)
                updated.as_strided(view.shape, view.stride(), start).copy_(values.to(updated.dtype))
            self._keep(whole, updated.reshape(whole.shape))

    def _keep(self, fake: FakeTensor, values: torch.Tensor) -> None:
        key = id(fake)
        with unset_fake_temporarily():
            values = values.detach().clone()
        self._written[key] = (weakref.ref(fake, lambda _ref: self._written.pop(key, None)), values)
        self._by_storage.setdefault(_storage(fake), set()).add(key)

    def _forget_written(self, func: Any, args: tuple, kwargs: dict) -> None:
        """What an operator writes to is no longer known, nor is any other
        view of the same memory."""
        if not (self._written or self._ranges) or not func._schema.is_mutable:
            return
        for value in _written_arguments(func, args, kwargs):
            if isinstance(value, FakeTensor):
                storage = _storage(value)
                for key in self._by_storage.pop(storage, ()):
                    # A key is a tensor's id, and a storage's address is reused
                    # once it is freed: only a live view of this very storage
                    # is forgotten, never another tensor that took a dead one's id.
                    for table in (self._written, self._ranges):
                        entry = table.get(key)
                        kept = entry[0]() if entry is not None else None
                        if kept is not None and _storage(kept) == storage:
                            del table[key]

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
        if (func.overloadpacket in _CONSTANT_FACTORIES and not cuda_graph.capturing()
                and any(argument.name == "device" for argument in func._schema.arguments)):
            return self._constant(func, types, args, kwargs)
        computed = self._compute_known(func, types, args, kwargs)
        if computed is not _UNKNOWN:
            return computed
        values = self.written(args[0]) if args else None
        if values is not None and func is _READ_BACK:
            return values.item()
        bounds = self.range_of(args[0]) if func is _READ_BACK else None
        if bounds is not None and bounds[0] == bounds[1]:
            return _as_scalar(bounds[0], args[0].dtype)
        if values is not None and func is _REPEAT and kwargs.get("output_size") is None:
            kwargs = {**kwargs, "output_size": int(values.sum())}
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self._count(out)
        self._remember(func, args, kwargs, out)
        self._bound(func, args, kwargs, out)
        return out
