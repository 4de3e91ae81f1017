"""The warm-up before the trace, as lines every renderer shows the same way
(model/warm_up.py): a first failure that depends on the process state, a
warm-up that raised, a trace left cold."""

from __future__ import annotations

from graphbreak_doctor.model import Findings


def lines(findings: Findings) -> list[str]:
    """'state-dependent: ...', 'warm-up: ...'; none for a plain warm trace."""
    warm = findings.warm_up
    if warm is None:
        return []
    out = []
    if warm.state_dependent:
        out.append(f"state-dependent: {warm.state_dependent} (--cold traces the cold state)")
    if warm.error:
        out.append(f"warm-up: the eager call raised {warm.error}; traced cold")
    elif not warm.ran:
        out.append(f"warm-up: {warm.how}")
    return out


def how(findings: Findings) -> str:
    """One line for "how it was traced": what ran before the trace."""
    warm = findings.warm_up
    if warm is None:
        return ""
    text = warm.how + (f" (it raised {warm.error}: traced cold)" if warm.error else "")
    if warm.cold == "ok":
        text += "; fullgraph was also traced cold, before it: captured whole"
    elif warm.cold == "failed" and not warm.state_dependent:
        text += "; fullgraph was also traced cold, before it: the same first failure"
    return text
