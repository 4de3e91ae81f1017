"""`graphbreak-doctor diff A B`: compare two diagnoses (before/after a change,
two FlashInfer versions, an emulated GPU and the real one)."""

from __future__ import annotations

import argparse

from graphbreak_doctor.cli.common import EXIT_GATE, EXIT_OK, NothingToGate, add_subcommand, show
from graphbreak_doctor.cli.ingest import add_format_option, findings_from, input_stem, nothing_to_gate, reports_nothing
from graphbreak_doctor.cli.outputs import OutputSet, add_output_options
from graphbreak_doctor.render import DIFF, get

NAME = "diff"

HELP = """A and B are findings JSON (trace/ingest --json) or anything `ingest` reads.
Breaks are matched as baselines match them: category, package, the function to
change and Dynamo's gb_type, never line numbers.
  1  with --fail-on-new: B has breaks that A lacks
  5  with --fail-on-new: A or B holds no Dynamo report (nothing to compare)

"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, NAME, "compare two diagnoses: breaks only in A, only in B, in both",
                       description="Compare two diagnoses (before/after a change, two FlashInfer versions, "
                                   "an emulated GPU and the real one).", epilog=HELP)
    p.add_argument("a", metavar="A", help="findings JSON, a TORCH_TRACE or a log")
    p.add_argument("b", metavar="B", help="findings JSON, a TORCH_TRACE or a log")
    add_format_option(p, "how to read A and B when they are not JSON")
    add_output_options(p, DIFF, stem="diff-", what="<A>-<B>")
    p.add_argument("--fail-on-new", action="store_true", help="exit 1 when B has breaks that A lacks")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from graphbreak_doctor.gate.diff import diff

    stem = f"diff-{input_stem([args.a])}-{input_stem([args.b])}"
    outputs = OutputSet.plan(args, (DIFF,), [stem])
    a, b = findings_from(args.a, args.format), findings_from(args.b, args.format)
    if args.fail_on_new:
        # A side with no Dynamo report has no breaks to compare: no new break
        # there means nothing, and the gate does not pass on it.
        empty = [(path, f) for path, f in ((args.a, a), (args.b, b)) if reports_nothing(f)]
        if empty:
            raise NothingToGate(nothing_to_gate(" and ".join(path for path, _f in empty), *(f for _p, f in empty)))
    result = diff(a, b, args.a, args.b)
    show(get("diff").render(result))
    outputs.write({stem: result})
    return EXIT_GATE if args.fail_on_new and result.only_b else EXIT_OK
