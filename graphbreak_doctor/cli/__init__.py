"""Command line: a thin layer over diagnose(), the gate, the fix ladder and the renderers.

One module per command, registered in ``COMMANDS``; each has ``add_parser(sub)``
and sets ``func``. Exit codes are in common.py (and --help, and the README).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import traceback

from graphbreak_doctor import __version__
from graphbreak_doctor.cli import (
    baseline,
    cache,
    check,
    diff,
    fix,
    ingest,
    matrix,
    report,
    trace,
)
from graphbreak_doctor.cli.common import (
    EXIT_CODES_HELP,
    EXIT_CRASH,
    EXIT_NOTHING,
    EXIT_SIGNAL_BASE,
    EXIT_USAGE,
    InternalError,
    NothingToGate,
    Parser,
    UsageError,
    show,
)
from graphbreak_doctor.jobs import Interrupted
from graphbreak_doctor.targets import TargetError
from graphbreak_doctor.text import escape_controls, one_line

COMMANDS = (trace, report, check, baseline, fix, ingest, diff, matrix, cache)


def build_parser() -> Parser:
    import argparse

    parser = Parser(
        prog="graphbreak-doctor",
        description="Tells why torch.compile cannot capture a model layer, and what to change.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"graphbreak-doctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def _fail(message: str, code: int, debug: bool, what: str = "error") -> int:
    if debug:
        show(_traceback_text(), sys.stderr)
    shown = escape_controls(message) if debug else one_line(message)
    show(f"graphbreak-doctor: {what + ': ' if what else ''}{shown}\n", sys.stderr)
    return code


def _traceback_text() -> str:
    """The exception being handled, as ``--debug`` shows it: the frames as
    Python prints them, each exception's message one line (its newlines
    escaped), since a message may quote a file from elsewhere."""
    error = sys.exc_info()[1]
    if error is None:
        return ""
    chunks = traceback.TracebackException.from_exception(error).format()
    return "".join(chunk if chunk.startswith(("Traceback", "  ", "\nDuring", "\nThe above")) else
                   escape_controls(chunk.rstrip("\n")) + "\n" for chunk in chunks)


def _command_line_values(argv: list[str]) -> list[str]:
    """``--sglang-args --enable-torch-compile`` as ``--sglang-args=--enable-torch-compile``:
    an option whose value is a command line takes the next word, whatever it
    starts with (argparse would read a lone "--flag" as an option of its own)."""
    from graphbreak_doctor.targets.registry import PROVIDERS

    flags = {o.flag for p in PROVIDERS for o in p.options if o.command_line}
    out, words = [], iter(argv)
    for word in words:
        if word in flags:
            value = next(words, None)
            out.append(word if value is None else f"{word}={value}")
        else:
            out.append(word)
    return out


@contextlib.contextmanager
def _sigterm_stops():
    """SIGTERM stops any command the way Ctrl-C does (Interrupted: what was
    started is stopped and cleaned up, nothing is written, one line, exit
    143), in the worker pool and outside it (report, ingest, --in-process,
    a matrix environment build)."""
    def stop(signum, _frame):
        raise Interrupted(signum)

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (main() called from a thread): leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    argv = _command_line_values(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        with _sigterm_stops():
            args = build_parser().parse_args(argv)
            if not getattr(args, "func", None):
                names = ", ".join(c.NAME for c in COMMANDS)
                raise UsageError(f"choose a command ({names}); see --help")
            return args.func(args)
    except (UsageError, TargetError) as e:
        return _fail(str(e), EXIT_USAGE, debug)
    except NothingToGate as e:
        return _fail(str(e), EXIT_NOTHING, debug, what="")
    except InternalError as e:
        return _fail(f"internal error: {e}", EXIT_CRASH, debug)
    except OSError as e:
        return _fail(f"{e.strerror or e}: {e.filename or ''}".rstrip(": "), EXIT_USAGE, debug)
    except Interrupted as e:
        said = f"received after {e.after}; stopped" if e.after else "received; stopped, nothing written"
        return _fail(f"{e} {said}", e.exit_code, debug, "interrupted")
    except KeyboardInterrupt:
        return _fail("Ctrl-C; stopped, nothing written", EXIT_SIGNAL_BASE + 2, debug, "interrupted")
    except Exception as e:  # a bug of the doctor's own: one line and exit 3, never a traceback with exit 1
        return _fail(f"internal error: {type(e).__name__}: {e}", EXIT_CRASH, debug)
