"""What the traced code writes -- a library's import notices, its JIT log
lines, torch's C++ warnings -- goes to a log file, not the terminal: the
terminal shows the doctor's summary. File descriptors 1 and 2 point at the
log (so C and C++ writes go there too, and ``sys.stdout``/``sys.stderr``,
which write to them) until the undo log is undone; progress keeps the
terminal (progress.py)."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Callable

from graphbreak_doctor import progress
from graphbreak_doctor.jobs import lifetime
from graphbreak_doctor.patching import UndoLog


def to_log(path: str, log: UndoLog) -> None:
    """Send this process's stdout and stderr to ``path`` (appended) until ``log`` is undone."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    # closefd=False: a worker never undoes this (its interpreter's last words
    # go to the log too), and a stream left open then says nothing at exit.
    terminal = open(saved[1], "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
    finally:
        os.close(target)

    def restore() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        terminal.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)

    log.call_on_undo(restore)
    progress.use_terminal(terminal, log)


def read_log(path: str) -> str:
    """The log's text ("" when nothing was written)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def with_logs(jobs: list, run: Callable[[list], list]) -> list:
    """``run(jobs)`` with each job writing to a log file of its own (in a
    temporary folder this run owns, removed afterwards, or by the next run
    where this one is killed: lifetime.sweep_temp); the outcomes come back
    with what each job's traced code wrote in ``log``."""
    lifetime.sweep_temp()  # what a killed run left goes first
    with lifetime.owned_folder(lifetime.LOGS_PREFIX) as folder:
        jobs = [dataclasses.replace(job, log=os.path.join(folder, f"job-{i}.log")) for i, job in enumerate(jobs)]
        outcomes = run(jobs)
        for outcome, job in zip(outcomes, jobs):
            outcome.log = read_log(job.log)
    return outcomes


def log_sections(outcomes: list) -> str:
    """The outcomes' logs, each under a line naming its job ("" when none wrote anything)."""
    return "".join(f"--- {o.job.describe()}\n{lines(o.log)}" for o in outcomes if o.log)


def lines(text: str) -> str:
    """``text`` ending in a newline."""
    return text if text.endswith("\n") else text + "\n"
