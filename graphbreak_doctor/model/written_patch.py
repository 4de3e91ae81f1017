"""What ``fix`` keeps of its changes as a written patch makes them, and
what ``fix --write-patch DIR`` wrote and how its fresh-process check went.
Part of the findings (``Findings.fix``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PatchChange:
    """A change the ladder kept, as a written patch makes it (graphbreak_doctor.fix.emit)."""

    step: int = 0
    recipe: str = ""
    kind: str = ""  # memo, custom_op, registered_op, outside_compile, config or rewrite
    module: str = ""  # the module whose global ``function`` is replaced
    function: str = ""
    file: str = ""
    # The source appended to the module; "" when the change cannot be written
    # (``why_not`` says why).
    block: str = ""
    holds: str = ""  # for which inputs it holds, in words
    # Whether it holds at every size the server uses (None: no sizes known).
    every_size: bool | None = None
    why_not: str = ""


@dataclass
class PatchCheck:
    """One fresh-process trace with the written patch loaded."""

    size: int | None = None  # None: the target at its own size
    # The trace ended as the ladder's last one did: fullgraph OK, or the
    # break the ladder stopped at (so every change held); and, where the
    # ladder reached fullgraph, the user's own program held too.
    ok: bool = False
    outcome: str = ""  # "fullgraph ok", or where fullgraph stopped
    # Added after schema 1 shipped: the user's own program in a fresh process
    # (fix/user_run.py: a plain torch.compile(fullgraph=True), cold and again
    # after torch._dynamo.reset(), outputs compared with eager), how it went;
    # "" when it was not run (the ladder stopped short of fullgraph).
    program: str = ""


@dataclass
class WrittenPatch:
    """What ``fix --write-patch DIR`` wrote, and how its fresh-process check went."""

    folder: str = ""
    diff: str = ""  # the diff's file name in the folder
    diff_text: str = ""
    # Distribution -> version the patch was proven on (it refuses others).
    versions: dict[str, str] = field(default_factory=dict)
    sizes: list[int] = field(default_factory=list)  # the sizes the server uses
    sizes_from: str = ""  # where they come from, in words
    checks: list[PatchCheck] = field(default_factory=list)
    # Every check ended as the ladder's last trace did (never true without a check).
    verified: bool = False
    summary: str = ""  # "verified: fresh process, sizes 4, 256, 2048: fullgraph ok"
