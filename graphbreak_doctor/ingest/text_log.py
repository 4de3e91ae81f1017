"""Plain-text logs: a server's output, a pasted traceback, ``TORCH_LOGS=graph_breaks``.

Each line loses its ANSI colours, its ``[rankN]:`` prefix (the rank is kept)
and torch's glog prefix; :class:`ReportScanner` finds Dynamo's reports among
everything else, and each is parsed into a raw event. A thrown
``Unsupported`` is what ``fullgraph=True`` raises, so it is a fullgraph-mode
event; handled breaks (``TORCH_LOGS=graph_breaks``) are explain-mode events.
"""

from __future__ import annotations

from typing import Iterable

from graphbreak_doctor.ingest.collection import Collection, FileRecord
from graphbreak_doctor.ingest.dynamo_text import Block, Crash, ReportScanner, split_prefix
from graphbreak_doctor.ingest.source import strip_ansi


def read_text(collection: Collection, record: FileRecord, lines: Iterable[str]) -> None:
    scanner = ReportScanner()
    number = 0
    for number, raw in enumerate(lines, 1):
        line = split_prefix(strip_ansi(raw))
        if line.rank is not None:
            record.ranks.add(line.rank)
        for block in scanner.feed(number, line):
            _report(collection, record, block)
    last = scanner.close()
    if last and record.cut:
        # The report open when the file broke off is incomplete.
        cut = last.pop()
        collection.unparsed_block(record, f"{record.path}:{cut.start}", "a report cut off where the file ends early",
                                  cut.lines)
    for block in last:
        _report(collection, record, block)
    record.lines = number


def _report(collection: Collection, record: FileRecord, block: Block) -> None:
    outcome = collection.report(record, block.lines, f"{record.path}:{block.start}", "fullgraph")
    if isinstance(outcome, Crash):
        collection.crash(outcome.error)
