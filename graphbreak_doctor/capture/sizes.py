"""The target compiled once and called at each of the server's sizes, in one
Dynamo session (``trace --sizes``, ``check --sizes``).

A server compiles its forward once and calls it at every batch size it
serves; Dynamo compiles again whenever a call fails the guards of every
graph it has (a dimension it specialised on, a rank it has not seen), and
after ``recompile_limit`` compiles of one frame (8 by default) it stops:
under ``fullgraph=True`` the call raises ``FailOnRecompileLimitHit`` (the
server's start-up or the first request at that size fails), without it the
frame runs eagerly from then on, uncompiled. Here the first size's target is
compiled with ``fullgraph=False`` and the eager backend, then called with
each size's inputs in order; per call, Dynamo's own compile records
(``torch._dynamo.utils.get_compilation_metrics``: one per compile of a
frame, with the guard failure that made it) and its warning when it hits
the limit are kept.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch

from graphbreak_doctor.capture.regions import describe_args
from graphbreak_doctor.capture.trace import fresh_dynamo, quiet_torch_logs
from graphbreak_doctor.model.sizes import SizedCall, SizedRun
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target
from graphbreak_doctor.text import one_line

# The logger of Dynamo's warning when a frame hits its recompile limit.
_LIMIT_LOGGER = "torch._dynamo.convert_frame"


class _LimitWarnings(logging.Handler):
    """Hears Dynamo's "torch._dynamo hit config.recompile_limit (8)" warning."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.heard: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, str) and record.msg.startswith("torch._dynamo hit config."):
            try:
                self.heard.append(record.getMessage())
            except Exception as e:  # a message that cannot be formatted is still a limit hit
                self.heard.append(f"{record.msg} ({type(e).__name__})")


def _metrics() -> list[Any]:
    from torch._dynamo.utils import get_compilation_metrics

    return list(get_compilation_metrics())


def run(sized: list[tuple[str, Target]]) -> SizedRun:
    """Call the first target's function, compiled once, with each size's
    arguments in order (``sized``: (the size as given, the target built at
    it))."""
    first = sized[0][1]
    limit = int(getattr(torch._dynamo.config, "recompile_limit", 0) or
                getattr(torch._dynamo.config, "cache_size_limit", 0))
    out = SizedRun(sizes=[label for label, _t in sized], recompile_limit=limit)
    heard = _LimitWarnings()
    with contextlib.ExitStack() as stack:
        stack.enter_context(fresh_dynamo())
        stack.enter_context(quiet_torch_logs())
        logger = logging.getLogger(_LIMIT_LOGGER)
        stack.enter_context(UndoLog()).configure_logger(logger, handlers=[*logger.handlers, heard])
        compiled = torch.compile(first.fn, fullgraph=False, backend="eager")
        for label, target in sized:
            before, warned = len(_metrics()), len(heard.heard)
            call = SizedCall(size=label, shapes=describe_args(target.args, target.kwargs))
            try:
                compiled(*target.args, **target.kwargs)
            except Exception as e:
                call.error = one_line(f"{type(e).__name__}: {e}", 300)
            new = _metrics()[before:]
            call.limit_hit = len(heard.heard) > warned
            call.compiles = sum(1 for m in new if getattr(m, "co_name", None) and not getattr(m, "fail_type", None))
            call.reasons = [f"{m.co_name or _frame_of(heard.heard[-1])}: {' '.join(str(m.recompile_reason).split())}"
                            for m in new if getattr(m, "recompile_reason", None)
                            and not str(getattr(m, "co_name", "") or "").startswith("torch_dynamo_resume_in")]
            out.calls.append(call)
    return out


def _frame_of(warning: str) -> str:
    """The function Dynamo's limit warning names ("function: 'layer' (...)")."""
    for line in warning.splitlines():
        line = line.strip()
        if line.startswith("function: '"):
            return line[len("function: '"):].split("'", 1)[0]
    return "?"
