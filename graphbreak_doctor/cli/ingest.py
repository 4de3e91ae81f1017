"""`graphbreak-doctor ingest`: diagnose what a real run left behind (a
TORCH_TRACE folder, a server log, a pasted traceback). Reading is
graphbreak_doctor.ingest; analysis and output are the same as `trace`."""

from __future__ import annotations

import argparse
from pathlib import Path

from graphbreak_doctor.cli.common import EXIT_CRASH, EXIT_OK, UsageError, add_subcommand, show
from graphbreak_doctor.cli.outputs import OutputSet, add_output_options
from graphbreak_doctor.cli.report import findings_of
from graphbreak_doctor.ingest.source import MAX_LINE
from graphbreak_doctor.model import Findings
from graphbreak_doctor.render import FINDINGS, get
from graphbreak_doctor.targets.factory import slug

NAME = "ingest"

HELP = """Reads TORCH_TRACE folders or files (every rank), plain-text logs (a server log,
a pasted torch._dynamo.exc.Unsupported traceback, TORCH_LOGS=graph_breaks output),
gzip- or zstd-compressed, and diagnoses the graph breaks they report like `trace`
does. Reports the doctor cannot parse are counted and shown, never dropped.

"""


def _formats() -> tuple[str, ...]:
    from graphbreak_doctor.ingest import FORMATS

    return FORMATS


def add_format_option(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--format", choices=_formats(), default="auto", help=help)


def findings_from(path: str, fmt: str = "auto") -> Findings:
    """Saved findings, or the diagnosis of anything `ingest` reads.

    A file is findings when it parses as one JSON document (plain or
    compressed, any key order, a UTF-8 byte-order mark or not); a JSON
    document that is not findings is an error, never a log that reports
    nothing. Anything else is read as `ingest` reads it."""
    from graphbreak_doctor.ingest import IngestError, ingest
    from graphbreak_doctor.ingest.source import input_kind, json_document

    try:
        if input_kind(path) == "file":
            data = json_document(path)
            if data is not None:
                return findings_of(path, data)
        return ingest([path], fmt)
    except IngestError as e:
        raise UsageError(str(e)) from e


def add_from_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="from_path", metavar="PATH",
                   help="gate on what a run left behind (a TORCH_TRACE, a log, findings JSON) instead of tracing")


def check_from_options(args: argparse.Namespace) -> str:
    """The stem of ``--from PATH``'s outputs; a UsageError when target options
    are given with it. Reads nothing."""
    from graphbreak_doctor.targets.registry import PROVIDERS

    given = [o.flag for p in PROVIDERS for o in p.options if getattr(args, o.name, None) is not None]
    if given:
        raise UsageError(f"--from reads a run instead of tracing: leave out {', '.join(given)}")
    return input_stem([args.from_path])


def read_run(args: argparse.Namespace) -> tuple[str, Findings]:
    """(stem, findings) of ``--from PATH``; the target options must be left out."""
    name = check_from_options(args)
    return name, findings_from(args.from_path)


def nothing_to_gate(where: str, *read: Findings) -> str:
    """The one line of a gate that checked nothing (exit 5); ``read``: the
    findings of what it read, whose line cut is named (line_cut_note)."""
    notes = "".join(f"; {note}" for note in map(line_cut_note, read) if note)
    return (f"nothing to gate: no Dynamo report in {where} (no graph break, Dynamo error or compilation){notes}; "
            "not a pass")


def line_cut_note(findings: Findings) -> str:
    """Where the input had a line longer than the line cut, whose rest was
    never read (a report there included: ingest/source.py); "" where none had."""
    files = findings.target.facts.get("ingested", {}).get("files", [])
    cut = [(str(f.get("path")), n) for f in files if isinstance(f, dict)  # saved findings: any shape
           for n in (f.get("long_lines") if isinstance(f.get("long_lines"), list) else ()) if isinstance(n, int)]
    if not cut:
        return ""
    mib = MAX_LINE >> 20
    more = f" (and {len(cut) - 1} more)" if len(cut) > 1 else ""
    return (f"{cut[0][0]} line {cut[0][1]} is longer than the {mib} MiB line cut{more}: what lies past its first "
            f"{mib} MiB was not read")


def reports_nothing(findings: Findings) -> bool:
    """No mode was traced or read, and nothing could not be parsed: the input
    holds no Dynamo report at all."""
    return not findings.modes and not findings.incomplete()


def input_stem(paths: list[str]) -> str:
    name = Path(paths[0].rstrip("/\\")).name or "input"
    return slug(f"{name}-and-{len(paths) - 1}-more" if len(paths) > 1 else name)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, NAME, "diagnose a TORCH_TRACE folder, a server log or a pasted traceback",
                       description=HELP.strip())
    p.add_argument("paths", nargs="+", metavar="PATH", help="TORCH_TRACE folders or files, logs (.gz/.zst too)")
    add_format_option(p, "torch-trace or text; auto looks at each file's first line (default)")
    add_output_options(p, FINDINGS, default_on=("html",), stem="ingest-", what="<input name>")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    p.set_defaults(func=run)


def summary(findings: Findings) -> str:
    """What was read, and what could not be parsed, below the usual summary."""
    info = findings.target.facts.get("ingested", {})
    files = info.get("files", [])
    lines = [f"read: {len(files)} file(s) ({info.get('format', '?')})"
             + (f", ranks {', '.join(map(str, info['ranks']))}" if info.get("ranks") else "")
             + (f", {info['restarts']} restart(s)" if info.get("restarts") else "")]
    compiled = [fr for fr in info.get("frames", []) if fr.get("compiles")]
    if compiled:
        graphs = sum(fr["graphs"] for fr in compiled)
        lines.append(f"compiled: {len(compiled)} frame(s), {graphs} graph(s)")
    if not findings.breaks and not findings.fullgraph.crashed and not compiled and not findings.unparsed_events:
        note = line_cut_note(findings)
        lines.append("nothing found: no graph break, Dynamo error or compilation in the input"
                     + (f"; {note}" if note else ""))
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from graphbreak_doctor.ingest import IngestError, ingest

    stem = f"ingest-{input_stem(args.paths)}"
    outputs = OutputSet.plan(args, (FINDINGS,), [stem])
    from graphbreak_doctor.ingest.source import input_kind, json_document

    try:
        for path in args.paths:  # one JSON document gone wrong is an error, not a log (json_document)
            if input_kind(path) == "file":
                json_document(path)
        findings = ingest(args.paths, args.format)
    except IngestError as e:
        raise UsageError(str(e)) from e
    show(get("terminal").render(findings))
    show(summary(findings))
    outputs.write({stem: findings})
    return EXIT_CRASH if findings.fullgraph.crashed else EXIT_OK
