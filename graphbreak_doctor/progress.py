"""Progress lines on stderr, shown when stderr is a terminal; quiet in CI logs.

While the traced code's output goes to a log file (jobs/output.py), stderr is
that file; progress then goes to the terminal the process started with,
which jobs/output.py hands over here."""

from __future__ import annotations

import sys
from typing import TextIO

# The terminal stream while file descriptor 2 points at a log (last one in use).
_TERMINALS: list[TextIO] = []


def terminal() -> TextIO:
    """Where progress and the doctor's own messages go: the process's stderr,
    or the terminal it had before its output went to a log."""
    return _TERMINALS[-1] if _TERMINALS else sys.stderr


def use_terminal(stream: TextIO, log) -> None:
    """Progress goes to ``stream`` until ``log`` (an UndoLog) is undone."""
    _TERMINALS.append(stream)
    log.call_on_undo(lambda: _TERMINALS.remove(stream))


class Progress:
    def __init__(self, enabled: bool | None = None):
        self.enabled = enabled

    def __call__(self, message: str) -> None:
        stream = terminal()
        if self.enabled if self.enabled is not None else stream.isatty():
            print(f"graphbreak-doctor: {message}...", file=stream, flush=True)
