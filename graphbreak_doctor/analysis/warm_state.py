"""Does the fullgraph verdict depend on the process state? A server runs its
forward eagerly before it compiles it (a warm-up), and a library's
process-wide state can change with that call: FlashInfer's JIT registry
answers from the kernels it has loaded, so a function traced cold can stop
at one call and, after one eager call, at another. The doctor traces
fullgraph both ways when it warms up (diagnose.py) and compares the first
failures here."""

from __future__ import annotations

from graphbreak_doctor.frames import at
from graphbreak_doctor.model import Findings
from graphbreak_doctor.model.warm_up import FirstFailure, WarmUp
from graphbreak_doctor.text import one_line


def first_failure(findings: Findings) -> FirstFailure | None:
    """Where a fullgraph trace stopped; None when it succeeded."""
    fg = findings.fullgraph
    if fg.ok:
        return None
    brk = findings.break_by_id(fg.break_id)
    if brk is None:
        return FirstFailure(error=one_line(fg.error or findings.outcome, 200))
    act = brk.actionable_frame
    return FirstFailure(gb_type=brk.gb_type, category=brk.category, culprit=brk.culprit,
                        where=at(brk.site) if brk.site else "", function=act.qualname if act else "",
                        fix=one_line(brk.fix.summary, 200) if brk.fix else "")


def describe(f: FirstFailure | None) -> str:
    """'[filesystem] <gb_type> (posix.stat) at file:line' or 'OK'."""
    if f is None:
        return "OK (captured whole)"
    if f.error and not f.gb_type:
        return f"a crash: {f.error}"
    culprit = f" ({f.culprit})" if f.culprit else ""
    return f"[{f.category}] {f.gb_type}{culprit} at {f.where}"


def compare(warm: WarmUp, cold: Findings, traced: Findings) -> None:
    """Record the cold trace in ``warm`` and, when its first failure is not
    the warm trace's, say so and what the warm-up changed."""
    before, after = first_failure(cold), first_failure(traced)
    warm.cold, warm.cold_failure = ("ok" if before is None else "failed"), before
    if _same(before, after):
        return
    changed = []
    if warm.loaded:
        changed.append(f"asked FlashInfer's JIT for {', '.join(warm.loaded[:4])}"
                       + (f" and {len(warm.loaded) - 4} more" if len(warm.loaded) > 4 else ""))
    if warm.imported:
        changed.append(f"imported {', '.join(warm.imported[:4])}"
                       + (f" and {len(warm.imported) - 4} more" if len(warm.imported) > 4 else ""))
    what = "; ".join(changed) or "changed library state the doctor does not watch (caches, registries)"
    warm.state_dependent = (f"the first failure depends on the process state: traced cold (no eager call first), "
                            f"{_at(before)}; after one eager call (as a server warms up), {_at(after)}. "
                            f"The warm-up {what}.")


def _at(f: FirstFailure | None) -> str:
    return "it is captured whole" if f is None else f"fullgraph stops at {describe(f)}"


def _same(a: FirstFailure | None, b: FirstFailure | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.gb_type, a.where, a.error) == (b.gb_type, b.where, b.error)
