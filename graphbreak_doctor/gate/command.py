"""`graphbreak-doctor check` and `graphbreak-doctor baseline write`: the CI gate
on the command line, over the same target selection and diagnosis as `trace`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from graphbreak_doctor import cli
from graphbreak_doctor.analysis.classify import CATEGORIES
from graphbreak_doctor.diagnose import environment, modes_for
from graphbreak_doctor.findings import Findings
from graphbreak_doctor.gate import baseline as baselines
from graphbreak_doctor.gate.policy import FULLGRAPH_MODES, GateReport, Policy, evaluate
from graphbreak_doctor.gate import verdict
from graphbreak_doctor.render import write_atomic

CHECK_HELP = """With no criterion, the gate is --max-breaks 0 (no graph break at all).
Criteria are independent; each applies to the breaks that count (package
filters) in each traced mode, and each target x mode is one JUnit testcase.
Baseline entries match on category + package + actionable function + gb_type,
never on line numbers.

"""


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return names


def _categories(text: str) -> tuple[str, ...]:
    names = _names(text)
    unknown = [n for n in names if n not in CATEGORIES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} (choose from {', '.join(CATEGORIES)})"
        )
    return names


_count = cli.int_at_least(0)


def add_check_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="the CI gate: trace targets and fail on graph breaks (exit 1)",
                       description="Trace the selected targets and check their graph breaks against budgets "
                                   "and a baseline.",
                       epilog=CHECK_HELP + cli.EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_target_options(p)
    add_from_option(p)
    gate = p.add_argument_group("checks")
    gate.add_argument("--require-fullgraph", action="store_true",
                      help="fail when torch.compile(fullgraph=True) cannot capture the target (needs a fullgraph mode)")
    gate.add_argument("--max-breaks", type=_count, metavar="N", help="fail on more than N distinct breaks per mode")
    gate.add_argument("--fail-on", type=_categories, metavar="CAT[,CAT]",
                      help=f"fail on any break of these categories ({', '.join(CATEGORIES)})")
    which = gate.add_mutually_exclusive_group()
    which.add_argument("--only-packages", type=_names, default=(), metavar="PKG[,PKG]",
                       help="count only breaks whose actionable frame is in these packages")
    which.add_argument("--ignore-packages", type=_names, default=(), metavar="PKG[,PKG]",
                       help="do not count breaks whose actionable frame is in these packages")
    gate.add_argument("--baseline", metavar="FILE",
                      help="fail only on breaks missing from this baseline; report the ones that disappeared")
    out = p.add_argument_group("outputs (GitHub Actions annotations are printed when GITHUB_ACTIONS=true)")
    out.add_argument("--junit", metavar="PATH", help="write JUnit XML: one testcase per target x mode")
    out.add_argument("--sarif", metavar="PATH", help="write SARIF 2.1.0: one result per distinct break")
    out.add_argument("--json", nargs="?", const="auto", metavar="PATH",
                     help="write JSON findings (default path: reports/<target>-<device>-<mode>.json)")
    p.set_defaults(func=cmd_check)


def add_baseline_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("baseline", help="write the baseline of accepted breaks that `check --baseline` reads",
                       epilog=cli.EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="baseline_command", metavar="ACTION", parser_class=type(p))
    write = actions.add_parser("write", help="trace the targets and write (or update) a baseline file",
                               description="Trace the selected targets and record their breaks as accepted. An "
                                           "existing file keeps its other targets.",
                               epilog=cli.EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_target_options(write)
    add_from_option(write)
    write.add_argument("-o", "--output", required=True, metavar="FILE", help="the baseline file to write or update")
    write.set_defaults(func=cmd_baseline_write)
    p.set_defaults(func=_baseline_without_action)


def add_from_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="from_path", metavar="PATH",
                   help="gate on what a run left behind (a TORCH_TRACE, a log, findings JSON) instead of tracing")


def _findings(args: argparse.Namespace) -> list[tuple[str, Findings]]:
    """The selected targets traced now, or the findings --from reads."""
    if not args.from_path:
        return cli.run_diagnoses(args, cli.Progress())
    from graphbreak_doctor.cli_ingest import findings_from

    if args.target or args.layer:
        raise cli.UsageError("--from reads a run instead of tracing: leave out --target/--layer")
    findings = findings_from(args.from_path)
    if getattr(args, "require_fullgraph", False) and not any(m in FULLGRAPH_MODES for m in findings.modes):
        raise cli.UsageError(f"--require-fullgraph: {args.from_path} shows no fullgraph=True failure, so no verdict; "
                             "gate with --max-breaks 0 instead")
    return [(cli.slug(Path(args.from_path).name), findings)]


def _baseline_without_action(args: argparse.Namespace) -> int:
    raise cli.UsageError("choose an action: baseline write")


def _baseline(args: argparse.Namespace) -> baselines.Baseline | None:
    if not args.baseline:
        return None
    try:
        loaded = baselines.load(args.baseline)
    except baselines.BaselineError as e:
        raise cli.UsageError(str(e)) from e
    # A run read with --from is compared with any device's baseline (real GPU vs emulated).
    if loaded.device != args.device and not args.from_path:
        raise cli.UsageError(f"baseline {args.baseline} was written for device {loaded.device!r}, "
                             f"this check runs on {args.device!r}")
    return loaded


def cmd_check(args: argparse.Namespace) -> int:
    if args.require_fullgraph and not args.from_path and not any(m in FULLGRAPH_MODES for m in modes_for(args.mode)):
        raise cli.UsageError(f"--require-fullgraph needs a fullgraph mode, not --mode {args.mode}")
    policy = Policy(
        require_fullgraph=args.require_fullgraph,
        max_breaks=args.max_breaks,
        fail_on=args.fail_on or (),
        only_packages=args.only_packages,
        ignore_packages=args.ignore_packages,
    )
    accepted = _baseline(args)
    results = _findings(args)
    device = results[0][1].device.get("name", "?") if args.from_path else args.device
    report = GateReport(device=device, targets=[])
    if accepted is not None:
        current = results[0][1].environment if args.from_path else environment()
        report.notes.extend(baselines.version_notes(accepted, current, args.baseline))
    for stem, findings in results:
        name = findings.target.get("spec") or stem
        per_target = None
        if accepted is not None:
            per_target = accepted.for_target(name)
            if per_target is None and args.from_path and len(accepted.targets) == 1:
                per_target = accepted.targets[0]
            if per_target is None:
                have = ", ".join(t.target for t in accepted.targets) or "none"
                raise cli.UsageError(f"baseline {args.baseline} has no entry for target {name} (it has: {have}); "
                                     "add one with `graphbreak-doctor baseline write`")
        report.targets.append(evaluate(name, findings, policy, per_target))
    sys.stdout.write(verdict.render(report))
    _write_outputs(args, results, report)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        from graphbreak_doctor.render import github

        sys.stdout.write(github.render(report))
    unparsed = sum(len(f.unparsed_events) for _, f in results)
    if unparsed:
        print(f"graphbreak-doctor: {unparsed} report(s) of breaks could not be parsed: the gate cannot vouch for them")
    if report.crashed or unparsed:
        return cli.EXIT_CRASH
    return cli.EXIT_OK if report.passed else cli.EXIT_GATE


def _write_outputs(args: argparse.Namespace, results: list[tuple[str, Findings]], report: GateReport) -> None:
    if args.json:
        for stem, findings in results:
            path = cli.output_path(args.json, stem, len(results), ".json")
            write_atomic(path, findings.to_json())
            print(f"JSON findings written to {path}")
    if args.junit:
        from graphbreak_doctor.render import junit

        write_atomic(args.junit, junit.render(report))
        print(f"JUnit XML written to {args.junit}")
    if args.sarif:
        from graphbreak_doctor.render import sarif

        write_atomic(args.sarif, sarif.render(report))
        print(f"SARIF written to {args.sarif}")


def cmd_baseline_write(args: argparse.Namespace) -> int:
    previous = None
    if os.path.exists(args.output):
        try:
            previous = baselines.load(args.output)
        except baselines.BaselineError as e:
            raise cli.UsageError(f"{e} (refusing to overwrite it; remove it to start a new baseline)") from e
        if previous.device != args.device:
            raise cli.UsageError(f"baseline {args.output} holds device {previous.device!r}, not {args.device!r}: "
                                 "write a separate file per device")
    results = _findings(args)
    crashed = [(stem, f) for stem, f in results if f.fullgraph.crashed]
    if crashed:
        for stem, f in crashed:
            print(f"graphbreak-doctor: {f.target.get('spec') or stem}: the target crashed under Dynamo "
                  f"(not a graph break): {f.fullgraph.error}; no baseline written", file=sys.stderr)
        return cli.EXIT_CRASH
    written = [baselines.target_baseline(f, "+".join(f.modes) if args.from_path else args.mode) for _, f in results]
    try:
        env = results[0][1].environment if args.from_path else environment()
        updated = baselines.updated(previous, args.device, written, env)
    except baselines.BaselineError as e:
        raise cli.UsageError(str(e)) from e
    write_atomic(args.output, updated.to_json())
    for t in written:
        cats = sorted({e.category for e in t.entries})
        print(f"baseline {args.output}: {t.target} ({args.device}, {t.mode}): {len(t.entries)} accepted "
              f"break key(s){': ' + ', '.join(cats) if cats else ''}")
    return cli.EXIT_OK
