"""What Dynamo's exception objects say, read from the objects themselves.

Dynamo raises ``Unsupported`` for a graph break (``gb_type`` is its registry
name, ``real_stack`` the user frames), ``UserError`` and the symbolic-shapes
errors for code it cannot capture without a break, and other exception types
when it crashes (docs/design.md, "Fullgraph failures that are not
Unsupported"). This module reads, from the objects:

- which of the three a failure is (:func:`failure_kind`), decided on
  Dynamo's own exception types, never on message text;
- the exception types along the chain, for classification (:func:`type_names`);
- the user frames (:func:`user_frames`);
- the Python object Dynamo refused: the variable tracker held by the frame
  that raised (:func:`refused`);
- the earlier break a follow-up was raised from: ``unimplemented(from_exc=...)``
  in the raising frame (:func:`cause_of`).

Each answers None or "" when the object does not say; the caller then falls
back to the message text and counts that it did.
"""

from __future__ import annotations

import inspect
import logging
import sys
import traceback
import types
from typing import Any

BREAK, CAPTURE, CRASH = "break", "capture failure", "crash"

_DYNAMO_DIR = "/torch/_dynamo/"
# The innermost Dynamo frames looked at for the refused object: the raising
# frame's caller chain up to the instruction handler.
_REFUSED_DEPTH = 8
# Locals of Dynamo's frames that hold the variable tracker of the refused
# object: the tracker's own method (self), SETUP_WITH's context manager (ctx),
# a call's callee (fn).
_HOLDERS = ("self", "ctx", "fn")
# Trackers that stand for values, not for a callable or object Dynamo refused.
_VALUE_TRACKERS = frozenset({"TensorVariable", "SymNodeVariable", "ConstantVariable", "GetAttrVariable",
                             "LazyVariableTracker", "ListVariable", "TupleVariable", "ConstDictVariable"})


# Dynamo's exception types that mean "this code cannot be captured as one
# graph" (not a crash), by qualified name, with the name a finding gets for
# them. Names, not the types: a log read back (ingest/) names them in text,
# and the live capture matches a raised type by the names along its MRO.
CAPTURE_FAILURES: dict[str, str] = {
    "torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode": "Guard on a data-dependent expression",
    "torch.fx.experimental.symbolic_shapes.PendingUnbackedSymbolNotFound": "Unbacked symbol not found",
    "torch.fx.experimental.symbolic_shapes.ConstraintViolationError":
        "Dynamic dimension specialized (constraint violation)",
    "torch.utils._sympy.value_ranges.ValueRangeError": "Value ranges conflict (torch._check)",
    "torch._dynamo.exc.UncapturedHigherOrderOpError": "Higher-order op body cannot be captured",
    "torch._dynamo.exc.UserError": "UserError",
}
USER_ERROR = "torch._dynamo.exc.UserError"
# A call of a function torch marks as never to be traced (its
# ``forbid_in_graph`` decorator: mark_dynamic, mark_static_address, ...):
# Dynamo stops with a bare AssertionError in both modes. The failure's type
# names get this name, the decorator's, where the raising frame holds such a
# function (:func:`forbidden`).
FORBIDDEN = "torch._dynamo.decorators.forbid_in_graph"
FORBIDDEN_LABEL = "Attempt to trace forbidden callable"
# Read back from text, the bare AssertionError is this failure only where
# its message is Dynamo's words for it.
FORBIDDEN_TYPE = "AssertionError"
_USER_ERROR_TYPE = "torch._dynamo.exc.UserErrorType."
# Dynamo wraps a symbolic-shapes error in a UserError. A traceback printed
# without the chain (Dynamo re-raises with the user's traceback) shows only
# the UserError; its message still opens with the wrapped error's own words
# (torch/fx/experimental/symbolic_shapes.py), which name the wrapped type.
_WRAPPED_PHRASES = (
    ("Could not guard on data-dependent expression", "torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode"),
    ("Could not extract specialized integer from data-dependent expression",
     "torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode"),
    ("Constraints violated", "torch.fx.experimental.symbolic_shapes.ConstraintViolationError"),
)


def chain(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from, outermost first."""
    out: list[BaseException] = []
    while exc is not None and all(exc is not e for e in out):
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def _qualified(tp: type) -> str:
    return f"{tp.__module__}.{tp.__qualname__}"


def type_names(exc: BaseException | None) -> list[str]:
    """Qualified type names along the chain; a ``UserError`` adds its
    ``UserErrorType`` member ("torch._dynamo.exc.UserErrorType.ANTI_PATTERN")."""
    names: list[str] = []
    for e in chain(exc):
        names.append(_qualified(type(e)))
        error_type = getattr(e, "error_type", None)
        if error_type is not None and hasattr(error_type, "name"):
            names.append(f"{_qualified(type(error_type))}.{error_type.name}")
        if forbidden(e) is not None:
            names.append(FORBIDDEN)
    return names


def failure_kind(exc: BaseException) -> str:
    """BREAK (an ``Unsupported``), CAPTURE (a capture failure of another of
    Dynamo's types) or CRASH (anything else: ``TorchRuntimeError`` from a fake
    kernel that disagrees with its kernel, an internal Dynamo error). The type
    Dynamo raised decides, not what it was raised from."""
    from torch._dynamo.exc import Unsupported

    if isinstance(exc, Unsupported):
        return BREAK
    if _known(type(exc)) or forbidden(exc) is not None:
        return CAPTURE
    return CRASH


def forbidden(exc: BaseException | None) -> Any:
    """The function Dynamo refused because torch forbids it in a graph
    (``_dynamo_forbidden``, set by ``forbid_in_graph``), held by the Dynamo
    frame that raised the AssertionError; None for any other failure."""
    if not isinstance(exc, AssertionError):
        return None
    frames = _dynamo_frames(exc)[:1]
    for value in (frames[0].f_locals.values() if frames else ()):
        try:
            if callable(value) and inspect.getattr_static(value, "_dynamo_forbidden", False) is True:
                return value
        except Exception:  # a hostile object in Dynamo's locals: not the forbidden function
            continue
    return None


def _known(tp: type) -> str:
    """The qualified name in CAPTURE_FAILURES of ``tp`` or its nearest base ("" if none)."""
    return next((_qualified(c) for c in tp.__mro__ if _qualified(c) in CAPTURE_FAILURES), "")


def label(exc: BaseException) -> str:
    """The name of a capture failure: the most specific known type on the
    chain (a UserError names its UserErrorType)."""
    if forbidden(exc) is not None:
        return FORBIDDEN_LABEL
    names = []
    for e in chain(exc):
        names.append(_known(type(e)) or _qualified(type(e)))
        error_type = getattr(e, "error_type", None)
        if error_type is not None and hasattr(error_type, "name"):
            names.append(f"{_USER_ERROR_TYPE}{error_type.name}")
    return label_of(names)


def label_of(names: list[str]) -> str:
    """The name of a capture failure from the qualified type names along its
    chain, outermost first (``type_names``; or :func:`names_in_text`)."""
    if FORBIDDEN in names:
        return FORBIDDEN_LABEL
    for name in reversed(names):
        if CAPTURE_FAILURES.get(name, "UserError") != "UserError":
            return CAPTURE_FAILURES[name]
    member = next((n[len(_USER_ERROR_TYPE):] for n in names if n.startswith(_USER_ERROR_TYPE)), "")
    if member:
        return f"UserError ({member})"
    return "UserError" if USER_ERROR in names else (names[0].rsplit(".", 1)[-1] if names else "")


def names_in_text(name: str, message: str, chained: list[str]) -> list[str]:
    """The qualified type names of a capture failure printed as text: the
    exception's own, the exceptions it was raised from (``chained``,
    outermost first) and, for a UserError printed without its chain, the
    type its message names (:data:`_WRAPPED_PHRASES`)."""
    if name == FORBIDDEN_TYPE and message.startswith(FORBIDDEN_LABEL):
        return [f"builtins.{FORBIDDEN_TYPE}", FORBIDDEN, *chained]
    names = [name, *chained]
    if name == USER_ERROR and len(names) == 1:
        wrapped = next((t for phrase, t in _WRAPPED_PHRASES if phrase in message), "")
        if wrapped:
            names.append(wrapped)
    return names


def gb_type(exc: BaseException | None) -> str:
    """The registry name of an ``Unsupported`` ("" when it has none)."""
    value = getattr(exc, "gb_type", None) or ""
    if not isinstance(value, str):
        value = getattr(value, "__name__", str(value))
    return value.strip()


def user_frames(exc: BaseException | None) -> traceback.StackSummary | None:
    """The user frames Dynamo recorded on the exception (or on one it was
    raised from), innermost last."""
    for e in chain(exc):
        stack = getattr(e, "real_stack", None)
        if stack:
            return stack
        frame = getattr(e, "innermost_user_frame_summary", None)
        if frame is not None:
            return traceback.StackSummary.from_list([frame])
    return None


def traceback_frames(exc: BaseException | None) -> list[traceback.FrameSummary]:
    """The frames of the exception's own traceback, outermost first."""
    if exc is None or exc.__traceback__ is None:
        return []
    return list(traceback.extract_tb(exc.__traceback__))


def in_flight(record: logging.LogRecord) -> BaseException | None:
    """The exception behind a graph-break log record: the record's, the one
    being handled, or -- for the breaks Dynamo logs outside an ``except``
    block (a data-dependent jump) -- the ``exc`` it passed to
    ``log_graph_break``."""
    if record.exc_info and record.exc_info[1] is not None:
        return record.exc_info[1]
    current = sys.exc_info()[1]
    if current is not None:
        return current
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "log_graph_break" and _DYNAMO_DIR in frame.f_code.co_filename.replace("\\", "/"):
            found = frame.f_locals.get("exc")
            return found if isinstance(found, BaseException) else None
        frame = frame.f_back
    return None


def _dynamo_frames(exc: BaseException) -> list[types.FrameType]:
    """The live frames of the traceback inside Dynamo, innermost first."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        if _DYNAMO_DIR in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
            frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames[::-1]


def cause_of(exc: BaseException | None) -> BaseException | None:
    """The earlier break a follow-up was raised from: Dynamo raises a
    follow-up (``graph break in loop``, ...) with ``unimplemented(...,
    from_exc=<the break>)``, so the raising frame holds it. (``from_exc`` may
    also be the error a break wraps -- a fake tensor's exception --, which is
    no earlier break.)"""
    if exc is None:
        return None
    for frame in _dynamo_frames(exc)[:3]:
        if frame.f_code.co_name == "unimplemented":
            found = frame.f_locals.get("from_exc")
            if isinstance(found, BaseException) and failure_kind(found) != CRASH:
                return found
            return None
    return None


def _tracked(vt: Any) -> tuple[str, Any] | None:
    """(tracker kind, the Python object a variable tracker stands for)."""
    unwrap = getattr(vt, "unwrap", None)
    if type(vt).__name__ == "LazyVariableTracker" and callable(unwrap):
        vt = unwrap()  # never realize: that would run Dynamo's builder here
    kind = type(vt).__name__
    if kind in _VALUE_TRACKERS:
        return None
    state = vars(vt)
    if kind == "BuiltinVariable" and "fn" in state:
        return kind, state["fn"]
    for attr in ("value", "fn"):
        if attr in state and state[attr] is not None:
            return kind, state[attr]
    return None


def _name_of(obj: Any, *, instance: bool) -> str:
    target = type(obj) if instance else obj
    bound_to = getattr(target, "__self__", None)
    if bound_to is not None and not isinstance(bound_to, types.ModuleType):
        owner = bound_to if isinstance(bound_to, type) else type(bound_to)
        return f"{_name_of(owner, instance=False)}.{getattr(target, '__name__', '?')}"
    module = getattr(target, "__module__", None) or ""
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or ""
    if not qualname:
        return ""
    return f"{module}.{qualname}" if module else qualname


def refused(exc: BaseException | None) -> str:
    """'module.qualname' of the callable or object Dynamo refused, read from
    the variable tracker in the frames that raised ("_thread.RLock",
    "posix.stat", "tvm_ffi.core.Function.__call__"); "" when they hold none."""
    if exc is None:
        return ""
    method = ""
    for frame in _dynamo_frames(exc)[:_REFUSED_DEPTH]:
        local = frame.f_locals
        if not method and frame.f_code.co_name == "call_method" and isinstance(local.get("name"), str):
            method = local["name"]
        for holder in _HOLDERS:
            found = _tracked(local.get(holder)) if holder in local and _is_tracker(local[holder]) else None
            if found is None:
                continue
            kind, obj = found
            instance = kind in ("UserDefinedObjectVariable", "LoggingLoggerVariable") or not (
                callable(obj) or isinstance(obj, type))
            name = _name_of(obj, instance=instance)
            if not name:
                continue
            return f"{name}.{method}" if method and kind in _METHOD_OWNERS else name
    return ""


# Trackers whose call_method Dynamo refused: the culprit is their method.
_METHOD_OWNERS = frozenset({"UserDefinedObjectVariable", "UserDefinedClassVariable", "LoggingLoggerVariable"})


def _is_tracker(value: Any) -> bool:
    return any(c.__name__ == "VariableTracker" for c in type(value).__mro__)
