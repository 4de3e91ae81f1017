"""What every command shares: exit codes, the usage error, the parser class."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from graphbreak_doctor.text import escape_controls

EXIT_OK, EXIT_GATE, EXIT_USAGE, EXIT_CRASH, EXIT_TIMEOUT = 0, 1, 2, 3, 4
# The gate checked nothing: the input holds no Dynamo report (an empty log,
# noise, findings of no traced mode). Never a pass.
EXIT_NOTHING = 5
# Interrupted by a signal: 128 + its number (130 for SIGINT / Ctrl-C, 143 for SIGTERM).
EXIT_SIGNAL_BASE = 128

EXIT_CODES_HELP = """exit codes:
  0    it ran (trace, report, fix, cache clear); the gate passed (check): every target was
       traced to the end and every check held
  1    the gate failed (check); the written patch did not hold in a fresh
       process, or nothing could be written (fix --write-patch)
  2    usage or input error: bad target, option or file (one line on stderr)
  3    crashed: the target crashed under Dynamo (not a graph break), or exited,
       aborted, segfaulted, was killed or allocated past --memory; a break
       report could not be parsed (check); or an internal error
  4    timed out (--timeout): the worker was killed
  5    nothing to gate (check --from, diff --fail-on-new, baseline write --from):
       the input holds no Dynamo report, so no check ran (one line on stderr)
  130  interrupted (Ctrl-C / SIGINT; 143 for SIGTERM): nothing written
"""


class UsageError(Exception):
    """Bad input: reported as one line on stderr, exit code 2."""


class NothingToGate(Exception):
    """The gate's input holds no Dynamo report: one line on stderr, exit code 5."""


def show(text: str, stream: TextIO | None = None) -> None:
    """Write terminal text (a summary, a verdict, a note) with every control
    character but the line breaks escaped (text.escape_controls): findings and
    logs come from elsewhere, and their text must not drive the terminal."""
    (stream or sys.stdout).write(escape_controls(text, keep="\n"))


class InternalError(Exception):
    """A bug of the doctor's own (a renderer that fails on valid findings):
    one line on stderr, exit code 3."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        raise UsageError(message)


def run_exit_code(results: list) -> int:
    """EXIT_TIMEOUT if a target timed out, EXIT_CRASH if one crashed (in any
    way), else EXIT_OK; ``results`` are findings."""
    from graphbreak_doctor.model import TIMED_OUT

    if any(f.outcome == TIMED_OUT for f in results):
        return EXIT_TIMEOUT
    return EXIT_CRASH if any(f.fullgraph.crashed for f in results) else EXIT_OK


def int_at_least(minimum: int):
    """argparse type: an integer >= minimum."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    return parse


def names_list(text: str) -> tuple[str, ...]:
    """argparse type: a non-empty comma-separated list."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return names


def add_subcommand(sub: argparse._SubParsersAction, name: str, help: str, *, description: str | None = None,
                   epilog: str = "") -> argparse.ArgumentParser:
    """A subcommand parser with the exit codes in its help."""
    return sub.add_parser(name, help=help, description=description or help, epilog=epilog + EXIT_CODES_HELP,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
