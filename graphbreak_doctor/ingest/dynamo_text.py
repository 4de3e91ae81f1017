"""Dynamo's own texts about a graph break, turned into the capture's raw events.

Four texts report a break (torch 2.13; the same wording since 2.6):

- ``Graph break in user code at FILE:LINE`` / ``Graph Break Reason: ...`` /
  ``User code traceback:`` + frames -- a handled break
  (torch/_dynamo/symbolic_convert.py, ``log_graph_break``). It goes to the
  ``graph_breaks`` log (``TORCH_LOGS=graph_breaks``) and, with Python's
  traceback of the ``Unsupported`` appended, to TORCH_TRACE as the artifact
  ``dynamo_graph_break_reason``; the live capture hears the same record.
- ``Graph break (user stack suppressed due to duplicate graph break) in user
  code at FILE:LINE`` -- the same break again, logged without its stack.
- ``Graph break: torch.compile cannot properly resume from this graph break,
  which results in a skip.`` + ``The graph break occurred in the following
  user code:`` + frames, then the traceback of the ``Unsupported``
  (torch/_dynamo/convert_frame.py): the whole frame runs eagerly.
- ``torch._dynamo.exc.Unsupported: <gb_type>`` + message + ``from user
  code:`` + frames -- the exception ``fullgraph=True`` raises, as a server log
  or a pasted traceback shows it (TORCH_TRACE: the artifact ``dynamo_error``).

The message inside each has the layout torch/_dynamo/exc.py
(``format_graph_break_message``) writes: the gb_type on the line right before
``  Explanation:``, then hints, debug context and the documentation link. A
message chained with "*** While handling this graph break, another graph
break occurred ***" names the last gb_type, as the exception does.

:class:`ReportScanner` finds these reports in free text (a server log with
anything in between); :func:`parse_report` turns one into a
:class:`BreakEvent` (through ``parse_unsupported`` and ``parse_stack``, as the
live capture does), a :class:`Crash` (a Dynamo exception that is not a graph
break) or a :class:`Unparsed` with the reason.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from graphbreak_doctor.capture import exceptions
from graphbreak_doctor.capture.events import (NESTED, BreakEvent, ParsedMessage, first_paragraph, parse_stack,
                                              parse_unsupported, split_nested)

# torch/_logging/_internal.py (TorchLogsFormatter): "[rankN]:" under
# torch.distributed, then glog's level+date, time, pid, file:line], then the
# compile id ("[0/0]", "[!0/0/1]" for compiled autograd) and the artifact name.
_GLOG = re.compile(
    r"^(?:\[rank(?P<rank>\d+)\]:\s?)?"
    r"(?P<key>[VIWEC]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]\s]+:\d+\](?: \[[!\d/_]+\])?(?: \[__\w+\])?) ?"
)
# torchrun and torch.distributed.elastic prefix every line of a rank's output.
_RANK = re.compile(r"^\[(?:default)?rank(?P<rank>\d+)\]:\s?")
# The last line of a traceback: a Dynamo exception, or one of the capture
# failures of other modules (ConstraintViolationError, ...).
EXC_HEADER = re.compile(
    r"^(?P<name>torch\._dynamo\.exc\.\w+|"
    + "|".join(re.escape(name) for name in sorted(exceptions.CAPTURE_FAILURES))
    # A call torch forbids in a graph: a bare AssertionError, in Dynamo's words.
    + rf"|{exceptions.FORBIDDEN_TYPE}(?=: {re.escape(exceptions.FORBIDDEN_LABEL)})"
    + r"): ?(?P<rest>.*)$"
)
# The capture failures EXC_HEADER names (the forbidden call among them).
_CAPTURE_NAMES = frozenset(exceptions.CAPTURE_FAILURES) | {exceptions.FORBIDDEN_TYPE}
_BREAK_AT = re.compile(r"in user code at (?P<file>.+):(?P<line>\d+)\s*$")
_TRACE_REASON = re.compile(r"^Encountered graph break when attempting to trace \w+:.*:\s*$")

BREAK = "Graph break in user code at "
DUPLICATE = "Graph break (user stack suppressed due to duplicate graph break) in user code at "
SKIP = "Graph break: torch.compile cannot properly resume from this graph break"
REASON = "Graph Break Reason:"
FRAME_MARKERS = ("User code traceback:", "from user code:", "The graph break occurred in the following user code:",
                 # A capture failure's message: ConstraintViolationError, the symbolic-shapes errors.
                 "User stack:", "User Stack (most recent call last):")
# Python's line between the exceptions of a chain (traceback.py).
CHAINED = ("The above exception was the direct cause of the following exception:",
           "During handling of the above exception, another exception occurred:")
_MESSAGE_LINES = (REASON, "*** While handling this graph break", "Stack variable source attribution:",
                  "torch.compile will skip tracing the frame")
TRACEBACK = "Traceback (most recent call last):"
# A block that runs longer than this is cut and parsed as it is.
MAX_BLOCK_LINES = 5000
_UNKNOWN = "<unknown>"


@dataclass
class Crash:
    """A Dynamo exception that is not a graph break (TorchRuntimeError, BackendCompilerFailed...)."""

    error: str


@dataclass
class Unparsed:
    reason: str


@dataclass
class Line:
    """One line of a log, with the prefixes of the logger that wrote it removed."""

    text: str
    # The glog prefix of a torch log record: all lines of one record share it.
    record: str | None = None
    rank: int | None = None


def split_prefix(raw: str) -> Line:
    """Remove a rank prefix and torch's glog prefix (one per line of a record)."""
    rank = None
    m = _RANK.match(raw)
    if m:
        rank, raw = int(m.group("rank")), raw[m.end():]
    g = _GLOG.match(raw)
    if g:
        if g.group("rank") is not None:
            rank = int(g.group("rank"))
        return Line(raw[g.end():], g.group("key"), rank)
    return Line(raw, None, rank)


def starts_report(text: str) -> bool:
    return text.startswith((BREAK, DUPLICATE, SKIP)) or EXC_HEADER.match(text) is not None


@dataclass
class Block:
    """The lines of one report, as found in a log."""

    start: int
    lines: list[str] = field(default_factory=list)
    rank: int | None = None


def _indented(text: str) -> bool:
    return text[:1] in (" ", "\t")


class ReportScanner:
    """Finds the reports of graph breaks in a stream of log lines.

    Lines of a torch log record (one glog prefix) stay together. Elsewhere a
    report ends where its layout does: the message runs while lines are
    indented, blank, or one of Dynamo's own (a gb_type line is followed by
    ``  Explanation:``); the frames run while lines are indented. A handled
    break or skip may be followed by Python's traceback of the
    ``Unsupported``; that traceback belongs to it.
    """

    def __init__(self) -> None:
        self.block: Block | None = None
        self.record: str | None = None
        self.phase = ""
        self.tail = False  # the block's trailing exception is being read
        self.capture = False  # the block is a capture failure's traceback tail
        self.held: tuple[int, Line] | None = None
        self.gap = 0
        self.done: list[Block] = []

    def feed(self, number: int, line: Line) -> list[Block]:
        if self.held is not None:
            held, self.held = self.held, None
            if self.block is not None and line.text.lstrip().startswith("Explanation:"):
                self._add(held[1])
            else:
                self._end()
                self._take(*held)
        self._take(number, line)
        done, self.done = self.done, []
        return done

    def close(self) -> list[Block]:
        if self.held is not None:
            held, self.held = self.held, None
            self._end()
            self._take(*held)
        self._end()
        done, self.done = self.done, []
        return done

    def _start(self, number: int, line: Line) -> None:
        self._end()
        self.block = Block(number, [line.text], line.rank)
        self.record = line.record
        self.phase = "message"
        self.tail = False
        self.capture = is_capture_failure(line.text)
        self.gap = 0

    def _end(self) -> None:
        if self.block is not None:
            self.done.append(self.block)
        self.block, self.record, self.phase = None, None, ""

    def _add(self, line: Line) -> None:
        assert self.block is not None
        self.block.lines.append(line.text)
        if self.block.rank is None:
            self.block.rank = line.rank
        if len(self.block.lines) >= MAX_BLOCK_LINES:
            self._end()

    def _take(self, number: int, line: Line) -> None:
        text = line.text
        if self.block is None:
            if starts_report(text):
                self._start(number, line)
            return
        if self.record is not None:
            # A torch log record: its lines share the prefix.
            if line.record == self.record and not text.startswith((BREAK, DUPLICATE, SKIP)):
                self._add(line)
                return
            self._end()
            self._take(number, line)
            return
        if text.startswith((BREAK, DUPLICATE, SKIP)) or (EXC_HEADER.match(text) and not self.phase == "traceback"):
            self._start(number, line)
            return
        getattr(self, f"_in_{self.phase}")(number, line)

    def _in_message(self, number: int, line: Line) -> None:
        text = line.text
        if self.capture and text.strip() not in FRAME_MARKERS:
            # A capture failure's message has no fixed layout: it runs to its
            # user frames, or to the next traceback.
            if text.startswith(TRACEBACK) or text.strip() in CHAINED:
                self._end()
                self._take(number, line)
            else:
                self._add(line)
        elif text.strip() in FRAME_MARKERS:
            self.phase = "frames"
            self._add(line)
        elif not text.strip() or _indented(text) or text.startswith(_MESSAGE_LINES):
            self._add(line)
        elif self.block and self.block.lines[-1].startswith("*** While handling"):
            self._add(line)
        else:
            # An unindented line is a gb_type only if "  Explanation:" follows.
            self.held = (number, line)

    def _in_frames(self, number: int, line: Line) -> None:
        text = line.text
        if text.strip() and _indented(text):
            self._add(line)
            return
        assert self.block is not None
        if self.tail or EXC_HEADER.match(self.block.lines[0]):
            self._end()
            self._take(number, line)
            return
        self.phase, self.gap = "gap", 0
        self._in_gap(number, line)

    def _in_gap(self, number: int, line: Line) -> None:
        text = line.text
        if not text.strip() and self.gap < 2:
            self.gap += 1
            self._add(line)
        elif text.startswith(TRACEBACK):
            self.phase = "traceback"
            self._add(line)
        else:
            self._end()
            self._take(number, line)

    def _in_traceback(self, number: int, line: Line) -> None:
        text = line.text
        if EXC_HEADER.match(text):
            self.phase, self.tail = "message", True
            self._add(line)
        elif text.strip() and _indented(text):
            self._add(line)
        else:
            self._end()
            self._take(number, line)


# TORCHDYNAMO_VERBOSE=1 splits the user stack: the frames above Dynamo, this
# line, then the frames of the traced function (symbolic_convert.py, log_graph_break).
_VERBOSE_SPLIT = "========== most recent `torch.compile` tracing attempt started here"
# Without TORCHDYNAMO_VERBOSE, Dynamo shows a resume function as the function it
# resumes (symbolic_convert.py, collapse_resume_frames); verbose output does not.
_RESUME_FRAME = re.compile(r"(, in )torch_dynamo_resume_in_(\w+?)_at_\d+$")


def _frames_after(lines: list[str], start: int) -> list[str]:
    out = []
    rest = lines[start:]
    split = False  # just past the verbose split line: blank lines before its frames
    for i, text in enumerate(rest):
        if text.strip() in FRAME_MARKERS:
            continue
        if text.startswith(_VERBOSE_SPLIT):
            split = True
            continue
        if not text.strip():
            if split or next((t for t in rest[i + 1:] if t.strip()), "").startswith(_VERBOSE_SPLIT):
                continue
            break
        if not _indented(text):
            break
        split = False
        out.append(_RESUME_FRAME.sub(r"\1\2", text))
    return out


def _marker(lines: list[str], begin: int = 0, end: int | None = None) -> int | None:
    stop = len(lines) if end is None else end
    return next((i for i in range(begin, stop) if lines[i].strip() in FRAME_MARKERS), None)


def gb_type_of(message: list[str]) -> str:
    """The gb_type: the line right before the last ``Explanation:`` line."""
    for i in range(len(message) - 1, 0, -1):
        if message[i].lstrip().startswith("Explanation:"):
            head = message[i - 1].strip()
            m = EXC_HEADER.match(head)
            return m.group("rest").strip() if m else head
    return ""


def is_capture_failure(text: str) -> bool:
    """Whether ``text`` is the last line of a capture failure's traceback."""
    m = EXC_HEADER.match(text)
    return m is not None and m.group("name") in _CAPTURE_NAMES


def _break(mode: str, message: str, gb_type: str, stack: list, *, duplicate: bool = False,
           site=None) -> BreakEvent:
    """The event of a break reported with ``message``. A follow-up break's
    message nests the break it was raised from (events.NESTED): that one
    becomes its ``cause``, as the live capture links them."""
    parsed = parse_unsupported(message, gb_type)
    at = site if site is not None else (stack[-1] if stack else None)
    event = BreakEvent(mode, parsed.gb_type, parsed, stack, at, duplicate=duplicate)
    nested = split_nested(message)
    if len(nested) > 1:
        earlier = NESTED.join(nested[:-1])
        event.cause = _break(mode, earlier, gb_type_of(nested[-2].splitlines()), stack, duplicate=duplicate, site=at)
        event.fallbacks.append("cause")
    return event


def _capture_failure(lines: list[str], mode: str, name: str, rest: str) -> BreakEvent:
    """A capture failure that is not an ``Unsupported`` (capture/exceptions.py),
    as its traceback prints it: the message, then the user frames."""
    marker = _marker(lines)
    text = "\n".join([rest] + lines[1:marker if marker is not None else len(lines)])
    names = exceptions.names_in_text(name, text, [])
    label = exceptions.label_of(names)
    stack = parse_stack("\n".join(_frames_after(lines, marker))) if marker is not None else []
    return BreakEvent(mode, label, ParsedMessage(label, first_paragraph(text), [], "", ""), stack,
                      stack[-1] if stack else None, exceptions=names)


def with_chain(event: BreakEvent, chained: list[str]) -> BreakEvent:
    """A capture failure raised from earlier ones (``chained``: their qualified
    type names, outermost first), named as the live capture names it."""
    names = [event.exceptions[0], *chained] if event.exceptions else list(chained)
    label = exceptions.label_of(names)
    return dataclasses.replace(event, gb_type=label, message=dataclasses.replace(event.message, gb_type=label),
                               exceptions=names)


def chained_names(lines: list[str]) -> list[str]:
    """The capture failures a traceback shows before its last exception, each
    followed by Python's line that chains it to the next: their qualified
    names, outermost first."""
    names = []
    for i, text in enumerate(lines):
        if is_capture_failure(text) and any(t.strip() in CHAINED for t in lines[i + 1:]):
            names.append(EXC_HEADER.match(text).group("name"))  # type: ignore[union-attr]
    return names[::-1]


def _exception(lines: list[str], mode: str) -> BreakEvent | Crash | Unparsed:
    m = EXC_HEADER.match(lines[0])
    assert m is not None
    name = m.group("name")
    if name in _CAPTURE_NAMES:
        return _capture_failure(lines, mode, name, m.group("rest"))
    marker = _marker(lines)
    message = [m.group("rest")] + lines[1:marker if marker is not None else len(lines)]
    gb_type = gb_type_of([lines[0]] + lines[1:marker if marker is not None else len(lines)])
    cls = name.rsplit(".", 1)[-1]
    if cls != "Unsupported":
        return Crash(f"{cls}: {m.group('rest').strip()}")
    if not gb_type and marker is None:
        return Unparsed("an Unsupported exception without Dynamo's explanation or user code (cut short?)")
    stack = parse_stack("\n".join(_frames_after(lines, marker))) if marker is not None else []
    return _break(mode, "\n".join(message), gb_type, stack)


def _tail(lines: list[str]) -> int | None:
    return next((i for i in range(len(lines) - 1, 0, -1) if EXC_HEADER.match(lines[i])), None)


def parse_report(lines: list[str], mode: str) -> BreakEvent | Crash | Unparsed:
    """One report (see the module docstring) as the capture's raw event.

    ``mode`` is the mode of a thrown exception ('fullgraph' in a server log);
    handled breaks and skips are 'explain' events, as the live listener files them.
    """
    if not lines:
        return Unparsed("empty report")
    first = lines[0]
    if EXC_HEADER.match(first):
        return _exception(lines, mode)
    tail = _tail(lines)
    body = lines[:tail] if tail is not None else lines
    reason_at = next((i for i, t in enumerate(body) if t.startswith(REASON)), None)
    if first.startswith(SKIP):
        if tail is None:
            return Unparsed("a skipped frame without Dynamo's reason (the traceback after it is missing)")
        tail_message = lines[tail:_marker(lines, tail) or len(lines)]
        message = [EXC_HEADER.match(lines[tail]).group("rest")] + tail_message[1:]  # type: ignore[union-attr]
        gb_type = gb_type_of(tail_message)
        marker = _marker(body)
        if marker is None:
            return Unparsed("a skipped frame without its user code (cut short?)")
        stack = parse_stack("\n".join(_frames_after(body, marker)))
        return _break("explain", "\n".join(message), gb_type, stack)
    if reason_at is None:
        return Unparsed("a graph break without its 'Graph Break Reason' (cut short?)")
    marker = _marker(body, reason_at)
    end = marker if marker is not None else len(body)
    reason = [body[reason_at][len(REASON):].strip()] + body[reason_at + 1:end]
    for stop in ("Stack variable source attribution:",):
        reason = reason[:next((i for i, t in enumerate(reason) if t.startswith(stop)), len(reason))]
    if reason and _TRACE_REASON.match(reason[0]):
        reason = reason[1:]
    gb_type = gb_type_of(reason)
    if not gb_type and tail is not None:
        gb_type = gb_type_of(lines[tail:])
    if first.startswith(DUPLICATE):
        at = _BREAK_AT.search(first)
        if at is None:
            return Unparsed("a repeated graph break without its location")
        # Only the site's location is in the text. The analysis merges the
        # event with the earlier full report of the same site (by location).
        sites = parse_stack(f'  File "{at.group("file")}", line {at.group("line")}, in {_UNKNOWN}')
        return _break("explain", "\n".join(reason), gb_type, [], duplicate=True, site=sites[0])
    if marker is None:
        return Unparsed("a graph break without its user code traceback (cut short?)")
    stack = parse_stack("\n".join(_frames_after(body, marker)))
    return _break("explain", "\n".join(reason), gb_type, stack)

