"""A diff of two diagnoses (graphbreak_doctor.gate.diff computes it; renderers
show it): each side in a few words, the break keys only one side has, the
keys both have, and what else changed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graphbreak_doctor.model.baseline import BaselineEntry
from graphbreak_doctor.model.json_text import dumps, plain

DIFF_SCHEMA_VERSION = 1
KIND = "graphbreak-doctor diff"


@dataclass
class Side:
    """One of the two diagnoses, in a few words."""

    label: str
    target: str
    verdict: str
    error: str
    environment: dict[str, str]
    device: dict[str, Any]
    breaks: int


@dataclass
class Pair:
    """A key both sides have, with each side's entry."""

    a: BaselineEntry
    b: BaselineEntry


@dataclass
class Change:
    what: str
    a: str
    b: str


@dataclass
class FindingsDiff:
    a: Side
    b: Side
    only_a: list[BaselineEntry] = field(default_factory=list)
    only_b: list[BaselineEntry] = field(default_factory=list)
    both: list[Pair] = field(default_factory=list)
    verdict: Change | None = None
    versions: list[Change] = field(default_factory=list)
    device: list[Change] = field(default_factory=list)
    schema_version: int = DIFF_SCHEMA_VERSION
    kind: str = KIND

    @property
    def match_rate(self) -> float:
        """Keys both sides have, of all keys (1.0 when neither has a break)."""
        total = len(self.only_a) + len(self.only_b) + len(self.both)
        return len(self.both) / total if total else 1.0

    @property
    def identical(self) -> bool:
        return not (self.only_a or self.only_b or self.verdict)

    def to_dict(self) -> dict[str, Any]:
        data = plain(self)
        data["match_rate"] = round(self.match_rate, 4)
        return {"schema_version": data.pop("schema_version"), "kind": data.pop("kind"), **data}

    def to_json(self) -> str:
        return dumps(self.to_dict())
