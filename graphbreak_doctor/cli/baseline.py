"""`graphbreak-doctor baseline write`: record the current breaks as accepted."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator

from graphbreak_doctor.cli.common import (
    EXIT_CRASH,
    EXIT_OK,
    NothingToGate,
    UsageError,
    add_subcommand,
    run_exit_code,
    show,
)
from graphbreak_doctor.cli.ingest import add_from_option, nothing_to_gate, read_run, reports_nothing
from graphbreak_doctor.cli.outputs import check_output, write_file, writes_in_place
from graphbreak_doctor.cli.targets import add_cudagraph_option, add_target_options, run_diagnoses, selections
from graphbreak_doctor.gate import baseline as baselines
from graphbreak_doctor.jobs.atomic import locked
from graphbreak_doctor.progress import Progress
from graphbreak_doctor.text import escape_controls, one_line

NAME = "baseline"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, NAME, "write the baseline of accepted breaks that `check --baseline` reads")
    actions = p.add_subparsers(dest="baseline_command", metavar="ACTION", parser_class=type(p))
    write = add_subcommand(actions, "write", "trace the targets and write (or update) a baseline file",
                           description="Trace the selected targets and record their breaks as accepted. An "
                                       "existing file keeps its other targets.")
    add_target_options(write)
    add_cudagraph_option(write)
    add_from_option(write)
    write.add_argument("-o", "--output", required=True, metavar="FILE", help="the baseline file to write or update")
    write.set_defaults(func=run_write)
    p.set_defaults(func=_without_action)


def _without_action(args: argparse.Namespace) -> int:
    raise UsageError("choose an action: baseline write")


def run_write(args: argparse.Namespace) -> int:
    # The output first, before anything is traced or read: never the run it records.
    check_output(args.output, [args.from_path] if args.from_path else [], what="baseline")
    if args.from_path:
        results = [read_run(args)[1]]
        if reports_nothing(results[0]):
            said = nothing_to_gate(args.from_path, results[0])
            raise NothingToGate(said.replace("nothing to gate", "nothing to record", 1))
        # The device the run was on, not --device's default.
        device = results[0].device.get("name") or args.device
        if not isinstance(device, str) or device in ("?", "unknown"):  # free-form in findings from elsewhere
            device = args.device
    else:
        device = args.device
    _previous(args.output, device)  # a file this run cannot update is refused before anything is traced
    if not args.from_path:
        results = run_diagnoses(args, selections(args), Progress()).findings
    incomplete = [f for f in results if f.incomplete()]
    if incomplete:
        for f in incomplete:
            show(f"graphbreak-doctor: {escape_controls(f.target.spec)}: {one_line(f.incomplete())}; no baseline written\n",
                 sys.stderr)
        return run_exit_code(incomplete) or EXIT_CRASH
    written = [baselines.target_baseline(f, "+".join(f.modes) if args.from_path else args.mode) for f in results]
    # Read again, updated and replaced under the lock: another run's targets
    # written meanwhile are kept, and two runs at once both land.
    with _lock(args.output):
        try:
            updated = baselines.updated(_previous(args.output, device), device, written,
                                        results[0].environment if results else {})
        except baselines.BaselineError as e:
            raise UsageError(str(e)) from e
        try:
            write_file(args.output, updated.to_json())
        except OSError as e:
            raise UsageError(f"cannot write {args.output}: {e.strerror or e}") from e
    for t in written:
        cats = ", ".join(sorted({e.category for e in t.entries}))
        show(f"baseline {args.output}: {escape_controls(t.target)} ({escape_controls(device)}, {escape_controls(t.mode)}): "
             f"{len(t.entries)} accepted break key(s){': ' + escape_controls(cats) if cats else ''}\n")
    return EXIT_OK


def _previous(output: str, device: str) -> baselines.Baseline | None:
    """The baseline file this run updates (None: a new one)."""
    if not os.path.isfile(output):
        return None
    try:
        previous = baselines.load(output)
    except baselines.BaselineError as e:
        raise UsageError(f"{e} (refusing to overwrite it; remove it to start a new baseline)") from e
    if previous.device != device:
        raise UsageError(f"baseline {output} holds device {previous.device!r}, not {device!r}: "
                         "write a separate file per device")
    return previous


@contextlib.contextmanager
def _lock(output: str) -> Iterator[None]:
    """The lock of a baseline file that is a regular file (or will be): a
    lock file beside it, ``.<name>.lock`` (beside the file a link names),
    held while it is read, updated and replaced, and removed then. An output
    written in place (a FIFO, a device) is never read: no lock."""
    if writes_in_place(output):
        yield
        return
    real = Path(os.path.realpath(output))
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(locked(real.with_name(f".{real.name}.lock")))
        except OSError as e:
            raise UsageError(f"cannot lock baseline {output}: {e.strerror or e}: {e.filename or output}") from e
        yield
