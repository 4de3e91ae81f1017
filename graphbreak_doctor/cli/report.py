"""`graphbreak-doctor report`: render saved JSON findings as an HTML report."""

from __future__ import annotations

import argparse
from pathlib import Path

from graphbreak_doctor.cli.common import EXIT_OK, UsageError, add_subcommand
from graphbreak_doctor.cli.outputs import AUTO, OutputSet
from graphbreak_doctor.findings import Findings
from graphbreak_doctor.render import FINDINGS

NAME = "report"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, NAME, "render saved JSON findings as an HTML report")
    p.add_argument("findings", metavar="FINDINGS.json", help="findings written by trace --json")
    p.add_argument("--html", metavar="PATH", help="where to write the report (default: reports/<findings name>.html)")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    p.set_defaults(func=run)


def load_findings(path: str) -> Findings:
    """Saved findings, or a one-line UsageError saying why the file is not that."""
    try:
        return Findings.from_json(Path(path).read_text(encoding="utf-8"))
    except (ValueError, TypeError, KeyError, AttributeError) as e:  # not UTF-8/JSON, wrong schema or shape
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"{path}: not graphbreak-doctor findings: {first}") from e


def run(args: argparse.Namespace) -> int:
    findings = load_findings(args.findings)
    name = Path(args.findings).stem
    args.html = args.html or AUTO  # reports/<findings name>.html
    OutputSet.plan(args, (FINDINGS,), [name]).write({name: findings})
    return EXIT_OK
