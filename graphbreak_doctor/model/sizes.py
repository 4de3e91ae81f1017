"""The target called at the server's sizes in one Dynamo session
(``trace --sizes``, ``check --sizes``: graphbreak_doctor.capture.sizes): each
call, whether it made Dynamo compile again and Dynamo's own guard-failure
reasons, and the verdict when a server would hit Dynamo's recompile limit.
Part of the findings (``Findings.sized``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SizedCall:
    """One call of the compiled target at one size."""

    size: str  # as given: "64", or a shape "4x4x2"
    shapes: str = ""  # the tensor arguments' shapes: "[64, 6144], [64]"
    # How many times Dynamo compiled a frame of the target during this call
    # (the first call compiles; 0: a compiled graph was reused).
    compiles: int = 0
    # Dynamo's own guard-failure reasons for this call's recompiles, each
    # prefixed with the frame's function ("layer: tensor 'x' rank mismatch ...").
    reasons: list[str] = field(default_factory=list)
    # This call hit the recompile limit: the frame ran without a compiled graph.
    limit_hit: bool = False
    error: str = ""  # the call raised (not a recompile): one line


@dataclass
class SizedRun:
    """The target compiled once and called at each size, as a server calls it."""

    sizes: list[str] = field(default_factory=list)
    # Dynamo's recompile limit for the run (torch._dynamo.config.recompile_limit).
    recompile_limit: int = 0
    calls: list[SizedCall] = field(default_factory=list)
    # "" when the limit is not hit; else the sentence that says where, what it
    # costs under fullgraph=True and without it, and Dynamo's last reason.
    verdict: str = ""
    # The change that fits the reasons (analysis/recompiles.py): its name
    # ("mark-dynamic", "eager-flatten", "pad-to-buckets") and what to do, in
    # words; "" when nothing recompiled.
    fix: str = ""
    fix_text: str = ""

    @property
    def limit_hit(self) -> bool:
        return any(c.limit_hit for c in self.calls)

    @property
    def recompiles(self) -> int:
        """Compiles after the first call's."""
        return sum(c.compiles for c in self.calls[1:])
