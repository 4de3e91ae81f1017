"""`graphbreak-doctor check`: the CI gate, over the same target selection and
diagnosis as `trace`."""

from __future__ import annotations

import argparse
import os

from graphbreak_doctor.analysis.categories import CATEGORIES
from graphbreak_doctor.cli.common import (
    EXIT_CRASH,
    EXIT_GATE,
    EXIT_OK,
    NothingToGate,
    UsageError,
    add_subcommand,
    int_at_least,
    names_list,
    run_exit_code,
    show,
)
from graphbreak_doctor.cli.ingest import add_from_option, check_from_options, nothing_to_gate, read_run
from graphbreak_doctor.cli.outputs import OutputSet, add_output_options, keep_logs
from graphbreak_doctor.cli.targets import (
    add_cudagraph_option,
    add_sizes_option,
    add_target_options,
    run_diagnoses,
    selections,
    stem,
)
from graphbreak_doctor.model import FULLGRAPH_MODES, GateReport, modes_for
from graphbreak_doctor.gate import baseline as baselines
from graphbreak_doctor.gate.policy import Policy, evaluate
from graphbreak_doctor.progress import Progress
from graphbreak_doctor.render import FINDINGS, GATE, get

NAME = "check"

HELP = """With no criterion, the gate is --max-breaks 0 (no graph break at all).
Criteria are independent; each applies to the breaks that count (package
filters) in each traced mode, and each target x mode is one JUnit testcase.
Baseline entries match on category + package + actionable function + gb_type,
never on line numbers.

"""


def _categories(text: str) -> tuple[str, ...]:
    names = names_list(text)
    unknown = [n for n in names if n not in CATEGORIES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} (choose from {', '.join(CATEGORIES)})"
        )
    return names


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, NAME, "the CI gate: trace targets and fail on graph breaks (exit 1)",
                       description="Trace the selected targets and check their graph breaks against budgets "
                                   "and a baseline.", epilog=HELP)
    add_target_options(p)
    add_sizes_option(p)
    add_cudagraph_option(p)
    gate = p.add_argument_group("checks")
    gate.add_argument("--require-fullgraph", action="store_true",
                      help="fail when torch.compile(fullgraph=True) cannot capture the target (needs a fullgraph mode)")
    gate.add_argument("--max-breaks", type=int_at_least(0), metavar="N",
                      help="fail on more than N distinct breaks per mode")
    gate.add_argument("--fail-on", type=_categories, metavar="CAT[,CAT]",
                      help=f"fail on any break of these categories ({', '.join(CATEGORIES)})")
    which = gate.add_mutually_exclusive_group()
    which.add_argument("--only-packages", type=names_list, default=(), metavar="PKG[,PKG]",
                       help="count only breaks whose actionable frame is in these packages")
    which.add_argument("--ignore-packages", type=names_list, default=(), metavar="PKG[,PKG]",
                       help="do not count breaks whose actionable frame is in these packages")
    gate.add_argument("--baseline", metavar="FILE",
                      help="fail only on breaks missing from this baseline; report the ones that disappeared")
    add_from_option(p)
    add_output_options(p, FINDINGS, GATE)
    p.set_defaults(func=run)


def _baseline(args: argparse.Namespace) -> baselines.Baseline | None:
    if not args.baseline:
        return None
    try:
        loaded = baselines.load(args.baseline)
    except baselines.BaselineError as e:
        raise UsageError(str(e)) from e
    # A run read with --from is compared with any device's baseline (real GPU vs emulated).
    if loaded.device != args.device and not args.from_path:
        raise UsageError(f"baseline {args.baseline} was written for device {loaded.device!r}, "
                         f"this check runs on {args.device!r}")
    return loaded


def run(args: argparse.Namespace) -> int:
    if args.require_fullgraph and not args.from_path and not any(m in FULLGRAPH_MODES for m in modes_for(args.mode)):
        raise UsageError(f"--require-fullgraph needs a fullgraph mode, not --mode {args.mode}")
    policy = Policy(
        require_fullgraph=args.require_fullgraph,
        max_breaks=args.max_breaks,
        fail_on=args.fail_on or (),
        only_packages=args.only_packages,
        ignore_packages=args.ignore_packages,
    )
    # Outputs first: checked before anything is traced or read (none may be an input).
    if args.from_path:
        name = check_from_options(args)
        stems = [name]
    else:
        selected = selections(args)
        stems = [stem(s, args) for s in selected]
    outputs = OutputSet.plan(args, (FINDINGS, GATE), stems)
    accepted = _baseline(args)
    if args.from_path:
        _, read = read_run(args)
        if args.require_fullgraph and not any(m in FULLGRAPH_MODES for m in read.modes):
            raise UsageError(f"--require-fullgraph: {args.from_path} shows no fullgraph=True failure, so no "
                             "verdict; gate with --max-breaks 0 instead")
        results, logs = [read], []
        name = read.device.get("name")
        device = name if isinstance(name, str) and name else "?"  # free-form in findings from elsewhere
    else:
        done = run_diagnoses(args, selected, Progress())
        results, logs = done.findings, done.logs
        device = args.device
    report = GateReport(device=device, targets=[])
    if accepted is not None and results:
        report.notes.extend(baselines.version_notes(accepted, results[0].environment, args.baseline))
    for findings in results:
        name = findings.target.spec
        per_target = None
        if accepted is not None and not findings.incomplete():
            per_target = accepted.for_target(name)
            if per_target is None and args.from_path and len(accepted.targets) == 1:
                per_target = accepted.targets[0]  # a run read --from is named after its input
            if per_target is None:
                have = ", ".join(t.target for t in accepted.targets) or "none"
                raise UsageError(f"baseline {args.baseline} has no entry for target {name} (it has: {have}); "
                                 "add one with `graphbreak-doctor baseline write`")
        report.targets.append(evaluate(name, findings, policy, per_target))
    if not report.crashed and not any(t.cases for t in report.targets):
        # No target x mode was checked: the input reports nothing Dynamo did.
        # A gate that checked nothing does not pass.
        raise NothingToGate(nothing_to_gate(args.from_path or "the traced targets", *results))
    show(get("gate").render(report))
    outputs.write({**dict(zip(stems, results)), "": report})
    keep_logs(outputs, stems, logs)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        show(get("github").render(report))
    if report.crashed:
        # A target that timed out or crashed (or has unparsed breaks) was not
        # traced to the end: the gate cannot pass, whatever the checks say.
        return run_exit_code(results) or EXIT_CRASH
    return EXIT_OK if report.passed else EXIT_GATE
