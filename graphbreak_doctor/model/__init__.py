"""The data every stage hands on and every renderer reads: findings, the
gate's report, the shared vocabulary, and the typed JSON loader. Plain
dataclasses, no torch; nothing here imports another part of the doctor.

- ``vocabulary``: modes, outcomes, region verdicts, rung results, defaults;
- ``findings``: one diagnosis (the contract between capture, analysis and
  renderers);
- ``gate``: what ``check`` decided; ``baseline``: what a project accepted;
- ``located``: every problem a check can fail on at its line (breaks,
  capture hazards, recompile-limit hits): what code-pointing renderers read;
- ``diff``: two diagnoses compared; ``matrix``: a version matrix's cells;
- ``loader``: the typed JSON loader findings and baselines are read with.
- ``json_text``: the JSON text of every document written (non-finite
  numbers, lone surrogates and deep nesting made safe).
"""

from graphbreak_doctor.model.findings import (
    Break,
    DecompiledCode,
    Findings,
    Fix,
    FixOutcome,
    PatchChange,
    PatchCheck,
    WrittenPatch,
    Frame,
    FullgraphVerdict,
    GraphInfo,
    Hazard,
    JitRequest,
    Region,
    RootCause,
    Rung,
    SourceExcerpt,
    TargetInfo,
    UnparsedEvent,
    doc_url,
)
from graphbreak_doctor.model.baseline import BaselineEntry
from graphbreak_doctor.model.gate import CaseResult, CheckFailure, GateReport, TargetResult
from graphbreak_doctor.model.located import Located
from graphbreak_doctor.model.vocabulary import (
    COMPLETE,
    CRASHED,
    DEFAULT_DEVICE,
    DEFAULT_FIX_STEPS,
    FULLGRAPH_MODES,
    INTERRUPTED,
    MAP_MODE,
    SIZES_MODE,
    CUDAGRAPH_MODE,
    MODE_CHOICES,
    REGION_BREAKS,
    REGION_CRASHED,
    REGION_FAILS,
    REGION_OK,
    SCHEMA_VERSION,
    TIMED_OUT,
    VERIFIED_RESULTS,
    RungResult,
    modes_for,
)

__all__ = [
    "BaselineEntry", "Break", "CaseResult", "CheckFailure", "DecompiledCode", "Findings", "Fix", "FixOutcome", "PatchChange", "PatchCheck", "WrittenPatch",
    "Frame", "FullgraphVerdict", "GateReport", "GraphInfo", "Hazard", "JitRequest", "Located", "Region", "RootCause", "Rung",
    "SourceExcerpt", "TargetInfo", "TargetResult", "UnparsedEvent", "doc_url",
    "COMPLETE", "CRASHED", "DEFAULT_DEVICE", "DEFAULT_FIX_STEPS", "FULLGRAPH_MODES", "INTERRUPTED", "MAP_MODE", "SIZES_MODE",
    "CUDAGRAPH_MODE",    "MODE_CHOICES", "REGION_BREAKS", "REGION_CRASHED", "REGION_FAILS", "REGION_OK", "SCHEMA_VERSION", "TIMED_OUT",
    "VERIFIED_RESULTS", "RungResult", "modes_for",
]
