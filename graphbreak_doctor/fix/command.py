"""`graphbreak-doctor fix`: the ladder from the command line (registered in cli.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from graphbreak_doctor.fix.ladder import DEFAULT_STEPS, fix
from graphbreak_doctor.fix import report

HELP = ("trace, apply the suggested fix for the first hard failure in-process, re-trace, "
        "and repeat until fullgraph succeeds (the fix ladder)")


def add_parser(sub, add_target_options, positive, epilog: str) -> argparse.ArgumentParser:
    p = sub.add_parser("fix", help=HELP, description=HELP, epilog=epilog,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_options(p)
    p.set_defaults(mode="fullgraph", func=cmd_fix)
    p.add_argument("--steps", type=positive, default=DEFAULT_STEPS,
                   help=f"stop after this many rungs (default {DEFAULT_STEPS})")
    p.add_argument("--json", nargs="?", const="auto", metavar="PATH",
                   help="write JSON findings with the ladder (default path: reports/<target>-<device>-fix.json)")
    return p


def cmd_fix(args: argparse.Namespace) -> int:
    from graphbreak_doctor import cli
    from graphbreak_doctor.render import write_atomic

    if args.mode not in ("fullgraph", "piecewise"):
        raise cli.UsageError(f"fix climbs fullgraph failures: --mode fullgraph or piecewise, not {args.mode}")
    progress = cli.Progress()
    selected = cli.selections(args)
    crashed = False
    for name, build in selected:
        findings = fix(build, mode=args.mode, device=args.device, max_steps=args.steps, progress=progress)
        sys.stdout.write(report.render(findings))
        if args.json:
            stem = f"{name}-{args.device}-fix"
            if args.json == "auto":
                path = cli.REPORTS / f"{stem}.json"
            elif len(selected) > 1:
                path = Path(args.json).with_name(f"{Path(args.json).stem}-{stem}.json")
            else:
                path = Path(args.json)
            write_atomic(path, findings.to_json())
            print(f"JSON findings written to {path}")
        crashed = crashed or findings.fullgraph.crashed
    return cli.EXIT_CRASH if crashed else cli.EXIT_OK
