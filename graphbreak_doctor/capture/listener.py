"""Listen to Dynamo's ``graph_breaks`` artifact logs.

``torch._dynamo.explain`` only reports breaks of frames that produce a graph.
Dynamo logs every break it handles on three artifact loggers (docs/design.md,
"Where Dynamo reports breaks"). A handler on them sees each break as it is handled, and --
because the loggers are called inside the ``except`` block that caught the
``Unsupported`` -- ``sys.exc_info()`` holds the exception itself, with its
structured ``gb_type`` and message (capture/exceptions.py reads it).
"""

from __future__ import annotations

import logging
import re
from typing import Callable

import torch._dynamo.utils

from graphbreak_doctor.frames import make_frame
from graphbreak_doctor.capture import exceptions
from graphbreak_doctor.capture.events import BreakEvent, event_for, parse_stack, with_causes
from graphbreak_doctor.model import UnparsedEvent
from graphbreak_doctor.patching import UndoLog

LOGGERS = (
    "torch._dynamo.symbolic_convert.__graph_breaks",
    "torch._dynamo.convert_frame.__graph_breaks",
    "torch._dynamo.exc.__graph_breaks",
)

_AT = re.compile(r"in user code at (?P<file>.+):(?P<line>\d+)\s*$", re.M)
_REASON = re.compile(r"Graph Break Reason: (?P<reason>.*)", re.S)


class GraphBreakListener(logging.Handler):
    """Collects :class:`BreakEvent` objects while installed (a context manager).

    A report it cannot parse is never dropped: it becomes an
    :class:`UnparsedEvent` (``self.unparsed``) that the findings carry."""

    def __init__(self, mode: str, trim: Callable[[list], list], on_event: Callable[[BreakEvent], None] | None = None):
        super().__init__(level=logging.DEBUG)
        self.mode = mode
        self.trim = trim
        self.on_event = on_event
        self.events: list[BreakEvent] = []
        self.unparsed: list[UnparsedEvent] = []
        self._log: UndoLog | None = None

    def __enter__(self) -> GraphBreakListener:
        self._log = UndoLog()
        for name in LOGGERS:
            logger = logging.getLogger(name)
            # Keep Dynamo's own rendering of the breaks off the user's terminal.
            self._log.configure_logger(logger, level=logging.DEBUG, propagate=False,
                                       handlers=[*logger.handlers, self])
        return self

    def __exit__(self, *exc) -> None:
        if self._log is not None:
            self._log.undo()
            self._log = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event = self._event(record)
        except Exception as e:  # never let analysis break Dynamo's own error handling
            self._unparsed(record, f"{type(e).__name__}: {e}")
            return
        if event is None:
            self._unparsed(record, "a repeated break without its location")
        else:
            # A follow-up's cause first: Dynamo may never report it on its own
            # (a break inside a loop skips the whole frame).
            for e in with_causes(event):
                e.seq = len(self.events)
                self.events.append(e)
                if self.on_event is not None:
                    self.on_event(e)
        # Dynamo prints a repeated (gb_type, location) without its user stack
        # (symbolic_convert.py: graph_break_dup_warning_checker). Two different
        # callers reaching the same stdlib line would then be indistinguishable,
        # so forget what was seen: every break comes with its whole stack.
        reset = getattr(torch._dynamo.utils, "reset_graph_break_dup_checker", None)
        if reset is not None:
            reset()

    def _unparsed(self, record: logging.LogRecord, reason: str) -> None:
        try:
            text = record.getMessage()
        except Exception:  # the record's own arguments do not format: show them raw
            text = f"{record.msg} (arguments: {record.args!r})"
        excerpt = "\n".join(text.splitlines()[:6])
        self.unparsed.append(UnparsedEvent(source=f"{self.mode} mode, logger {record.name}", reason=reason,
                                           excerpt=excerpt))

    def _event(self, record: logging.LogRecord) -> BreakEvent | None:
        text = record.getMessage()
        exc = exceptions.in_flight(record)
        m = _REASON.search(text)
        reason = m.group("reason") if m else text
        if "user stack suppressed due to duplicate graph break" in text:
            m = _AT.search(text)
            if m is None:
                return None
            site = make_frame(m.group("file"), int(m.group("line")), "")
            return event_for(self.mode, exc, reason, [], site, duplicate=True)
        skipped = text.startswith("Graph break: torch.compile cannot properly resume")
        stack = self.trim(parse_stack(text.split("User code traceback:", 1)[-1] if not skipped else text))
        return event_for(self.mode, exc, reason, stack, stack[-1] if stack else None)
