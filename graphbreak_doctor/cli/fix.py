"""`graphbreak-doctor fix`: the fix ladder from the command line."""

from __future__ import annotations

import argparse
import signal
import sys

from graphbreak_doctor.cli import patch
from graphbreak_doctor.cli.common import (
    EXIT_GATE,
    UsageError,
    add_subcommand,
    int_at_least,
    run_exit_code,
    show,
)
from graphbreak_doctor.cli.outputs import OutputSet, add_output_options, keep_logs
from graphbreak_doctor.cli.targets import (
    add_target_options,
    run_fixes,
    selections,
    stem,
)
from graphbreak_doctor.jobs import Interrupted
from graphbreak_doctor.model import DEFAULT_FIX_STEPS as DEFAULT_STEPS
from graphbreak_doctor.model import FULLGRAPH_MODES
from graphbreak_doctor.progress import Progress
from graphbreak_doctor.render import FINDINGS, get
from graphbreak_doctor.text import escape_controls

NAME = "fix"
HELP = ("trace, apply the suggested fix for the first hard failure in-process, re-trace, "
        "and repeat until fullgraph succeeds (the fix ladder)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, NAME, HELP)
    add_target_options(p, default_mode="fullgraph")
    p.add_argument("--steps", type=int_at_least(1), default=DEFAULT_STEPS,
                   help=f"stop after this many rungs (default {DEFAULT_STEPS})")
    patch.add_options(p)
    add_output_options(p, FINDINGS, default_on=("html",), what="fix")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.mode not in FULLGRAPH_MODES:
        raise UsageError(f"fix climbs fullgraph failures: --mode fullgraph or piecewise, not {args.mode}")
    selected = selections(args)
    patch.check_options(args, selected)
    stems = [stem(s, args, "fix") for s in selected]
    outputs = OutputSet.plan(args, (FINDINGS,), stems)
    patch.check_outputs(args, [p.path for p in outputs.planned] + [log for log in outputs.logs.values() if log])
    progress = Progress()
    # Every ladder first, then the files: a bad second target writes nothing.
    done = run_fixes(args, selected, progress)
    not_held, staged, warning = "", None, ""
    try:
        try:
            if args.write_patch and done.findings[0].fix is not None:
                staged, not_held, checked = patch.write_and_check(args, selected[0], done.findings[0], stems[0],
                                                                  progress)
                done.logs[0] += checked
            ladder = get("ladder")
            for findings in done.findings:
                show(ladder.render(findings))
            outputs.write(dict(zip(stems, done.findings)))
            # The patch folder last: a failure or a signal before leaves DIR as
            # it was. Only a patch its fresh-process check proved moves in.
            if staged is not None and staged.written is not None and staged.written.verified:
                failed, warning = patch.commit(args, staged)
                not_held = failed or not_held
        finally:
            if staged is not None:
                staged.discard()  # nothing once committed
        if warning:
            sys.stderr.write(escape_controls(f"graphbreak-doctor: warning: {warning}") + "\n")
        keep_logs(outputs, stems, done.logs)
    except (Interrupted, KeyboardInterrupt) as e:
        if staged is None or not staged.committed:
            raise
        # Once moved into place the patch is kept: the line says so, and where.
        signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
        raise Interrupted(signum, after=_kept(args)) from None
    code = run_exit_code(done.findings)
    if not_held:
        sys.stderr.write(escape_controls(f"graphbreak-doctor: {not_held}") + "\n")
        return code or EXIT_GATE
    return code


def _kept(args: argparse.Namespace) -> str:
    """The patch a signal came after, in DIR: what the interrupted line says."""
    return f"the patch was written and verified: {args.write_patch} (kept)"
