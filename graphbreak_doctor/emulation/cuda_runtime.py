"""The CUDA runtime state kernel libraries touch outside their kernels.

A CPU build of torch has the Python half of ``torch.cuda`` but not the C half:
``torch.cuda.init()`` and ``synchronize()`` raise "Torch not compiled with CUDA
enabled", ``torch.cuda.default_generators`` is empty and
``torch.Generator(device="cuda")`` is refused. Kernel libraries call these in
their Python wrappers -- FlashInfer's samplers draw their Philox seed and
offset from the CUDA default generator (``torch.cuda.init()``, then
``default_generators[i].get_state()``). This module gives the emulated GPU
that state:

- ``torch.cuda._lazy_init`` (what ``init`` and every lazy caller run) and
  ``torch.cuda.synchronize`` keep their function objects and get emulated
  bodies (their code is swapped, see ``UndoLog.replace_code``). Dynamo keys
  its rules on the function objects, so it classifies them exactly as the
  originals: in-graph functions; ``synchronize`` becomes the
  ``streams::synchronize_device`` op, which the emulated memory
  (host_memory.py) runs on its fake rule, a no-op.
- ``torch.cuda.default_generators`` holds one emulated CUDA generator and
  ``torch.Generator(device="cuda")`` makes another. A CUDA generator's state is
  Philox's: 16 bytes, the seed and the offset as two int64. The emulated one
  keeps exactly that (a real host tensor), so code that reads it
  (``seed, offset = state.view(torch.int64)``) sees what it sees on a GPU.
  ``torch.Generator`` itself stays the real class; an emulated generator is
  an instance of it, and Dynamo is shown it as a real CUDA generator.

- ``torch.cuda.Stream()`` and ``torch.cuda.Event()`` make an emulated stream
  and event (``CudaStream``, a ``torch.Stream`` on the CUDA device type, and
  ``CudaEvent``). A CPU build refuses to make either: their C base classes
  are placeholders, and a generic ``torch.Stream`` on the CUDA device type
  exists but refuses every call ("not linked with support for cuda
  devices"). On a fake device work never waits, so waiting, recording and
  synchronizing do nothing; a model that builds a side stream (SGLang's
  DeepSeek model overlaps its shared experts on one) builds and runs as on
  a GPU. ``torch.cuda.current_stream()`` (torch_surface.py) answers with one
  too.

Memory statistics (``memory_allocated``, ``memory_stats``, ...) need nothing:
they answer zero while CUDA is not initialized, which ``is_initialized`` keeps
saying. ``mem_get_info``, streams and device switches are in torch_surface.py.

Every emulated entry point that runs is noted (``note(name)``), so the
findings can say which parts of the emulation a trace exercised.
"""

from __future__ import annotations

import itertools
import sys
from typing import Any, Callable

import torch

from graphbreak_doctor.patching import UndoLog

# The names ``note`` receives for the entry points of this module.
INIT = "torch.cuda.init"
SYNCHRONIZE = "torch.cuda.synchronize"
CUDA_GENERATOR = "torch.Generator(device='cuda')"
GENERATOR_STATE = "torch.Generator(cuda) state"
STREAM = "torch.cuda.Stream()"
EVENT = "torch.cuda.Event()"
STREAM_SYNCHRONIZE = "torch.cuda.Stream.synchronize"
EVENT_SYNCHRONIZE = "torch.cuda.Event.synchronize"
# The ones that make the host wait for the device.
HOST_WAITS = (SYNCHRONIZE, STREAM_SYNCHRONIZE, EVENT_SYNCHRONIZE)

_PHILOX_DEFAULT_SEED = 67280421310721  # torch's default_rng_seed_val

_note: Callable[[str], None] = lambda _name: None  # noqa: E731  (set by install)


def noted(name: str) -> None:
    """Called from the swapped bodies below (they run with torch.cuda's
    globals, so they reach this module through ``sys.modules``)."""
    _note(name)


def _lazy_init_body():
    runtime = __import__("graphbreak_doctor.emulation.cuda_runtime", fromlist=["noted"])
    runtime.noted(runtime.INIT)


def _synchronize_body(device=None):
    runtime = __import__("graphbreak_doctor.emulation.cuda_runtime", fromlist=["noted"])
    runtime.noted(runtime.SYNCHRONIZE)


class CudaGenerator(torch._C.Generator):
    """A CUDA (Philox) generator on the emulated GPU: seed and offset.

    Dynamo never traces these methods: it breaks on every stateful method of
    any ``torch._C.Generator`` instance ("torch.Generator method"), this
    subclass's as a real CUDA generator's. It is named as the class it
    stands for, so a finding names a CUDA generator the way it would on a
    GPU (``torch._C.Generator.get_state``)."""

    __module__ = "torch._C"
    __qualname__ = "Generator"

    _device: torch.device
    _seed: int
    _offset: int

    @property
    def device(self) -> torch.device:
        return self._device

    def get_state(self) -> torch.Tensor:
        _note(GENERATOR_STATE)
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():  # host memory, whatever mode is active
            return torch.tensor([self._seed, self._offset], dtype=torch.int64).view(torch.uint8)

    def set_state(self, new_state: torch.Tensor) -> "CudaGenerator":
        _note(GENERATOR_STATE)
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            state = new_state.detach().to("cpu")
            if state.dtype != torch.uint8 or state.numel() != 16:
                raise RuntimeError("RNG state must be a torch.ByteTensor of 16 bytes (Philox seed and offset)")
            self._seed, self._offset = (int(v) for v in state.view(torch.int64))
        return self

    def manual_seed(self, seed: int) -> "CudaGenerator":
        _note(GENERATOR_STATE)
        self._seed, self._offset = int(seed), 0
        return self

    def seed(self) -> int:
        _note(GENERATOR_STATE)
        import random

        self._seed, self._offset = random.getrandbits(63), 0
        return self._seed

    def initial_seed(self) -> int:
        _note(GENERATOR_STATE)
        return self._seed

    def get_offset(self) -> int:
        _note(GENERATOR_STATE)
        return self._offset

    def set_offset(self, offset: int) -> "CudaGenerator":
        _note(GENERATOR_STATE)
        self._offset = int(offset)
        return self

    def graphsafe_get_state(self) -> "CudaGenerator":
        _note(GENERATOR_STATE)
        return self

    def graphsafe_set_state(self, state: "CudaGenerator") -> "CudaGenerator":
        _note(GENERATOR_STATE)
        self._seed, self._offset = state._seed, state._offset
        return self

    def clone_state(self) -> "CudaGenerator":
        _note(GENERATOR_STATE)
        twin = _cuda_generator(self._device)
        twin._seed, twin._offset = self._seed, self._offset
        return twin

    def __repr__(self) -> str:
        return f"<emulated torch.Generator on {self._device}>"


class CudaStream(torch.Stream):
    """A stream on the emulated GPU (see the module doc)."""

    @property
    def cuda_stream(self) -> int:
        """The raw handle: the null stream is 0, as on a GPU; another stream
        answers a made-up, distinct handle (never dereferenced: kernels run dry)."""
        return 0 if self.stream_id == 0 else 0x5000 + self.stream_id

    def wait_stream(self, stream: Any) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None

    def record_event(self, event: Any = None) -> Any:
        return event if event is not None else cuda_event()

    def synchronize(self) -> None:
        _note(STREAM_SYNCHRONIZE)

    def query(self) -> bool:
        return True


class CudaEvent(torch.Event):
    """An event on the emulated GPU: always complete."""

    def record(self, stream: Any = None) -> None:
        return None

    def wait(self, stream: Any = None) -> None:
        return None

    def synchronize(self) -> None:
        _note(EVENT_SYNCHRONIZE)

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event: Any) -> float:
        return 0.0


_stream_ids = itertools.count(1)


class _Current:
    """The stream the host last made current (``torch.cuda.set_stream``,
    a stream context): ``torch.cuda.current_stream()`` answers it."""

    stream_id = 0


def set_current_stream(stream_id: int) -> None:
    _Current.stream_id = int(stream_id)


def current_stream(device_index: int = 0) -> CudaStream:
    return cuda_stream(_Current.stream_id, device_index)


def cuda_stream(stream_id: int | None = None, device_index: int = 0) -> CudaStream:
    """The default stream (``stream_id`` 0) or a new one."""
    number = next(_stream_ids) if stream_id is None else stream_id
    return CudaStream(stream_id=number, device_index=device_index, device_type=1)


def cuda_event() -> CudaEvent:
    return torch.Event.__new__(CudaEvent)


def _cuda_generator(device: Any) -> CudaGenerator:
    # Made without calling the class (whose call the emulation answers).
    index = device if isinstance(device, int) else torch.device(device).index or 0
    generator = torch._C.Generator.__new__(CudaGenerator)
    generator._device = torch.device("cuda", index)
    generator._seed, generator._offset = _PHILOX_DEFAULT_SEED, 0
    return generator


# The emulated node's generators (``install``): torch.cuda.default_generators
# on a CPU build; what torch.cuda.get_rng_state / set_rng_state read and
# write on any build (torch_surface.py).
_generators: tuple = ()


def generator(index: int) -> "CudaGenerator":
    """The emulated default generator of GPU ``index``."""
    return _generators[index]


def install(log: UndoLog, device_count: int, note: Callable[[str], None]) -> None:
    """Install the emulated runtime state; every change is recorded in ``log``."""
    log.setattr(sys.modules[__name__], "_generators", tuple(_cuda_generator(i) for i in range(device_count)))
    if torch.backends.cuda.is_built():  # a CUDA build: the real runtime answers
        return
    log.setattr(sys.modules[__name__], "_note", note)
    log.setattr(_Current, "stream_id", 0)
    log.replace_code(torch.cuda._lazy_init, _lazy_init_body.__code__)
    log.replace_code(torch.cuda.synchronize, _synchronize_body.__code__)
    # A plain tuple, as on a GPU: traced code indexes it without a break.
    log.setattr(torch.cuda, "default_generators", _generators)
    _generator_for_cuda(log)
    _dynamo_sees_a_generator(log)
    _streams_and_events(log)


def _streams_and_events(log: UndoLog) -> None:
    """``torch.cuda.Stream(...)`` and ``torch.cuda.Event(...)`` answer with the
    emulated kinds (instances of other classes, so Python runs no
    ``__init__`` of the placeholder bases)."""

    def new_stream(cls: type, device: Any = None, priority: int = 0, **kwargs: Any) -> CudaStream:
        _note(STREAM)
        return cuda_stream()

    def new_event(cls: type, *args: Any, **kwargs: Any) -> CudaEvent:
        _note(EVENT)
        return cuda_event()

    log.setattr(torch.cuda.Stream, "__new__", staticmethod(new_stream))
    log.setattr(torch.cuda.Event, "__new__", staticmethod(new_event))


def _generator_for_cuda(log: UndoLog) -> None:
    """``torch.Generator(device="cuda")`` makes an emulated generator. The
    class stays what it is (Dynamo reads ``Optional[torch.Generator]`` in a
    traced signature as a constant only for the real class): its metaclass,
    a Python class, answers the call."""
    meta = type(torch._C.Generator)
    call = meta.__call__

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is torch._C.Generator:
            device = kwargs.get("device", args[0] if args else "cpu")
            if torch.device(device).type == "cuda":
                _note(CUDA_GENERATOR)
                return _cuda_generator(device)
        return call(cls, *args, **kwargs)

    log.setattr(meta, "__call__", __call__)


def _dynamo_sees_a_generator(log: UndoLog) -> None:
    """Dynamo wraps an object whose type is exactly ``torch._C.Generator`` as
    a plain object and breaks on each of its stateful methods, which it finds
    on the C class ("torch.Generator method"). A subclass would be taken for
    an opaque script object instead, and its Python methods for code to
    inline. So Dynamo is shown the emulated generator as a real CUDA
    generator: wrapped as a plain object, with the C class's methods."""
    from torch._dynamo import trace_rules
    from torch._dynamo.variables.builder import VariableBuilder
    from torch._dynamo.variables.misc import GetAttrVariable
    from torch._dynamo.variables.user_defined import UserDefinedObjectVariable

    wrap = VariableBuilder._wrap
    base_method = UserDefinedObjectVariable._maybe_get_baseclass_method
    getattr_vt = UserDefinedObjectVariable.var_getattr
    stateful = trace_rules._GENERATOR_METHODS_THAT_GRAPH_BREAK

    def _wrap(self, value: Any):
        if type(value) is CudaGenerator:
            return self.wrap_user_defined(value)
        return wrap(self, value)

    def _maybe_get_baseclass_method(self, name: str) -> Any:
        if type(self.value) is CudaGenerator and name in stateful:
            return getattr(torch._C.Generator, name)
        return base_method(self, name)

    def var_getattr(self, tx: Any, name: str) -> Any:
        if type(self.value) is CudaGenerator and name in stateful:
            return GetAttrVariable(self, name)  # calling it is call_method(name)
        return getattr_vt(self, tx, name)

    log.setattr(VariableBuilder, "_wrap", _wrap)
    log.setattr(UserDefinedObjectVariable, "_maybe_get_baseclass_method", _maybe_get_baseclass_method)
    log.setattr(UserDefinedObjectVariable, "var_getattr", var_getattr)
