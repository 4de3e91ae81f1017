"""Read what a real run left behind and diagnose it like a live trace.

    findings = ingest(["/tmp/tt"])                 # a TORCH_TRACE folder (all ranks)
    findings = ingest(["server.log.gz"], "text")   # a server log, a pasted traceback

Inputs: TORCH_TRACE files (``torch_trace.py``) and plain-text logs
(``text_log.py``), possibly compressed (``source.py``). Dynamo's texts become
the capture's raw events (``dynamo_text.py``) and the findings are built by
the same analysis as a live trace (``collection.py``). The findings say that
they were ingested (``target.facts["ingested"]``: files, format, ranks, per-frame
compile statistics) and list what could not be parsed
(``unparsed_events``).
"""

from __future__ import annotations

from graphbreak_doctor.ingest.source import FORMATS, IngestError

__all__ = ["FORMATS", "IngestError", "ingest", "ingest_collection"]


def __getattr__(name: str):
    # Reading builds findings with the analysis, which imports torch; the
    # formats and the error do not, so the command line can offer them cheaply.
    if name in ("ingest", "ingest_collection"):
        from graphbreak_doctor.ingest import read

        return getattr(read, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
