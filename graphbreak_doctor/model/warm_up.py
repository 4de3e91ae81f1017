"""How a target was put in the state a server compiles it in before it was
traced: one eager call (a server's warm-up), or ``--cold``; and, where the
fullgraph verdict was also traced cold, whether the first failure depends
on that state. Part of the findings (``Findings.warm_up``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FirstFailure:
    """Where a fullgraph trace stopped, as plain text (the cold trace's)."""

    gb_type: str = ""
    category: str = ""
    culprit: str = ""
    where: str = ""  # "file:line"
    function: str = ""  # the actionable frame's qualified name
    fix: str = ""  # the suggested fix, one line
    error: str = ""  # a failure that is no break (a crash), one line


@dataclass
class WarmUp:
    # The target ran eagerly once before it was traced.
    ran: bool = False
    # How: "one eager call at the traced size", the framework's own warm-up,
    # or "skipped (--cold)".
    how: str = ""
    # The eager call raised (one line): the target was traced cold.
    error: str = ""
    # What the warm-up asked FlashInfer's JIT for ("name (action)"), and the
    # packages of the modules it imported (two name parts deep, at most 20).
    loaded: list[str] = field(default_factory=list)
    imported: list[str] = field(default_factory=list)
    # Fullgraph traced cold first, before the warm-up: "ok", "failed" or ""
    # (not traced cold: explain mode, --cold, or a framework's own warm-up).
    cold: str = ""
    cold_failure: FirstFailure | None = None
    # Cold and warm fullgraph traces stop at different first failures (or one
    # of them succeeds): the sentence that says so, and what the warm-up changed.
    state_dependent: str = ""
