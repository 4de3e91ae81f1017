"""The run at the server's sizes (``--sizes``) as lines every renderer shows
the same way: one summary, one line per call that compiled or hit the
limit, and the fix."""

from __future__ import annotations

from graphbreak_doctor.model.sizes import SizedRun
from graphbreak_doctor.text import counted


def summary(run: SizedRun) -> str:
    """'10 sizes: 8 compiles (7 recompiles); RECOMPILE LIMIT HIT ...' or 'ok'."""
    if not run.calls:
        return run.verdict or "no call was made"
    head = (f"{counted(len(run.calls), 'size')}, {counted(sum(c.compiles for c in run.calls), 'compile')} "
            f"({counted(run.recompiles, 'recompile')}; Dynamo's limit: {run.recompile_limit})")
    if run.verdict:
        return f"{head}: FAILS -- {run.verdict}"
    return f"{head}: ok, no call hits the recompile limit"


def call_lines(run: SizedRun) -> list[str]:
    """'size 2x2 ([2, 2]): compiled again: layer: 0/0: tensor 'x' rank mismatch ...'
    per call that compiled again, hit the limit, raised, or ran eagerly after the limit."""
    out, after = [], False
    for i, c in enumerate(run.calls):
        what = ""
        if c.limit_hit:
            what, after = "recompile limit hit, runs eagerly", True
        elif after and not c.compiles:
            what = "runs eagerly (past the limit)"
        elif c.compiles and i:
            what = "compiled again"
        if c.error:
            what = f"{what}; raised {c.error}" if what else f"raised {c.error}"
        if what:
            why = f": {'; '.join(c.reasons)}" if c.reasons else ""
            out.append(f"size {c.size} ({c.shapes}): {what}{why}")
    return out


def fix_line(run: SizedRun) -> str:
    return f"{run.fix}: {run.fix_text}" if run.fix else ""
