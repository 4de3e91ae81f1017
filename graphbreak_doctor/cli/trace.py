"""`graphbreak-doctor trace`: trace targets and explain every graph break."""

from __future__ import annotations

import argparse

from graphbreak_doctor.cli.common import UsageError, add_subcommand, run_exit_code, show
from graphbreak_doctor.cli.report import load_findings
from graphbreak_doctor.cli.outputs import OutputSet, add_output_options, keep_logs
from graphbreak_doctor.cli.targets import (
    add_cudagraph_option,
    add_sizes_option,
    add_torch_option,
    add_target_options,
    run_diagnoses,
    selections,
    stem,
)
from graphbreak_doctor.model import Findings
from graphbreak_doctor.progress import Progress
from graphbreak_doctor.render import FINDINGS, get

NAME = "trace"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, NAME, "trace a target and explain every graph break")
    add_target_options(p)
    add_sizes_option(p)
    add_cudagraph_option(p)
    add_torch_option(p)
    p.add_argument("--ladder", metavar="FIX.json",
                   help="findings written by `fix --json` for this target: the changes its ladder verified "
                        "become the fixes of the breaks they removed, marked verified")
    add_output_options(p, FINDINGS, default_on=("html",))
    p.set_defaults(func=run)


def _saved_ladder(path: str) -> Findings:
    saved = load_findings(path)
    if not saved.ladder:
        raise UsageError(f"{path}: holds no fix ladder (write one with `graphbreak-doctor fix --json`)")
    return saved


def run(args: argparse.Namespace) -> int:
    selected = selections(args)
    stems = [stem(s, args) for s in selected]
    outputs = OutputSet.plan(args, (FINDINGS,), stems)
    saved = _saved_ladder(args.ladder) if args.ladder else None
    done = run_diagnoses(args, selected, Progress(),
                         saved_ladder=(saved.ladder, f"saved ladder {args.ladder}") if saved is not None else None)
    results = done.findings
    summary = get("terminal")
    for findings in results:
        show(summary.render(findings))
    outputs.write(dict(zip(stems, results)))
    keep_logs(outputs, stems, done.logs)
    return run_exit_code(results)
