"""Reading inputs into a collection, and the findings of it (see the package docstring)."""

from __future__ import annotations

from graphbreak_doctor.model import Findings
from graphbreak_doctor.ingest import source
from graphbreak_doctor.ingest.collection import Collection
from graphbreak_doctor.ingest.source import FORMATS, IngestError
from graphbreak_doctor.ingest.text_log import read_text
from graphbreak_doctor.ingest.torch_trace import TraceReader, looks_like_trace


def _format_of(file: source.InputFile, requested: str) -> str:
    if requested != "auto":
        return requested
    if file.path.name.startswith(source.TRACE_PREFIX):
        return "torch-trace"
    return "torch-trace" if looks_like_trace(source.peek(file, 1)) else "text"


def ingest_collection(paths: list[str], fmt: str = "auto") -> Collection:
    """Read every file; an IngestError when an input cannot be read at all."""
    if fmt not in FORMATS:
        raise IngestError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
    if not paths:
        raise IngestError("no input: give a TORCH_TRACE folder or file, or a log")
    collection = Collection()
    for file in source.expand(paths):
        try:
            _read(collection, file, fmt)
        except IngestError as e:
            if not file.in_folder:
                raise
            # Something else in a TORCH_TRACE or log folder (a binary, a broken archive).
            record = collection.file(file.name, "skipped", file.compression, None)
            collection.unparsed_block(record, file.name, f"skipped: {e}", [])
    return collection


def _read(collection: Collection, file: source.InputFile, fmt: str) -> None:
    kind = _format_of(file, fmt)
    record = collection.file(file.name, kind, file.compression, file.rank_from_name())
    lines = source.lines(file, on_cut=lambda why: collection.cut(record, why),
                         on_long=lambda number: collection.long_line(record, number))
    if kind == "torch-trace":
        TraceReader(collection, record).read(lines)
    else:
        read_text(collection, record, lines)


def ingest(paths: list[str], fmt: str = "auto") -> Findings:
    """Findings from the given files and folders (see the module docstring)."""
    collection = ingest_collection(paths, fmt)
    return collection.findings(paths, _overall_format(collection))


def _overall_format(collection: Collection) -> str:
    kinds = sorted({f.format for f in collection.files if f.format != "skipped"}) or ["none"]
    return kinds[0] if len(kinds) == 1 else "mixed"
