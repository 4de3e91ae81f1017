"""Run Dynamo over a target in explain and fullgraph mode and keep what it reports.

Explain mode compiles with ``fullgraph=False`` and a recording backend (the
same bookkeeping as ``torch._dynamo.explain``: graphs and ops per graph) while
:class:`GraphBreakListener` hears every break, including those in frames that
produce no graph. Fullgraph mode compiles with ``fullgraph=True``, as SGLang
does, and turns the ``Unsupported`` it raises into the verdict -- or the
capture failure of another Dynamo type (a guard on a data-dependent
expression, a constraint violation): that is a finding too, not a crash
(capture/exceptions.py tells them apart). Dynamo is reset before and after
each run so that one run never leaks into the next.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import re
import sys
import types
import warnings
from typing import Any, Callable

import torch
import torch._dynamo

from graphbreak_doctor.capture import exceptions, held_ops
from graphbreak_doctor.capture.events import (BreakEvent, event_for, frames_from_summary, parse_stack, scrub,
                                              stack_in_message, with_causes)
from graphbreak_doctor.capture.listener import GraphBreakListener
from graphbreak_doctor.capture.result import ModeResult, RawHazard
from graphbreak_doctor.capture.unknown_values import unknown_read, unknown_site
from graphbreak_doctor.emulation import world
from graphbreak_doctor.model import FULLGRAPH_MODES, Frame, GraphInfo
from graphbreak_doctor.frames import actionable_frame
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target, TargetError
from graphbreak_doctor.text import one_line

_HERE = __file__.removesuffix("c")


def _trim_harness(frames: list[Frame]) -> list[Frame]:
    """Drop the frames above (and including) the call into the compiled target."""
    for i in range(len(frames) - 1, -1, -1):
        if frames[i].file == _HERE:
            return frames[i + 1:]
    return frames


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, str):
        return target
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)
    module = getattr(target, "__module__", None)
    if isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return str(target)
    return scrub(f"{module}.{name}" if module and module != "builtins" else name)


@contextlib.contextmanager
def fresh_dynamo():
    """Reset Dynamo (caches, duplicate-break and warn-once memory) around a run."""
    def reset():
        torch._dynamo.reset()
        utils = torch._dynamo.utils
        getattr(utils, "reset_graph_break_dup_checker", lambda: None)()
        cache = getattr(utils, "warn_once_cache", None)
        if cache is not None:
            cache.clear()

    reset()
    try:
        yield
    finally:
        reset()


# Libraries whose log handlers would print the target's errors and JIT chatter
# ("Building JIT module ...") while it is traced.
_NOISY = ("torch", "flashinfer")


@contextlib.contextmanager
def quiet_torch_logs():
    """torch/_logging attaches a stderr handler to each of torch's module
    loggers; it would print the target's fake-tensor and Dynamo errors. The
    findings carry what matters. GRAPHBREAK_DOCTOR_TORCH_LOGS=1 keeps them."""
    if os.environ.get("GRAPHBREAK_DOCTOR_TORCH_LOGS") == "1":
        yield
        return
    loggers = [lg for name, lg in logging.root.manager.loggerDict.items() if name.split(".", 1)[0] in _NOISY]
    # flashinfer/jit/core.py builds its JIT logger directly (FlashInferJITLogger,
    # with a stderr and a file handler), so it is not in the logging registry.
    loggers += [getattr(m, "logger", None) for name, m in list(sys.modules.items()) if name.split(".", 1)[0] in _NOISY]
    with UndoLog() as log:
        for logger in {id(lg): lg for lg in loggers if isinstance(lg, logging.Logger)}.values():
            if logger.handlers and not any(isinstance(h, GraphBreakListener) for h in logger.handlers):
                log.configure_logger(logger, handlers=[logging.NullHandler()])
        yield


_BREAK_WARNING = re.compile(r"^Dynamo does not know how to trace the builtin")
_WARN_AT = re.compile(r"at '(?P<file>[^']+):(?P<line>\d+)'")


def _hazards(caught: list[warnings.WarningMessage]) -> list[RawHazard]:
    """Dynamo's warnings that are not the companion text of a break."""
    out = []
    for w in caught:
        text = str(w.message)
        if "torch/_dynamo" not in w.filename.replace("\\", "/") or _BREAK_WARNING.match(text):
            continue
        kind = "lru_cache" if "lru_cache" in text else w.category.__name__
        # The lru_cache warning ends with "This call originates from:" and the
        # frame in traceback form (torch/_dynamo/variables/functions.py).
        frames = parse_stack(text)
        file, line = (frames[-1].file, frames[-1].line) if frames else ("", 0)
        if not file and (m := _WARN_AT.search(text)):
            file, line = m.group("file"), int(m.group("line"))
        out.append(RawHazard(kind, scrub(text.split("\n\n", 1)[0]), file, line))
    return out


def _backend(result: ModeResult, split_ops: tuple[str, ...],
             splitter: Callable[[torch.fx.GraphModule], tuple[int, list[str]]] | None = None,
             graph_ops: held_ops.GraphOps | None = None) -> Callable:
    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]):
        ops = [_op_name(n) for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
        info = GraphInfo(index=len(result.graphs), mode=result.mode, ops=len(ops), op_names=ops,
                         decompiled=gm.code.strip(), registered_ops=_registered_ops(gm), collectives=_collectives(gm))
        if split_ops and splitter is not None:  # the framework's own split
            info.pieces, cut = splitter(gm)
            result.cut_at.extend(cut)
        elif split_ops:
            info.pieces = _piece_count(gm, split_ops)
        result.graphs.append(info)
        return graph_ops.wrap(gm.forward) if graph_ops is not None else gm.forward

    return backend


def _op_schema_name(target: Any) -> str:
    """'ns::op' of a registered op node target (OpOverload / packet)."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name
    return getattr(target, "_qualified_op_name", "") or ""


# Namespaces of torch's own operators: not library code behind an op.
_TORCH_NAMESPACES = ("aten", "prims", "_c10d_functional", "c10d_functional")


def _collectives(gm: torch.fx.GraphModule) -> list[str]:
    """'ns::name' of each collective the graph calls, in order (emulation/world.py decides)."""
    out = []
    for node in gm.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
            continue
        op = target.default if isinstance(target, torch._ops.OpOverloadPacket) and hasattr(target, "default") else target
        if isinstance(op, torch._ops.OpOverload) and world.is_collective(op):
            out.append(world.op_name(op))
    return out


def _registered_ops(gm: torch.fx.GraphModule) -> list[str]:
    names = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
            name = _op_schema_name(node.target)
            if name and name.split("::", 1)[0] not in _TORCH_NAMESPACES and name not in names:
                names.append(name)
    return names


def _piece_count(gm: torch.fx.GraphModule, split_ops: tuple[str, ...]) -> int:
    """How many pieces SGLang's piecewise runner would cut this graph into:
    each split op is a piece of its own, and so is each run of ops between them
    (sglang/srt/compilation/backend.py splits with torch.fx split_module)."""
    pieces, run = 0, 0
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module"):
            continue
        if _op_schema_name(node.target) in split_ops:
            pieces += (1 if run else 0) + 1
            run = 0
        else:
            run += 1
    return pieces + (1 if run else 0)


class _Renumber:
    """Dynamo numbers generated names with process-wide counters
    (``__compiled_fn_110``, ``__resume_at_38_111``, ``__temp_417``; compiled
    graphs also get a uuid4 suffix, torch/_dynamo/output_graph.py). Renumber
    them by first appearance within one run so the same trace gives the same
    text, in a fresh process or after other traces."""

    _NAME = re.compile(r"\b(__compiled_fn|__resume_at_\d+|__temp)_(\d+)(?:_[0-9a-f]{8}(?:_[0-9a-f]{4}){3}_[0-9a-f]{12})?")

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, int]] = {}

    def __call__(self, text: str) -> str:
        def sub(m: re.Match) -> str:
            numbers = self.seen.setdefault(m.group(1), {})
            return f"{m.group(1)}_{numbers.setdefault(m.group(2), len(numbers))}"

        return self._NAME.sub(sub, text)


def _bytecode_hook(result: ModeResult):
    renumber = _Renumber()

    def hook(code, new_code):
        try:
            import depyf

            source = depyf.decompile(new_code)
        except Exception as e:  # depyf cannot decompile every bytecode
            source = f"# depyf could not decompile this code: {type(e).__name__}: {e}"
        name = f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
        result.resume_code.append((renumber(name), renumber(scrub(source))))
        return None

    return hook


def _call(fn: Callable, args: tuple, kwargs: dict) -> Any:
    # This frame marks the boundary between the doctor and the target: user
    # stacks are trimmed here (see _trim_harness).
    return fn(*args, **kwargs)


def _check_eager(target: Target) -> None:
    """A TargetError where the target raises without torch.compile too --
    unless the eager call stops where it reads a device value the emulated
    GPU does not know (unknown_values.py): that is no error of the
    target's."""
    try:
        _call(target.fn, target.args, target.kwargs)
    except Exception as e:
        if unknown_read(e):
            return
        raise TargetError(f"the target raises without torch.compile: {type(e).__name__}: {one_line(str(e))}") from e


def trace(target: Target, mode: str, *, decompile: bool = True, on_event: Callable[[BreakEvent], None] | None = None,
        dynamic: bool | None = None, count_ops: bool = False,
        on_output: Callable[[Any], None] | None = None) -> ModeResult:
    """Trace ``target`` once in ``mode`` ('explain', 'fullgraph' or 'piecewise');
    ``dynamic`` is torch.compile's option of that name (a region's own).
    ``count_ops`` (explain mode): also count the operators the graphs hold
    (ModeResult.ops_held, ops_total; capture/held_ops.py), and hand what that
    counting call returned to ``on_output``."""
    result = ModeResult(mode=mode)
    fullgraph = mode in FULLGRAPH_MODES
    graph_ops = held_ops.GraphOps() if count_ops and not fullgraph else None
    split_ops = target.split_ops if mode == "piecewise" else ()
    listener = GraphBreakListener(mode, _trim_harness, on_event)
    with contextlib.ExitStack() as stack:
        if decompile:
            stack.enter_context(UndoLog()).bytecode_hook(_bytecode_hook(result))
        stack.enter_context(fresh_dynamo())
        stack.enter_context(quiet_torch_logs())
        if fullgraph:
            # Dynamo strips the traceback of the error it raises unless verbose;
            # the traceback's frames hold the object Dynamo refused
            # (docs/design.md, "What Dynamo's exception objects hold").
            stack.enter_context(UndoLog()).set_option(torch._dynamo.config, "verbose", True)
        caught = stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("always")
        compiled = None
        try:
            with listener:
                # Inside the try: torch.compile reads the callable's attributes
                # (functools.update_wrapper), which a target may make raise.
                backend = _backend(result, split_ops, target.splitter, graph_ops)
                compiled = torch.compile(target.fn, fullgraph=fullgraph, backend=backend,
                                         dynamic=dynamic)
                _call(compiled, target.args, target.kwargs)
            result.ok = True
        except Exception as e:
            kind = exceptions.failure_kind(e)
            if kind == exceptions.CAPTURE or (fullgraph and kind == exceptions.BREAK):
                result.ok = False
                result.events.extend(with_causes(_failure_event(mode, e, target.fn)))
                result.error = result.events[0].gb_type
            elif fullgraph and len(result.graphs) == 1 and unknown_read(e):
                # Dynamo captured the whole target; running the graph read a
                # value only a real GPU computes. The verdict is Dynamo's.
                result.ok = True
                result.note = (f"the captured graph's run stopped where it read a device value the emulated GPU "
                               f"does not know ({unknown_read(e, located=False)}): the verdict is Dynamo's capture")
            else:
                _check_eager(target)
                result.ok, result.crashed = False, True
                unknown = unknown_read(e)
                result.error = (f"the traced code read a device value the emulated GPU does not know ({unknown}): "
                                "what runs after it is not traced here" if unknown else
                                scrub(f"{type(e).__name__}: {one_line(str(e))}".rstrip(": ")))
                result.crash_site = (unknown_site(e) if unknown else None) or _crash_site(e)
        if graph_ops is not None and result.ok:
            # After the listener: a recompile on the counting call would
            # report its breaks a second time.
            _count_ops(result, target, compiled, graph_ops, on_output)
    if not fullgraph:
        # In fullgraph modes the verdict comes from the exception itself.
        result.events[:0] = listener.events
        result.unparsed = listener.unparsed
    result.hazards = _hazards(caught)
    return result


def _count_ops(result: ModeResult, target: Target, compiled: Callable, graph_ops: held_ops.GraphOps,
               on_output: Callable[[Any], None] | None) -> None:
    """The graphs' share of the target's operators, on a second call (the
    graphs compiled by the first are reused) and a plain call."""
    try:
        with graph_ops.counting(), contextlib.redirect_stdout(sys.stderr):
            output = _call(compiled, target.args, target.kwargs)
        result.ops_held = graph_ops.n
        if on_output is not None:
            on_output(output)
        result.ops_total = held_ops.eager_ops(target.fn, target.args, target.kwargs)
    except Exception as e:
        result.ops_held = result.ops_total = None
        result.ops_error = scrub(f"{type(e).__name__}: {one_line(str(e))}".rstrip(": "))


def _failure_event(mode: str, e: Exception, fn: Any = None) -> BreakEvent:
    """The event for the error that stopped a trace: a break under fullgraph,
    or a capture failure in any mode. A failure Dynamo raises before it
    traces a line of the target (``Attempt to trace generator``: the target
    is a generator function) names no frame: its site is where the target
    is defined, never ``<unknown>:0``."""
    frames = exceptions.user_frames(e)
    stack = _trim_harness(frames_from_summary(frames)) if frames else _trim_harness(stack_in_message(e))
    from_message = bool(stack) and not frames
    if not stack and fn is not None:
        defined = _definition_frame(fn)
        stack = [defined] if defined is not None else []
    event = event_for(mode, e, getattr(e, "msg", None) or str(e), stack, stack[-1] if stack else None)
    if from_message:
        event.fallbacks.append("stack")
    return event


def _definition_frame(fn: Any) -> Frame | None:
    """The first line of the function ``fn`` runs (a function, a bound method,
    a module's forward, an object's __call__), as a frame; None if it has no
    Python code."""
    from graphbreak_doctor.frames import make_frame

    try:
        for candidate in (fn, getattr(fn, "forward", None), getattr(type(fn), "__call__", None)):
            code = getattr(inspect.unwrap(candidate), "__code__", None) if candidate is not None else None
            if isinstance(code, types.CodeType):
                return make_frame(code.co_filename, code.co_firstlineno, code.co_name)
    except Exception:  # a hostile attribute: no site rather than no diagnosis
        return None
    return None


def _crash_site(e: BaseException) -> Frame | None:
    """The innermost user frame of a crash: Dynamo's record of the frames it
    traced, else the traceback's frames below the call into the target."""
    frames = exceptions.user_frames(e)
    if frames:
        stack = _trim_harness(frames_from_summary(frames))
        return stack[-1] if stack else None
    raised = frames_from_summary(exceptions.traceback_frames(e))
    below = _trim_harness(raised)
    return actionable_frame(below) if len(below) < len(raised) else None
