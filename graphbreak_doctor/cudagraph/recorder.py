"""What one CUDA-graph capture does on the emulated GPU: its segments, the
eager calls between them, and every operation inside a segment that a real
capture refuses or that replay gets wrong.

The recorder listens to the emulated capture (emulation/cuda_graph.py): a
segment is open from a graph's ``capture_begin`` to its ``capture_end``,
wherever the code under test calls them. A segment that ends and is followed
by another within the same capture is a break point: the call that ended it
is found on the stack (the first frame outside the file that called
``capture_end``) and named by the expression it calls there. Where a
segment ended at the close of its own ``torch.cuda.graph`` block (a
framework that captures each piece of a split forward in a graph of its
own), the break is what ran eagerly before the next segment began, named by
the framework operators it ran (not torch's own), at the frame of the first.
Nothing is listed: a framework's own break points show up as what they are.

Inside a segment, each operator is checked as it runs (a dispatch mode over
the emulated GPU's), by what torch says about it, not by name lists: the
recorder shows each operator, each torch function called (a function mode)
and each CUDA runtime call to the registered detectors (cudagraph/detectors/:
``cudagraph-sync``, a host wait for the device; ``cudagraph-frozen-value``, a
host value frozen into the graph; ``cudagraph-rng``, random numbers from a
generator the graph does not know; a plugin's own), and keeps each hazard
they name with the frame to change.

``.tolist()`` of a host tensor reads its memory without an operator, so a
function mode sees that call. A device value the emulation cannot know (a
fake tensor's) is answered with 1 so the capture can go on; each such answer
is kept (``assumed``) and said in the findings.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import itertools
import linecache
import os
import sys
import types
from typing import Any, Callable, Iterator

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import graphbreak_doctor
from graphbreak_doctor.cudagraph import detectors
from graphbreak_doctor.cudagraph.detectors.reads import READ
from graphbreak_doctor.cudagraph.detectors.detector import FUNCTION, OPERATOR, RUNTIME, UNKNOWN_SIZE, Operation
from graphbreak_doctor.emulation import cuda_graph, cuda_runtime, world
from graphbreak_doctor.frames import actionable_frame, make_frame
from graphbreak_doctor.model.cudagraph import Collective, CudaGraphCapture, CudaGraphHazard, EagerCall
from graphbreak_doctor.model.frame import Frame
from graphbreak_doctor.patching import UndoLog

_TORCH_NAMESPACES = ("aten", "prim", "prims")
# The category of a captured kernel whose memory was never registered with
# the peer ranks before the capture phase ended (analysis/categories/).
UNREGISTERED = "cudagraph-unregistered-buffer"
_DOCTOR = os.path.dirname(os.path.abspath(graphbreak_doctor.__file__)) + os.sep


def _user_stack(frame: types.FrameType | None) -> list[Frame]:
    """The stack outside the doctor, outermost first."""
    out: list[Frame] = []
    while frame is not None:
        name = frame.f_code.co_filename
        if not os.path.abspath(name).startswith(_DOCTOR):
            out.append(make_frame(name, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return out[::-1]


def _called_at(frame: types.FrameType) -> str:
    """The expression a frame calls at its current instruction
    (``self._eager_attention``); its source line where that cannot be read."""
    positions = list(frame.f_code.co_positions())
    index = frame.f_lasti // 2
    start, end, col, end_col = positions[index] if index < len(positions) else (None,) * 4
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    if start is None or end is None or col is None or end_col is None:
        return line
    lines = [linecache.getline(frame.f_code.co_filename, n) for n in range(start, end + 1)]
    if not all(lines):
        return line
    lines[-1] = lines[-1][:end_col]
    lines[0] = lines[0][col:]
    try:
        node = ast.parse("".join(lines).strip(), mode="eval").body
    except SyntaxError:
        return line
    if not isinstance(node, ast.Call):
        return line
    return _qualname(_resolve(node.func, frame)) or ast.unparse(node.func)


def _resolve(node: ast.AST, frame: types.FrameType) -> Any:
    """The object a name or attribute chain names in ``frame``, looked up
    without running code (no properties, no ``__getattr__``); None if unknown."""
    if isinstance(node, ast.Name):
        for scope in (frame.f_locals, frame.f_globals, frame.f_builtins):
            if node.id in scope:
                return scope[node.id]
        return None
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, frame)
        try:
            return inspect.getattr_static(base, node.attr) if base is not None else None
        except AttributeError:
            return None
    return None


def _qualname(obj: Any) -> str:
    """The name of the function a callable wraps ("RadixAttention._eager_attention"); "" if none."""
    for _ in range(8):
        if isinstance(obj, functools.partial):
            obj = obj.func
            continue
        wrapped = vars(obj).get("__wrapped__") if hasattr(obj, "__dict__") else None
        if wrapped is None:
            break
        obj = wrapped
    name = getattr(obj, "__qualname__", None) if isinstance(obj, (types.FunctionType, types.MethodType)) else (
        vars(obj).get("__qualname__") if hasattr(obj, "__dict__") else None)
    return name if isinstance(name, str) else ""


def _capture_end_caller() -> types.FrameType | None:
    """The frame that called the emulated graph's ``capture_end``."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code is not cuda_graph.EmulatedGraph.capture_end.__code__:
        frame = frame.f_back
    return frame.f_back if frame is not None else None


def _break_point(caller: types.FrameType | None) -> tuple[str, Frame | None]:
    """Where the code ended a segment: the first frame outside the file that
    called ``capture_end`` (the capture's own machinery), and what it calls."""
    machinery = caller.f_code.co_filename if caller is not None else ""
    while caller is not None and caller.f_code.co_filename == machinery:
        caller = caller.f_back
    if caller is None:
        return "", None
    return _called_at(caller), make_frame(caller.f_code.co_filename, caller.f_lineno, caller.f_code.co_name)


def _on_stack(frame: types.FrameType) -> bool:
    current = sys._getframe(1)
    while current is not None and current is not frame:
        current = current.f_back
    return current is not None


class Recorder:
    """One capture (one size): the emulated capture's listener, and the
    checks the modes below call."""

    def __init__(self, size: int) -> None:
        self.capture = CudaGraphCapture(size=size)
        self._breaks: dict[tuple, EagerCall] = {}
        self._hazards: dict[tuple, CudaGraphHazard] = {}
        self._collectives: dict[tuple, Collective] = {}
        # Kernels captured here that read memory still to be registered with
        # the peer ranks: hazards unless the library registers it (settle).
        self.owed: dict[int, CudaGraphHazard] = {}
        self._owed_keys = itertools.count()
        self._ended: tuple[str, Frame | None] | None = None
        # Between a segment whose graph block closed and the next one: the
        # framework operators (not torch's own) that ran, and where the first ran.
        self.gap: dict[str, None] | None = None
        self._gap_site: Frame | None = None
        self._block: types.FrameType | None = None  # the frame whose graph block closed
        self.assumed: list[str] = []
        self.via = ""  # the framework operator whose collectives are being watched (_Collectives)

    # -- the emulated capture's listener
    def begin(self, graph: Any) -> None:
        self.capture.segments += 1
        if self.gap is not None:  # a captured callable returned; what ran since is the break
            self._ended = (" + ".join(self.gap) or "(torch operators only)", self._gap_site)
            self.gap, self._gap_site, self._block = None, None, None
        if self._ended is not None:  # the previous segment ended at a break point
            function, site = self._ended
            key = (function, site)
            if key in self._breaks:
                self._breaks[key].count += 1
            else:
                self._breaks[key] = EagerCall(function=function, site=site)
            self._ended = None

    def end(self, graph: Any) -> None:
        caller = _capture_end_caller()
        if caller is not None and caller.f_code is torch.cuda.graph.__exit__.__code__:
            # The graph's block closed: the break is what runs after the
            # frame that held the block is done with its graph.
            self._ended, self.gap, self._gap_site, self._block = None, {}, None, caller.f_back
        else:
            self._ended = _break_point(caller)

    def ran_between(self, func: Any) -> None:
        """An operator that ran with no segment open, after one's block closed
        (not the capture machinery's own, still in the frame that held it)."""
        if self.gap is None or func.namespace in _TORCH_NAMESPACES or func.name() in self.gap:
            return
        if self._block is not None and _on_stack(self._block):
            return
        if not self.gap:
            site = actionable_frame(_user_stack(sys._getframe(2)))
            # Generated code (a split graph's own) is no place to change.
            self._gap_site = site if site is not None and not site.file.startswith("<") else None
        self.gap[func.name()] = None

    # -- the checks
    def ran(self, op: Operation) -> None:
        """``op`` ran: each hazard the detectors find in it, if a segment is open."""
        if not cuda_graph.capturing():
            return
        if op.kind == OPERATOR and world.is_collective(op.func):
            self.collective(op.func, "")
        for category, what in detectors.detect(op):
            self.hazard(category, what)

    def collective(self, func: Any, via: str) -> None:
        """torch.distributed's operator ``func`` (or one a framework declared)
        ran inside a segment, called by the framework's operator ``via`` ("" when
        called directly). Its site: for one a framework declared, the innermost
        frame of the file that defines it (its communicator), else the frame
        that called it (outside the wrapper it is called through); for
        torch's own, the frame to change."""
        if not cuda_graph.capturing():
            return
        self._collective(world.op_name(func), via, world.files_of(func), sys._getframe(2))

    def library_collective(self, name: str) -> None:
        """A stood-in library ran the collective ``name`` (a C call through
        the framework's wrapper), inside the framework operator under way."""
        if cuda_graph.capturing():
            self._collective(name, self.via, ("", ""), sys._getframe(1))

    def _collective(self, name: str, via: str, files: tuple[str, str], frame: types.FrameType | None) -> None:
        stack = _user_stack(frame)
        home, wrapper = (os.path.abspath(f) if f else "" for f in files)
        site = next((f for f in reversed(stack) if home and os.path.abspath(f.file) == home), None)
        if site is None and wrapper:
            stack = [f for f in stack if os.path.abspath(f.file) != wrapper]
        site = site or actionable_frame(stack)
        key = (name, via, site.file if site else "", site.line if site else 0)
        if key in self._collectives:
            self._collectives[key].count += 1
        else:
            self._collectives[key] = Collective(op=name, via=via, site=site, segment=self.capture.segments)

    def hazard(self, category: str, what: str) -> None:
        if cuda_graph.capturing():
            self._keep(self._found(category, what, sys._getframe(1)))

    def _found(self, category: str, what: str, frame: types.FrameType) -> CudaGraphHazard:
        """A hazard of ``category`` at the frame to change above ``frame``, with its stack."""
        stack = _user_stack(frame)
        site = actionable_frame(stack)
        if site is not None:  # what runs below the frame to change is torch's own
            stack = stack[:len(stack) - stack[::-1].index(site)]
        return CudaGraphHazard(category=category, what=what, site=site, stack=stack, segment=self.capture.segments)

    def _keep(self, hazard: CudaGraphHazard) -> bool:
        """Count ``hazard`` with one already kept at its site; True when it is new."""
        site = hazard.site
        key = (hazard.category, site.file if site else "", site.line if site else 0, hazard.what)
        if key in self._hazards:
            self._hazards[key].count += 1
            return False
        self._hazards[key] = hazard
        return True

    def unregistered(self, what: str) -> Callable[[], None]:
        """A kernel captured now reads memory (``what``) to be registered with
        the peer ranks before replay: owed, with the frame that ran it, until
        the call returned is made."""
        key = next(self._owed_keys)
        self.owed[key] = self._found(UNREGISTERED, what, sys._getframe(1))
        return lambda: self.owed.pop(key, None) and None

    def unsettled(self) -> None:
        """What is still owed when the capture phase is over becomes this
        capture's hazards (one per site and what, counted)."""
        for owed in self.owed.values():
            if self._keep(owed):
                self.capture.hazards.append(owed)
        self.owed.clear()

    def assume(self, what: str) -> None:
        if what not in self.assumed:
            self.assumed.append(what)

    def done(self, error: str = "") -> CudaGraphCapture:
        self.capture.breaks = list(self._breaks.values())
        self.capture.hazards = list(self._hazards.values())
        self.capture.collectives = list(self._collectives.values())
        self.capture.error = error
        return self.capture


class _Operators(TorchDispatchMode):
    """Each operator, checked while a segment is open (see the module doc)."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if cuda_graph.capturing():
            self.recorder.ran(Operation(OPERATOR, func, args, kwargs))
        else:
            self.recorder.ran_between(func)
        try:
            # A collective the framework declared with its body runs that
            # body (warm-ups too), as on a GPU: the communicator it reaches is
            # what a segment captures.
            body = world.body_of(func) if world.is_collective(func) else None
            if body is not None:
                watch = _Collectives(self.recorder, world.op_name(func)) if cuda_graph.capturing() else None
                with watch or contextlib.nullcontext():
                    return self._body(func, body, args, kwargs)
            if (cuda_graph.capturing() and func.namespace not in _TORCH_NAMESPACES
                    and not world.is_collective(func)):
                # A framework's own operator: the operators it runs are below
                # this mode; the collectives among them are seen by one of
                # their own.
                with _Collectives(self.recorder, world.op_name(func)):
                    return func(*args, **kwargs)
            return func(*args, **kwargs)
        except DynamicOutputShapeException:
            # Its output size needs the device's values (nonzero, a boolean
            # mask): the emulated GPU cannot answer, and neither can a capture.
            self.recorder.ran(Operation(UNKNOWN_SIZE, func, args, kwargs))
            raise
        except DataDependentOutputException:
            if func is not READ:
                raise
            dtype = args[0].dtype
            value = True if dtype == torch.bool else 1.0 if dtype.is_floating_point else 1
            self.recorder.assume(f"a device value read on the host ({dtype}): {value!r}")
            return value

    def _body(self, func: Any, body: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        try:
            return body(*args, **kwargs)
        except Exception as e:  # the emulated GPU cannot run it: its fake stands in, and the findings say so
            self.recorder.assume(f"{world.op_name(func)}'s own code could not run on the emulated GPU "
                                 f"({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}); "
                                 "its fake ran in its place")
            return func(*args, **kwargs)


class _Collectives(TorchDispatchMode):
    """Inside a framework's operator: the collectives it runs."""

    def __init__(self, recorder: Recorder, via: str) -> None:
        super().__init__()
        self.recorder, self.via = recorder, via

    def __enter__(self):
        self.outer, self.recorder.via = self.recorder.via, self.via
        return super().__enter__()

    def __exit__(self, *exc_info):
        self.recorder.via = self.outer
        return super().__exit__(*exc_info)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if world.is_collective(func):
            self.recorder.collective(func, self.via)
        return func(*args, **(kwargs or {}))


class _Functions(TorchFunctionMode):
    """Each torch function called while a segment is open: ``.tolist()`` and
    ``.numpy()`` read memory without an operator."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if cuda_graph.capturing():
            self.recorder.ran(Operation(FUNCTION, func, args, kwargs))
        return func(*args, **kwargs)


class _Listener:
    """The emulated capture's listener for the whole run: it hands each event
    to the recorder of the capture under way."""

    def __init__(self) -> None:
        self.recorder: Recorder | None = None

    def begin(self, graph: Any) -> None:
        if self.recorder is not None:
            self.recorder.begin(graph)

    def end(self, graph: Any) -> None:
        if self.recorder is not None:
            self.recorder.end(graph)

    def unregistered(self, what: str) -> Callable[[], None]:
        return self.recorder.unregistered(what) if self.recorder is not None else _nothing


def _nothing() -> None:
    return None


class Session:
    """The emulated GPU able to capture CUDA graphs, with a recorder per
    captured size (``recording``)."""

    def __init__(self, log: UndoLog) -> None:
        self._listener = _Listener()
        self.assumed: list[str] = []
        self._recorders: list[Recorder] = []
        cuda_graph.install(log, self._listener)
        noted = cuda_runtime._note

        def note(name: str) -> None:
            noted(name)
            if self._listener.recorder is not None:
                self._listener.recorder.ran(Operation(RUNTIME, name=name))

        log.setattr(cuda_runtime, "_note", note)
        world.listen(log, lambda name: self._listener.recorder.library_collective(name)
                     if self._listener.recorder is not None else None)
        # A torch.compile region inside the captured code runs as its own
        # Python here: its operators are what the recorder checks.
        log.set_option(torch._dynamo.config, "disable", True)

    @contextlib.contextmanager
    def recording(self, size: int) -> Iterator[Recorder]:
        """Record what runs inside (warm-ups and the capture) for ``size``."""
        recorder = Recorder(size)
        self._recorders.append(recorder)
        self._listener.recorder = recorder
        try:
            with _Operators(recorder), _Functions(recorder):
                yield recorder
        finally:
            self._listener.recorder = None
            self.assumed.extend(a for a in recorder.assumed if a not in self.assumed)

    def settle(self) -> None:
        """The capture phases are over: what each capture still owes (memory
        never registered with the peers) is a hazard of that capture."""
        for recorder in self._recorders:
            recorder.unsettled()


__all__ = ["Recorder", "Session"]
