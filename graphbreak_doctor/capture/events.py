"""Raw graph-break events, as Dynamo reports them, before any analysis.

Dynamo's messages for an ``Unsupported`` have a fixed layout (see
torch/_dynamo/exc.py, ``unimplemented``)::

    <gb_type>
      Explanation: ...
      Hint: ...
      Developer debug context: ...
     For more details about this graph break, please visit: .../gbNNNN.html

and user stacks are printed in ``traceback.format_list`` form. This module
turns both into plain data, preferring what the exception object itself says
(capture/exceptions.py) and recording each fact that had to be read from the
text instead (``BreakEvent.fallbacks``).
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass, field

from graphbreak_doctor.capture import exceptions
from graphbreak_doctor.frames import make_frame
from graphbreak_doctor.model import Frame

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_FRAME_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$')
_GB_LINK = re.compile(r"/gb/(gb\d+)\.html")
# Dynamo appends the message of a follow-up break to the message of the break
# it was raised from (docs/design.md, "What Dynamo's exception objects hold").
NESTED = "*** While handling this graph break, another graph break occurred: ***"
# A capture failure that is not an Unsupported prints the user frames in its
# message (ConstraintViolationError: "User stack:").
_USER_STACK = "User stack:"


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


def split_nested(msg: str) -> list[str]:
    """The messages of the breaks in one message, earliest first (one, unless
    Dynamo raised a follow-up break from an earlier one)."""
    return [part.strip("\n") for part in msg.split(NESTED)]


def parse_unsupported(msg: str, gb_type: str = "") -> ParsedMessage:
    """Split an ``Unsupported`` message into its fields (the last break's,
    when the message nests an earlier one)."""
    lines = split_nested(msg)[-1].splitlines()
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


def first_paragraph(msg: str) -> str:
    return scrub(" ".join(msg.strip().split("\n\n", 1)[0].split()))


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
    # The object Dynamo refused, read from its variable tracker ("" if unknown).
    culprit: str = ""
    # Qualified exception types along the chain (capture/exceptions.py).
    exceptions: list[str] = field(default_factory=list)
    # Facts read from the message text because the exception did not say
    # ("gb_type", "cause", "stack"); analysis adds its own ("culprit").
    fallbacks: list[str] = field(default_factory=list)
    # The break this one was raised from, when Dynamo says (a follow-up such
    # as "graph break in loop" carries the break inside the loop).
    cause: BreakEvent | None = None


def event_for(mode: str, exc: BaseException | None, text: str, stack: list[Frame], site: Frame | None,
              *, duplicate: bool = False) -> BreakEvent:
    """The event for one break (or capture failure) ``exc``, reported with
    ``text`` (Dynamo's message or log line) at ``stack``."""
    fallbacks: list[str] = []
    kind = exceptions.failure_kind(exc) if exc is not None else exceptions.BREAK
    msg = getattr(exc, "msg", None)
    if not isinstance(msg, str):
        msg = text
    if kind == exceptions.CAPTURE and exc is not None:
        name = exceptions.label(exc)
        parsed = ParsedMessage(name, first_paragraph(str(exc)), [], "", "")
    else:
        name = exceptions.gb_type(exc)
        if not name:
            fallbacks.append("gb_type")
        parsed = parse_unsupported(msg, name)
    event = BreakEvent(mode, parsed.gb_type, parsed, stack, site, duplicate=duplicate,
                       culprit=exceptions.refused(exc), exceptions=exceptions.type_names(exc), fallbacks=fallbacks)
    cause = exceptions.cause_of(exc)
    nested = split_nested(msg)
    if cause is not None:
        # Dynamo raises the follow-up with the cause's own user frames.
        event.cause = event_for(mode, cause, getattr(cause, "msg", "") or str(cause), stack, site,
                                duplicate=duplicate)
    elif len(nested) > 1:
        event.cause = event_for(mode, None, nested[-2], stack, site, duplicate=duplicate)
        event.fallbacks.append("cause")
    return event


def with_causes(event: BreakEvent) -> list[BreakEvent]:
    """The event's causes, earliest first, then the event."""
    out = [event]
    while out[0].cause is not None:
        out.insert(0, out[0].cause)
    return out


def stack_in_message(exc: BaseException) -> list[Frame]:
    """User frames printed in a capture failure's message ("User stack:")."""
    text = str(exc)
    return parse_stack(text.split(_USER_STACK, 1)[1]) if _USER_STACK in text else []
