"""Command line: a thin layer over diagnose(), the analysis and the renderers.

Exit codes (also in --help and the README):
  0  it ran (trace: whatever it found; check: the gate passed)
  1  check: the gate failed
  2  usage or input error (bad target, bad option, unreadable file)
  3  the target crashed under Dynamo in a way that is not a graph break
"""

from __future__ import annotations

import argparse
import re
import sys
import traceback
from pathlib import Path
from typing import Callable

from graphbreak_doctor import __version__
from graphbreak_doctor.diagnose import MODE_CHOICES, diagnose, target_builder
from graphbreak_doctor.findings import Findings
from graphbreak_doctor.render import html as html_report
from graphbreak_doctor.render import terminal, write_atomic
from graphbreak_doctor.targets import TargetError

EXIT_OK, EXIT_GATE, EXIT_USAGE, EXIT_CRASH = 0, 1, 2, 3
DEVICE_CHOICES = ("sm120", "sm100", "sm90", "cuda", "cpu")
LAYER_CHOICES = ("dense", "moe", "all")
REPORTS = Path("reports")

EXIT_CODES_HELP = """exit codes:
  0  it ran (trace, report); the gate passed (check)
  1  the gate failed (check)
  2  usage or input error: bad target, option or file (one line on stderr)
  3  the target crashed under Dynamo in a way that is not a graph break
"""


class UsageError(Exception):
    """Bad input: reported as one line on stderr, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        raise UsageError(message)


class Progress:
    """Progress lines on stderr when it is a terminal; quiet in CI logs."""

    def __init__(self, enabled: bool | None = None):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled

    def __call__(self, message: str) -> None:
        if self.enabled:
            print(f"graphbreak-doctor: {message}...", file=sys.stderr, flush=True)


def add_target_options(p: argparse.ArgumentParser, default_mode: str = "both") -> None:
    which = p.add_mutually_exclusive_group()
    which.add_argument("--target", metavar="M:F", help="a factory pkg.module:factory returning (fn, args[, kwargs])")
    which.add_argument("--layer", choices=LAYER_CHOICES, help="a GLM-5-NVFP4 decoder layer (all = one dense + one MoE)")
    p.add_argument("--mode", choices=MODE_CHOICES, default=default_mode,
                   help="explain: every break; fullgraph: the first hard failure, as SGLang sees it; "
                        "both: explain + fullgraph; piecewise: fullgraph with the attention op as a split point "
                        f"(default: {default_mode})")
    p.add_argument("--device", choices=DEVICE_CHOICES, default="sm120",
                   help="emulated GPU preset (default sm120), cuda for a real GPU, cpu for plain CPU tensors")
    p.add_argument("--config", metavar="PATH", help="GLM-5 config.json (or its folder) of the same architecture")
    p.add_argument("--tokens", type=_positive, default=128, help="tokens in the batch (default 128)")
    p.add_argument("--tp", type=_positive, default=1, help="tensor-parallel size: per-rank shard shapes (default 1)")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")


def int_at_least(minimum: int) -> Callable[[str], int]:
    """argparse type: an integer >= minimum."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    return parse


_positive = int_at_least(1)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "target"


def selections(args: argparse.Namespace) -> list[tuple[str, Callable]]:
    """(name, build) for each target the options select."""
    if args.target:
        return [(slug(args.target.replace(":", ".")), target_builder(args.target))]
    if args.layer:
        from graphbreak_doctor.targets import glm5

        kinds = ["dense", "moe"] if args.layer == "all" else [args.layer]
        try:
            config = glm5.load_config(args.config)
        except ValueError as e:
            raise UsageError(str(e)) from e
        out = []
        for kind in kinds:
            def build(kind=kind):
                try:
                    target = glm5.build_layer(kind, config=config, tokens=args.tokens, tp=args.tp, device=args.device)
                except ValueError as e:
                    raise TargetError(str(e)) from e
                if args.layer == "all":
                    target.meta["note"] = (
                        "--layer all traces one dense and one MoE layer; the other 76 decoder layers run the same code"
                    )
                return target
            out.append((f"glm5-{kind}", build))
        return out
    raise UsageError("choose what to trace: --target pkg.module:factory or --layer dense|moe|all")


def run_diagnoses(args: argparse.Namespace, progress: Progress) -> list[tuple[str, Findings]]:
    return [
        (f"{name}-{args.device}-{args.mode}", diagnose(build, mode=args.mode, device=args.device, progress=progress))
        for name, build in selections(args)
    ]


def output_path(option: str, stem: str, count: int, suffix: str) -> Path:
    """Where an output goes: reports/<stem><suffix> for "auto"; the given path
    for one target; the given path with "-<stem>" added for several."""
    if option == "auto":
        return REPORTS / f"{stem}{suffix}"
    path = Path(option)
    return path if count == 1 else path.with_name(f"{path.stem}-{stem}{path.suffix or suffix}")


def add_output_options(p: argparse.ArgumentParser, what: str) -> None:
    """--json [PATH], and --html [PATH] (on by default) / --no-html."""
    p.add_argument("--json", nargs="?", const="auto", metavar="PATH",
                   help=f"write JSON findings (default path: reports/<target>-<device>-{what}.json)")
    p.add_argument("--html", nargs="?", const="auto", default="auto", metavar="PATH",
                   help=f"write the HTML report (on by default; path: reports/<target>-<device>-{what}.html)")
    p.add_argument("--no-html", dest="html", action="store_const", const=None, help="do not write the HTML report")


def write_outputs(args: argparse.Namespace, stem: str, findings: Findings, count: int) -> None:
    """The files add_output_options asked for, each written whole or not at all."""
    if args.json:
        path = output_path(args.json, stem, count, ".json")
        write_atomic(path, findings.to_json())
        print(f"JSON findings written to {path}")
    if args.html:
        path = output_path(args.html, stem, count, ".html")
        write_atomic(path, html_report.render(findings))
        print(f"HTML report written to {path}")


def cmd_trace(args: argparse.Namespace) -> int:
    progress = Progress()
    results = run_diagnoses(args, progress)
    crashed = False
    for stem, findings in results:
        sys.stdout.write(terminal.render(findings))
        write_outputs(args, stem, findings, len(results))
        crashed = crashed or findings.fullgraph.crashed
    return EXIT_CRASH if crashed else EXIT_OK


def load_findings(path: str) -> Findings:
    """Saved findings, or a one-line UsageError saying why the file is not that."""
    try:
        return Findings.from_json(Path(path).read_text(encoding="utf-8"))
    except (ValueError, TypeError, KeyError, AttributeError) as e:  # not UTF-8/JSON, wrong schema or shape
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"{path}: not graphbreak-doctor findings: {first}") from e


def cmd_report(args: argparse.Namespace) -> int:
    findings = load_findings(args.findings)
    path = Path(args.html) if args.html else REPORTS / f"{Path(args.findings).stem}.html"
    try:
        page = html_report.render(findings)
    except (TypeError, AttributeError, KeyError, ValueError) as e:  # fields of the wrong type
        raise UsageError(f"{args.findings}: findings have an unexpected shape: {type(e).__name__}: {e}") from e
    write_atomic(path, page)
    print(f"HTML report written to {path}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="graphbreak-doctor",
        description="Tells why torch.compile cannot capture a model layer, and what to change.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"graphbreak-doctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    trace = sub.add_parser("trace", help="trace a target and explain every graph break",
                           epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_target_options(trace)
    add_output_options(trace, "<mode>")
    trace.set_defaults(func=cmd_trace)
    report = sub.add_parser("report", help="render saved JSON findings as an HTML report",
                            epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    report.add_argument("findings", metavar="FINDINGS.json", help="findings written by trace --json")
    report.add_argument("--html", metavar="PATH", help="where to write the report (default: reports/<findings name>.html)")
    report.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    report.set_defaults(func=cmd_report)
    # The CI gate (graphbreak_doctor/gate): `check` and `baseline write`.
    from graphbreak_doctor.gate.command import add_baseline_parser, add_check_parser

    add_check_parser(sub)
    add_baseline_parser(sub)
    # The fix ladder (graphbreak_doctor/fix): apply fixes in-process, re-trace.
    from graphbreak_doctor.fix.command import add_parser as add_fix_parser

    add_fix_parser(sub, add_target_options, _positive, EXIT_CODES_HELP)
    from graphbreak_doctor.cli_ingest import add_parsers as add_ingest_parsers  # ingest, diff
    add_ingest_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        if not getattr(args, "func", None):
            raise UsageError("choose a command (trace, report, check, baseline, fix); see --help")
        return args.func(args)
    except (UsageError, TargetError) as e:
        if debug:
            traceback.print_exc()
        print(f"graphbreak-doctor: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:
        if debug:
            traceback.print_exc()
        print(f"graphbreak-doctor: error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_USAGE
