"""`graphbreak-doctor report`: render saved JSON findings as an HTML report."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from graphbreak_doctor.cli.common import EXIT_OK, UsageError, add_subcommand
from graphbreak_doctor.cli.outputs import AUTO, OutputSet
from graphbreak_doctor.model import Findings
from graphbreak_doctor.render import FINDINGS

NAME = "report"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, NAME, "render saved JSON findings as an HTML report")
    p.add_argument("findings", metavar="FINDINGS.json", help="findings written by trace --json")
    p.add_argument("--html", metavar="PATH", help="where to write the report (default: reports/<findings name>.html)")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    p.set_defaults(func=run)


def load_findings(path: str) -> Findings:
    """Saved findings -- recognised by parsing the file (plain, gzip or zstd,
    with a UTF-8 byte-order mark or not, keys in any order) -- or a one-line
    UsageError saying why the file is not that."""
    from graphbreak_doctor.ingest.source import IngestError, NotJSON, input_kind, json_document

    if not os.path.lexists(path):
        raise UsageError(f"{path}: No such file or directory")
    try:
        if input_kind(path) != "file":
            raise UsageError(f"{path}: is a folder, not a findings file")
        data = json_document(path, strict=True)
    except IngestError as e:
        raise UsageError(str(e)) from e
    except NotJSON as e:
        raise UsageError(f"{path}: not graphbreak-doctor findings: {e}") from e
    return findings_of(path, data)


def findings_of(path: str, data: Any) -> Findings:
    """Findings from a parsed JSON document, or a one-line UsageError."""
    try:
        return Findings.from_dict(data)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:  # wrong schema or shape
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"{path}: not graphbreak-doctor findings: {first}") from e


def run(args: argparse.Namespace) -> int:
    name = Path(args.findings).stem
    args.html = args.html or AUTO  # reports/<findings name>.html
    # The output is checked before the findings are read (it may not be them).
    outputs = OutputSet.plan(args, (FINDINGS,), [name])
    findings = load_findings(args.findings)
    outputs.write({name: findings})
    return EXIT_OK
