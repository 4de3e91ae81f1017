"""`graphbreak-doctor trace`: trace targets and explain every graph break."""

from __future__ import annotations

import argparse
import sys

from graphbreak_doctor.cli.common import add_subcommand, run_exit_code
from graphbreak_doctor.cli.outputs import OutputSet, add_output_options
from graphbreak_doctor.cli.targets import (
    add_target_options,
    run_diagnoses,
    selections,
    stem,
)
from graphbreak_doctor.progress import Progress
from graphbreak_doctor.render import FINDINGS, get

NAME = "trace"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, NAME, "trace a target and explain every graph break")
    add_target_options(p)
    add_output_options(p, FINDINGS, default_on=("html",))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    selected = selections(args)
    stems = [stem(s, args) for s in selected]
    outputs = OutputSet.plan(args, (FINDINGS,), stems)
    results = run_diagnoses(args, selected, Progress())
    summary = get("terminal")
    for findings in results:
        sys.stdout.write(summary.render(findings))
    outputs.write(dict(zip(stems, results)))
    return run_exit_code(results)
