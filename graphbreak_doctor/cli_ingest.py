"""`graphbreak-doctor ingest` and `graphbreak-doctor diff`: diagnose what a real
run left behind (a TORCH_TRACE folder, a server log, a pasted traceback) and
compare two diagnoses. Thin, like cli.py: reading is graphbreak_doctor.ingest,
comparing is graphbreak_doctor.analysis.diff, output is graphbreak_doctor.render.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from graphbreak_doctor import cli
from graphbreak_doctor.findings import Findings
from graphbreak_doctor.ingest import FORMATS, IngestError, ingest
from graphbreak_doctor.render import terminal, write_atomic

INGEST_HELP = """Reads TORCH_TRACE folders or files (every rank), plain-text logs (a server log,
a pasted torch._dynamo.exc.Unsupported traceback, TORCH_LOGS=graph_breaks output),
gzip- or zstd-compressed, and diagnoses the graph breaks they report like `trace`
does. Reports the doctor cannot parse are counted and shown, never dropped.

"""
DIFF_HELP = """A and B are findings JSON (trace/ingest --json) or anything `ingest` reads.
Breaks are matched as baselines match them: category, package, the function to
change and Dynamo's gb_type, never line numbers.
  1  with --fail-on-new: B has breaks that A lacks

"""


def findings_from(path: str, fmt: str = "auto") -> Findings:
    """Saved findings (a JSON file), or the diagnosis of anything `ingest` reads."""
    p = Path(path)
    if p.is_file() and _looks_like_json(p):
        return cli.load_findings(path)
    try:
        return ingest([path], fmt)
    except IngestError as e:
        raise cli.UsageError(str(e)) from e


def _looks_like_json(path: Path) -> bool:
    """Findings JSON starts with its schema version (a JSON-lines log does not)."""
    with open(path, "rb") as f:
        head = f.read(256).lstrip()
    return head.startswith(b"{") and b'"schema_version"' in head


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ingest", help="diagnose a TORCH_TRACE folder, a server log or a pasted traceback",
                       description=INGEST_HELP.strip(), epilog=cli.EXIT_CODES_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", metavar="PATH", help="TORCH_TRACE folders or files, logs (.gz/.zst too)")
    p.add_argument("--format", choices=FORMATS, default="auto",
                   help="torch-trace or text; auto looks at each file's first line (default)")
    cli.add_output_options(p, "ingest")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    p.set_defaults(func=cmd_ingest)

    d = sub.add_parser("diff", help="compare two diagnoses: breaks only in A, only in B, in both",
                       description="Compare two diagnoses (before/after a change, two FlashInfer versions, "
                                   "an emulated GPU and the real one).",
                       epilog=DIFF_HELP + cli.EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("a", metavar="A", help="findings JSON, a TORCH_TRACE or a log")
    d.add_argument("b", metavar="B", help="findings JSON, a TORCH_TRACE or a log")
    d.add_argument("--format", choices=FORMATS, default="auto", help="how to read A and B when they are not JSON")
    d.add_argument("--json", nargs="?", const="auto", metavar="PATH",
                   help="write the diff as JSON (default path: reports/diff-<A>-<B>.json)")
    d.add_argument("--html", nargs="?", const="auto", metavar="PATH",
                   help="write the diff as an HTML page (default path: reports/diff-<A>-<B>.html)")
    d.add_argument("--fail-on-new", action="store_true", help="exit 1 when B has breaks that A lacks")
    d.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    d.set_defaults(func=cmd_diff)


def _stem(paths: list[str]) -> str:
    name = Path(paths[0].rstrip("/\\")).name or "input"
    return cli.slug(f"{name}-and-{len(paths) - 1}-more" if len(paths) > 1 else name)


def summary(findings: Findings) -> str:
    """What was read, and what could not be parsed, below the usual summary."""
    info = findings.target.get("ingested", {})
    files = info.get("files", [])
    lines = [f"read: {len(files)} file(s) ({info.get('format', '?')})"
             + (f", ranks {', '.join(map(str, info['ranks']))}" if info.get("ranks") else "")
             + (f", {info['restarts']} restart(s)" if info.get("restarts") else "")]
    compiled = [fr for fr in info.get("frames", []) if fr.get("compiles")]
    if compiled:
        graphs = sum(fr["graphs"] for fr in compiled)
        lines.append(f"compiled: {len(compiled)} frame(s), {graphs} graph(s)")
    if not findings.breaks and not findings.fullgraph.crashed and not compiled and not findings.unparsed_events:
        lines.append("nothing found: no graph break, Dynamo error or compilation in the input")
    return "\n".join(lines) + "\n"


def cmd_ingest(args: argparse.Namespace) -> int:
    try:
        findings = ingest(args.paths, args.format)
    except IngestError as e:
        raise cli.UsageError(str(e)) from e
    sys.stdout.write(terminal.render(findings))
    sys.stdout.write(summary(findings))
    cli.write_outputs(args, f"ingest-{_stem(args.paths)}", findings, 1)
    return cli.EXIT_CRASH if findings.fullgraph.crashed else cli.EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    from graphbreak_doctor.analysis.diff import diff
    from graphbreak_doctor.render import diff_html, diff_terminal

    result = diff(findings_from(args.a, args.format), findings_from(args.b, args.format), args.a, args.b)
    sys.stdout.write(diff_terminal.render(result))
    stem = f"diff-{_stem([args.a])}-{_stem([args.b])}"
    if args.json:
        path = cli.output_path(args.json, stem, 1, ".json")
        write_atomic(path, result.to_json())
        print(f"JSON diff written to {path}")
    if args.html:
        path = cli.output_path(args.html, stem, 1, ".html")
        write_atomic(path, diff_html.render(result))
        print(f"HTML diff written to {path}")
    return cli.EXIT_GATE if args.fail_on_new and result.only_b else cli.EXIT_OK
