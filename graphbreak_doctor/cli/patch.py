"""``fix --write-patch DIR``: write the kept changes (fix/write.py), then
prove them as a server loads them: a fresh worker per size, started with
``PYTHONPATH=DIR`` (its sitecustomize.py loads the patch before anything is
imported), tracing the unpatched target in fullgraph mode with no ladder in
the process -- at the smallest, a middle and the largest of the sizes the
server uses (``--sizes``, else what the target's provider reads from the
server's resolved launch arguments; the target's own size when none are
known)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from graphbreak_doctor.cli.common import UsageError
from graphbreak_doctor.frames import at
from graphbreak_doctor.jobs import Job, run_jobs
from graphbreak_doctor.jobs.job import PROGRAM, TRACE
from graphbreak_doctor.jobs.output import log_sections, with_logs
from graphbreak_doctor.model import COMPLETE, Findings, PatchCheck, WrittenPatch
from graphbreak_doctor.progress import Progress
from graphbreak_doctor.targets.provider import Selection
from graphbreak_doctor.targets.registry import provider
from graphbreak_doctor.text import one_line

if TYPE_CHECKING:  # torch: the patch writer loads only when --write-patch is asked for
    from graphbreak_doctor.fix.folder import Staged


def sizes_list(text: str) -> tuple[int, ...]:
    """argparse type: ``--sizes 1,64,512`` (integers >= 1)."""
    try:
        sizes = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return sizes


def patch_folder(text: str) -> Path:
    """argparse type: ``--write-patch DIR`` (never '', which would be the current folder)."""
    if not text or "\x00" in text:
        raise argparse.ArgumentTypeError(f"expected a folder, got {text!r}")
    return Path(text)


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--write-patch", metavar="DIR", type=patch_folder,
                   help="write the changes the ladder kept to DIR (a unified diff against the installed files, a "
                        "standalone package, sitecustomize.py, README.txt) and check it in fresh processes loaded "
                        "with PYTHONPATH=DIR; never writes into site-packages")
    p.add_argument("--sizes", metavar="N,N,...", type=sizes_list,
                   help="--write-patch: the sizes the server compiles at (a --target factory takes size=N; "
                        "default: what the server's launch arguments say, for SGLang's layers and model)")


def check_options(args: argparse.Namespace, selected: list[Selection]) -> None:
    """Before the ladder runs."""
    if args.sizes and not args.write_patch:
        raise UsageError("--sizes applies to --write-patch (the sizes its fresh-process check traces)")
    if not args.write_patch:
        return
    if len(selected) != 1:
        raise UsageError(f"--write-patch writes one target's patch; {len(selected)} targets are selected")
    from graphbreak_doctor.fix import folder

    if args.sizes and provider(selected[0].provider).at_size(selected[0], args.sizes[0]) is None:
        raise UsageError(f"--sizes: {selected[0].spec or selected[0].name} has no size to change")
    try:
        folder.check_folder(args.write_patch)
    except folder.PatchError as e:
        raise UsageError(str(e)) from e


def check_outputs(args: argparse.Namespace, outputs: Iterable[Path]) -> None:
    """Before the ladder runs: no output file (the outputs' plan, the logs
    kept beside them included) is DIR or inside it -- DIR is replaced whole,
    and holds only the patch."""
    if not args.write_patch:
        return
    where = os.path.realpath(args.write_patch)
    for each in outputs:
        real = os.path.realpath(each)
        if real == where or real.startswith(where.rstrip(os.sep) + os.sep):
            raise UsageError(f"--write-patch {args.write_patch}: the output {each} would be "
                             f"{'the patch folder' if real == where else 'inside the patch folder'}; "
                             "choose another path")


def write_and_check(args: argparse.Namespace, selection: Selection, findings: Findings, name: str,
                    progress: Progress) -> tuple[Staged | None, str, str]:
    """Write the patch beside DIR, check it there, and record both in
    ``findings.fix.patch``: (the staged patch, for the caller to commit once
    the other outputs are written -- it is discarded here if anything fails
    or a signal comes; one line saying why it does not hold, "" when it does;
    what the checked targets' code wrote)."""
    from graphbreak_doctor.fix import write
    try:
        staged = write.stage(args.write_patch, name, findings)
    except write.PatchError as e:
        return None, f"--write-patch: nothing written: {e}", ""
    except OSError as e:
        return None, f"--write-patch: nothing written to {args.write_patch}: {e.strerror or e}", ""
    try:
        said, logs = _check_staged(args, selection, findings, staged, progress)
    except BaseException:
        staged.discard()
        raise
    return staged, said, logs


def commit(args: argparse.Namespace, staged: Staged) -> tuple[str, str]:
    """Move the checked patch into DIR: (why it was not, "" when it was; a warning)."""
    from graphbreak_doctor.fix.folder import FolderChanged

    try:
        return "", staged.commit()
    except FolderChanged as e:
        staged.discard()
        return str(e), ""
    except OSError as e:
        return f"--write-patch: nothing written to {args.write_patch}: {e.strerror or e}", ""


def _check_staged(args: argparse.Namespace, selection: Selection, findings: Findings, staged: Staged,
                  progress: Progress) -> tuple[str, str]:
    from graphbreak_doctor.fix import write

    written = staged.written
    chosen = provider(selection.provider)
    if args.sizes:
        written.sizes, written.sizes_from = sorted(set(args.sizes)), "--sizes"
    else:
        written.sizes, written.sizes_from = chosen.server_sizes(selection, findings.target)
    checked = [(n, chosen.at_size(selection, n)) for n in chosen.sizes_to_prove(selection, written.sizes)]
    jobs = [(n, s) for n, s in checked if s is not None] or [(None, selection)]
    # The user's program only where the ladder reached fullgraph: short of
    # it, a plain fullgraph compile fails by design, and the trace says where.
    kinds = (TRACE, PROGRAM) if findings.fix and findings.fix.ok else (TRACE,)
    checks = [Job(kind, s, args.device, "fullgraph", debug=args.debug, path=str(staged.path.resolve()))
              for _n, s in jobs for kind in kinds]
    progress(f"checking the patch in {len(checks)} fresh process(es)")
    from graphbreak_doctor.cli.targets import memory_limit

    outcomes = with_logs(checks, lambda logged: run_jobs(logged, timeout=args.timeout, memory=memory_limit(args),
                                                         parallel=args.jobs or os.cpu_count() or 1))
    per_size = [outcomes[i:i + len(kinds)] for i in range(0, len(outcomes), len(kinds))]
    written.checks = [_check(n, [o.as_findings() for o in done], findings) for (n, _s), done in zip(jobs, per_size)]
    written.verified = bool(written.checks) and all(c.ok for c in written.checks)
    written.summary = _summary(written, findings)
    findings.fix.patch = written
    write.update_readme(findings, written, staged)
    said = "" if written.verified else \
        f"--write-patch: nothing written: the patch does not hold in a fresh process: {written.summary}"
    return said, log_sections(outcomes)


def _check(size: int | None, done: list[Findings], fixed: Findings) -> PatchCheck:
    """Does the fresh trace end as the ladder's last one did, and (where it
    ran) does the user's program hold?"""
    traced, *program = done
    ran = _program(program[0]) if program else ""
    held = not program or bool(program[0].fullgraph.ok)
    verdict = traced.fullgraph
    if verdict.ok:
        ok = bool(fixed.fix and fixed.fix.ok)
        differ = bool(fixed.fix and fixed.fix.outputs_equal_eager is False)
        return PatchCheck(size=size, ok=ok and held and not differ, program=ran,
                          outcome="fullgraph ok" + ("" if ok else " (the ladder's last trace failed)")
                          + (" (but the ladder's fixed outputs differ from eager's)" if differ else ""))
    brk = next((b for b in traced.breaks if b.id == verdict.break_id), None)
    where = f" [{brk.category}] at {at(brk.site)}" if brk and brk.site else ""
    what = "crashed" if verdict.crashed else "fullgraph stops"
    outcome = f"{what}{where}: {one_line(verdict.error or traced.outcome, 160)}"
    expected = fixed.fix.stopped_break if fixed.fix else ""
    if expected and verdict.break_id == expected and not verdict.crashed:
        return PatchCheck(size=size, ok=held, program=ran,
                          outcome=f"{outcome} -- where the ladder stopped: every change held")
    return PatchCheck(size=size, ok=False, outcome=outcome, program=ran)


def _program(ran: Findings) -> str:
    """The user's program's result, in one line (fix/user_run.py)."""
    if ran.fullgraph.ok:
        return ran.fix.stopped if ran.fix else "held"
    if ran.outcome != COMPLETE or ran.fullgraph.crashed:
        return f"the user's program did not finish: {ran.fullgraph.error}"
    return f"the user's program failed: {ran.fullgraph.error}"


def _summary(written: WrittenPatch, fixed: Findings) -> str:
    sized = [c for c in written.checks if c.size is not None]
    where = (f"size{'s' if len(sized) > 1 else ''} {', '.join(str(c.size) for c in sized)}" if sized
             else "the target's own size")
    if written.verified:
        if fixed.fix and fixed.fix.ok:
            return f"verified: fresh process, {where}: fullgraph ok; the user's program: {written.checks[0].program}"
        return f"verified: fresh process, {where}: every change held; fullgraph stops where the ladder stopped"
    failed = [c for c in written.checks if not c.ok]
    return f"NOT verified: fresh process, {where}: " + "; ".join(
        f"{'size ' + str(c.size) if c.size is not None else 'own size'}: "
        f"{c.program if c.outcome.startswith('fullgraph ok') and c.program else c.outcome}" for c in failed)
