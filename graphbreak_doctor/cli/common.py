"""What every command shares: exit codes, the usage error, the parser class, progress lines."""

from __future__ import annotations

import argparse
import sys

EXIT_OK, EXIT_GATE, EXIT_USAGE, EXIT_CRASH = 0, 1, 2, 3

EXIT_CODES_HELP = """exit codes:
  0  it ran (trace, report, fix); the gate passed (check)
  1  the gate failed (check)
  2  usage or input error: bad target, option or file (one line on stderr)
  3  the target crashed under Dynamo in a way that is not a graph break, a
     break report could not be parsed (check), or an internal error
"""


class UsageError(Exception):
    """Bad input: reported as one line on stderr, exit code 2."""


class InternalError(Exception):
    """A bug of the doctor's own (a renderer that fails on valid findings):
    one line on stderr, exit code 3."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        raise UsageError(message)


class Progress:
    """Progress lines on stderr when it is a terminal; quiet in CI logs."""

    def __init__(self, enabled: bool | None = None):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled

    def __call__(self, message: str) -> None:
        if self.enabled:
            print(f"graphbreak-doctor: {message}...", file=sys.stderr, flush=True)


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
