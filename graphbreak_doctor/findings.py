"""The findings model: the single contract between capture, analysis and renderers.

Plain dataclasses with a JSON form. Field order is the JSON order, lists are
kept in a stable order by the stages that fill them, and nothing run-specific
(timestamps, object addresses) is stored, so the same run gives byte-identical
JSON -- CI baselines depend on that.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1

@dataclass(frozen=True)
class Frame:
    """One frame of a user stack, as Dynamo reports it."""

    file: str
    line: int
    function: str
    qualname: str = ""
    code: str = ""

    def location(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Fix:
    """A suggested change: what to do, why, and an example."""

    recipe: str
    summary: str
    detail: str
    snippet: str


@dataclass
class JitRequest:
    """A FlashInfer JIT build or load seen while tracing (emulated devices)."""

    name: str
    action: str
    break_id: str = ""


@dataclass
class Break:
    """One distinct graph break, merged over every time Dynamo hit it."""

    id: str
    category: str
    gb_id: str
    gb_type: str
    explanation: str
    hints: list[str]
    culprit: str
    # The call the actionable frame made that led to the break ("subprocess.check_output").
    via: str
    site: Frame
    actionable_frame: Frame | None
    package: str
    stack: list[Frame]
    count: int
    modes: list[str]
    fix: Fix
    reason: str = ""
    jit: list[JitRequest] = field(default_factory=list)
    # Id of the earlier break this one follows from (Dynamo could not resume).
    caused_by: str = ""

    def key(self) -> tuple[str, str, str, str]:
        """Identity that survives line shifts: used by baselines."""
        qual = self.actionable_frame.qualname if self.actionable_frame else ""
        return (self.category, self.package, qual, self.gb_type)


@dataclass
class Hazard:
    """A Dynamo warning that is not a break (e.g. an ignored lru_cache wrapper)."""

    kind: str
    message: str
    site: Frame | None
    count: int = 1


@dataclass
class UnparsedEvent:
    """A report of a break (live, or in an ingested log) the doctor could not
    turn into a :class:`Break`. Never dropped silently: counted in the findings,
    shown in the summary, and `check` fails (exit 3) while any is present."""

    source: str
    reason: str
    excerpt: str = ""


@dataclass
class FullgraphVerdict:
    ran: bool = False
    ok: bool | None = None
    error: str = ""
    break_id: str = ""
    crashed: bool = False


@dataclass
class GraphInfo:
    """One FX graph Dynamo captured in explain mode."""

    index: int
    mode: str
    ops: int
    op_names: list[str] = field(default_factory=list)
    decompiled: str = ""
    # Piecewise mode: pieces SGLang's runner would cut the graph into.
    pieces: int = 0


@dataclass
class DecompiledCode:
    """Bytecode Dynamo generated for a frame (the traced function or a resume
    function after a break), decompiled to Python by depyf."""

    name: str
    mode: str
    source: str


@dataclass
class RootCause:
    """Breaks explained by one function someone can change."""

    frame: Frame
    package: str
    break_ids: list[str]
    categories: list[str]


@dataclass
class Rung:
    """One step of the fix ladder (see graphbreak_doctor.fix)."""

    step: int
    break_id: str
    category: str
    gb_type: str
    site: str
    recipe: str
    patch: str
    where: str
    result: str
    detail: str = ""


@dataclass
class Findings:
    schema_version: int = SCHEMA_VERSION
    target: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    modes: list[str] = field(default_factory=list)
    fullgraph: FullgraphVerdict = field(default_factory=FullgraphVerdict)
    graph_count: int = 0
    graphs: list[GraphInfo] = field(default_factory=list)
    breaks: list[Break] = field(default_factory=list)
    hazards: list[Hazard] = field(default_factory=list)
    root_causes: list[RootCause] = field(default_factory=list)
    jit_requests: list[JitRequest] = field(default_factory=list)
    ladder: list[Rung] = field(default_factory=list)
    # Added after schema 1 shipped; older JSON without it loads as [].
    resume_code: list[DecompiledCode] = field(default_factory=list)
    # Added after schema 1 shipped; older JSON without it loads as [].
    unparsed_events: list[UnparsedEvent] = field(default_factory=list)

    def break_by_id(self, break_id: str) -> Break | None:
        return next((b for b in self.breaks if b.id == break_id), None)

    def categories(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for b in self.breaks:
            counts[b.category] = counts.get(b.category, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Findings:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"findings schema version {version!r} is not supported "
                f"(this graphbreak-doctor reads version {SCHEMA_VERSION})"
            )
        return _build(cls, data)

    @classmethod
    def from_json(cls, text: str) -> Findings:
        return cls.from_dict(json.loads(text))


def _build(tp: Any, value: Any) -> Any:
    """Rebuild a value of type ``tp`` from its ``dataclasses.asdict`` form."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(inner[0], value)
    if origin is list:
        (item,) = typing.get_args(tp)
        return [_build(item, v) for v in value]
    if origin is dict:
        return dict(value)
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        return tp(**{k: _build(hints[k], v) for k, v in value.items() if k in names})
    return value
