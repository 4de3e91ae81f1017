"""Raw graph-break events, as Dynamo reports them, before any analysis.

Dynamo's messages for an ``Unsupported`` have a fixed layout (see
torch/_dynamo/exc.py, ``unimplemented``)::

    <gb_type>
      Explanation: ...
      Hint: ...
      Developer debug context: ...
     For more details about this graph break, please visit: .../gbNNNN.html

and user stacks are printed in ``traceback.format_list`` form. This module
turns both into plain data.
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass, field

from graphbreak_doctor.frames import make_frame
from graphbreak_doctor.findings import Frame

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_FRAME_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$')
_GB_LINK = re.compile(r"/gb/(gb\d+)\.html")


def scrub(text: str) -> str:
    """Drop what differs between identical runs (object addresses)."""
    return _ADDRESS.sub("", text)


@dataclass
class ParsedMessage:
    gb_type: str
    explanation: str
    hints: list[str]
    context: str
    doc_id: str


def parse_unsupported(msg: str, gb_type: str = "") -> ParsedMessage:
    """Split an ``Unsupported`` message into its fields."""
    lines = msg.splitlines()
    explanation, context, doc_id = "", "", ""
    hints: list[str] = []
    head = ""
    for raw in lines:
        line = raw.strip()
        if line.startswith("Explanation:"):
            explanation = line[len("Explanation:"):].strip()
        elif line.startswith("Hint:"):
            hints.append(line[len("Hint:"):].strip())
        elif line.startswith("Developer debug context:"):
            context = line[len("Developer debug context:"):].strip()
        elif (m := _GB_LINK.search(line)) is not None:
            doc_id = m.group(1).upper()
        elif line and not head:
            head = line
    return ParsedMessage(
        # Some registry names end in a space ("can't handle functions not
        # implemented in python "); compare and show them stripped.
        gb_type=(gb_type or head).strip(),
        explanation=scrub(explanation),
        hints=[scrub(h) for h in hints],
        context=scrub(context),
        doc_id=doc_id,
    )


def parse_stack(text: str) -> list[Frame]:
    """Frames of a ``traceback.format_list``-style block, outermost first."""
    frames = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _FRAME_LINE.match(line)
        if m:
            code = ""
            if i + 1 < len(lines) and not _FRAME_LINE.match(lines[i + 1]):
                code = lines[i + 1].strip()
            frames.append(make_frame(m.group("file"), int(m.group("line")), m.group("fn").strip(), code))
    return frames


def frames_from_summary(summary: traceback.StackSummary) -> list[Frame]:
    return [make_frame(f.filename, f.lineno or 0, f.name, (f.line or "").strip()) for f in summary]


@dataclass
class BreakEvent:
    """One report of a graph break by Dynamo (explain) or the fullgraph error."""

    mode: str
    gb_type: str
    message: ParsedMessage
    stack: list[Frame]
    site: Frame | None
    # Dynamo suppresses the stack of a repeated break and reports only its site.
    duplicate: bool = False
    seq: int = 0
    jit: list[tuple[str, str]] = field(default_factory=list)
