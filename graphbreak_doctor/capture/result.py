"""What one mode's capture gives: the raw events, graphs and hazards of one
trace (capture/trace.py), or of a log read back (ingest/). Plain data, no torch:
the analysis that turns it into findings runs without torch too."""

from __future__ import annotations

from dataclasses import dataclass, field

from graphbreak_doctor.capture.events import BreakEvent
from graphbreak_doctor.model import Frame, GraphInfo, UnparsedEvent


@dataclass
class RawHazard:
    kind: str
    message: str
    file: str = ""
    line: int = 0


@dataclass
class ModeResult:
    mode: str
    events: list[BreakEvent] = field(default_factory=list)
    graphs: list[GraphInfo] = field(default_factory=list)
    hazards: list[RawHazard] = field(default_factory=list)
    resume_code: list[tuple[str, str]] = field(default_factory=list)
    # Break reports the listener could not parse (never dropped).
    unparsed: list[UnparsedEvent] = field(default_factory=list)
    ok: bool | None = None
    error: str = ""
    crashed: bool = False
    # Where a crash happened in the user's code (None when nothing says).
    crash_site: Frame | None = None
    # Piecewise mode with the framework's own splitter: the op each of its
    # splitting pieces is cut at, over every graph, in order.
    cut_at: list[str] = field(default_factory=list)
    # What else holds for the fullgraph verdict: the captured graph's run read
    # a device value the emulated GPU does not know ("" for none).
    note: str = ""
    # An explain trace asked to count (capture/held_ops.py): operators run
    # inside the compiled graphs on a call after compilation, and in a plain
    # call of the target; None when not counted, with why in ops_error when
    # counting failed.
    ops_held: int | None = None
    ops_total: int | None = None
    ops_error: str = ""
