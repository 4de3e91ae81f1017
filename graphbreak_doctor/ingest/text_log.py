"""Plain-text logs: a server's output, a pasted traceback, ``TORCH_LOGS=graph_breaks``.

Each line loses its ANSI colours, its ``[rankN]:`` prefix (the rank is kept)
and torch's glog prefix; :class:`ReportScanner` finds Dynamo's reports among
everything else, and each is parsed into a raw event. A thrown
``Unsupported`` is what ``fullgraph=True`` raises, so it is a fullgraph-mode
event; handled breaks (``TORCH_LOGS=graph_breaks``) are explain-mode events.
"""

from __future__ import annotations

from typing import Iterable

from graphbreak_doctor.capture.events import BreakEvent
from graphbreak_doctor.capture.exceptions import CAPTURE_FAILURES
from graphbreak_doctor.ingest.collection import Collection, FileRecord
from graphbreak_doctor.ingest.dynamo_text import CHAINED, Block, Crash, ReportScanner, split_prefix, with_chain
from graphbreak_doctor.ingest.source import strip_ansi


def read_text(collection: Collection, record: FileRecord, lines: Iterable[str]) -> None:
    reader = _Reader(collection, record)
    scanner = ReportScanner()
    number = 0
    for number, raw in enumerate(lines, 1):
        line = split_prefix(strip_ansi(raw))
        if line.rank is not None:
            record.ranks.add(line.rank)
        for block in scanner.feed(number, line):
            reader.report(block)
        if line.text.strip() in CHAINED:
            reader.chained()
    last = scanner.close()
    if last and record.cut:
        # The report open when the file broke off is incomplete.
        cut = last.pop()
        collection.unparsed_block(record, f"{record.path}:{cut.start}", "a report cut off where the file ends early",
                                  cut.lines)
    for block in last:
        reader.report(block)
    reader.flush()
    record.lines = number


class _Reader:
    """Keeps each report. A capture failure is held until the next report: a
    traceback that chains it to another capture failure ("The above exception
    was the direct cause ...") is one failure, named by the whole chain."""

    def __init__(self, collection: Collection, record: FileRecord) -> None:
        self.collection, self.record = collection, record
        self.held: BreakEvent | None = None
        self.linked = False

    def report(self, block: Block) -> None:
        outcome = self.collection.report(self.record, block.lines, f"{self.record.path}:{block.start}", "fullgraph",
                                         resolve=self._resolve)
        if isinstance(outcome, Crash):
            self.flush()
            self.collection.crash(outcome.error)

    def _resolve(self, event: BreakEvent) -> BreakEvent | None:
        capture = bool(event.exceptions) and event.exceptions[0] in CAPTURE_FAILURES
        if capture and self.held is not None and self.linked:
            event = with_chain(event, self.held.exceptions)
            self.held = None
        self.flush()
        if capture:
            self.held = event
            return None
        return event

    def chained(self) -> None:
        self.linked = self.held is not None

    def flush(self) -> None:
        if self.held is not None:
            self.collection.event(self.record, self.held)
        self.held, self.linked = None, False
