"""`graphbreak-doctor cache clear`: remove the findings cache (docs/cache.md)."""

from __future__ import annotations

import argparse

from graphbreak_doctor.cli.common import EXIT_OK, UsageError, add_subcommand, show

NAME = "cache"

HELP = """The findings cache keeps each traced job's findings with what the trace
read (source files, data files, folder listings, versions, environment);
trace, check and fix read them back while none of it changed (--no-cache
traces anyway). It lives in findings/ of the doctor's cache folder
($GRAPHBREAK_DOCTOR_CACHE, else graphbreak-doctor under $XDG_CACHE_HOME or
~/.cache); GRAPHBREAK_DOCTOR_NO_CACHE=1 turns it off. clear removes only
the doctor's own entries, never through a symbolic link.

"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, NAME, "manage the findings cache (clear: remove every cached finding)", epilog=HELP)
    p.add_argument("action", metavar="ACTION", nargs="?", choices=("clear",),
                   help="clear: remove every entry of the findings cache and say how many there were")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from graphbreak_doctor.jobs import findings_cache

    if args.action is None:
        raise UsageError("choose what to do with the findings cache: cache clear")
    from graphbreak_doctor.jobs.cache_trust import Untrusted

    try:
        removed = findings_cache.clear()
    except Untrusted as e:  # findings/ is a link or not a folder: nothing removed
        raise UsageError(f"cache clear: {e}") from e
    show(f"findings cache: removed {removed} entr{'y' if removed == 1 else 'ies'} from {findings_cache.folder()}\n")
    return EXIT_OK
