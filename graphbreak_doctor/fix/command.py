"""`graphbreak-doctor fix`: the ladder from the command line (registered in cli.py)."""

from __future__ import annotations

import argparse
import sys

from graphbreak_doctor.fix.ladder import DEFAULT_STEPS, fix
from graphbreak_doctor.fix import report

HELP = ("trace, apply the suggested fix for the first hard failure in-process, re-trace, "
        "and repeat until fullgraph succeeds (the fix ladder)")


def add_parser(sub, add_target_options, positive, epilog: str) -> argparse.ArgumentParser:
    p = sub.add_parser("fix", help=HELP, description=HELP, epilog=epilog,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_options(p, default_mode="fullgraph")
    p.set_defaults(func=cmd_fix)
    p.add_argument("--steps", type=positive, default=DEFAULT_STEPS,
                   help=f"stop after this many rungs (default {DEFAULT_STEPS})")
    from graphbreak_doctor import cli

    cli.add_output_options(p, "fix")
    return p


def cmd_fix(args: argparse.Namespace) -> int:
    from graphbreak_doctor import cli
    if args.mode not in ("fullgraph", "piecewise"):
        raise cli.UsageError(f"fix climbs fullgraph failures: --mode fullgraph or piecewise, not {args.mode}")
    progress = cli.Progress()
    selected = cli.selections(args)
    crashed = False
    # Every ladder first, then the files: a bad second target writes nothing.
    results = [(name, fix(build, mode=args.mode, device=args.device, max_steps=args.steps, progress=progress))
               for name, build in selected]
    for name, findings in results:
        sys.stdout.write(report.render(findings))
        cli.write_outputs(args, f"{name}-{args.device}-fix", findings, len(results))
        crashed = crashed or findings.fullgraph.crashed
    return cli.EXIT_CRASH if crashed else cli.EXIT_OK
