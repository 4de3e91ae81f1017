"""A baseline: the graph breaks a project has accepted, per target and device
(graphbreak_doctor.gate.baseline writes and checks it), and the compile-map
regions it accepted, with their verdicts. Read with the typed JSON loader."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graphbreak_doctor.model.json_text import dumps, plain
from graphbreak_doctor.model.loader import build
from graphbreak_doctor.model.vocabulary import REGION_BREAKS, REGION_CRASHED, REGION_FAILS, REGION_OK

BASELINE_SCHEMA_VERSION = 1
KIND = "graphbreak-doctor baseline"

Key = tuple[str, str, str, str]
KEY_FIELDS = ("category", "package", "qualname", "gb_type")


class BaselineError(ValueError):
    """An unreadable or inconsistent baseline file (a usage error: exit 2)."""


# A compile-map region's verdicts, best first: a verdict further down is worse.
REGION_ORDER = (REGION_OK, REGION_BREAKS, REGION_FAILS, REGION_CRASHED)


@dataclass
class BaselineEntry:
    """One accepted break key (see graphbreak_doctor.gate.baseline)."""

    category: str
    package: str
    qualname: str
    gb_type: str
    modes: list[str] = field(default_factory=list)
    # Distinct breaks with this key and the times Dynamo hit them (hints only).
    breaks: int = 1
    count: int = 1
    hint: str = ""

    def key(self) -> tuple[str, str, str, str]:
        return (self.category, self.package, self.qualname, self.gb_type)

    def describe(self) -> str:
        where = f" -- {self.hint}" if self.hint else ""
        return f"[{self.category}] {self.qualname or '?'} ({self.package}): {self.gb_type}{where}"


@dataclass
class RegionEntry:
    """One torch.compile region a phase entered, as accepted: its verdict and
    how many breaks it had (a region is named by its compiled function)."""

    function: str
    verdict: str
    breaks: int = 0


@dataclass
class TargetBaseline:
    target: str
    mode: str = ""
    entries: list[BaselineEntry] = field(default_factory=list)
    # The compile map's entered regions (a target traced with its map).
    regions: list[RegionEntry] = field(default_factory=list)

    def region(self, function: str) -> RegionEntry | None:
        return next((r for r in self.regions if r.function == function), None)

    def keys(self) -> set[Key]:
        return {e.key() for e in self.entries}


@dataclass
class Baseline:
    device: str
    targets: list[TargetBaseline] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    schema_version: int = BASELINE_SCHEMA_VERSION
    kind: str = KIND

    def for_target(self, target: str) -> TargetBaseline | None:
        return next((t for t in self.targets if t.target == target), None)

    def to_json(self) -> str:
        data = {
            "schema_version": self.schema_version,
            "kind": self.kind,
            "device": self.device,
            "environment": self.environment,
            # "regions" only for a target traced with its compile map.
            "targets": [{k: v for k, v in plain(t).items() if k != "regions" or v} for t in self.targets],
        }
        return dumps(data)


def _require(cond: Any, path: str, what: str) -> None:
    if not cond:
        raise BaselineError(f"baseline {path}: {what}")


def parse(data: Any, path: str = "<baseline>") -> Baseline:
    """A baseline from its JSON form; BaselineError (one line) when it is not one."""
    _require(isinstance(data, dict), path, "expected a JSON object")
    _require(data.get("kind") == KIND, path, f"not a graphbreak-doctor baseline (kind {data.get('kind')!r})")
    version = data.get("schema_version")
    _require(version == BASELINE_SCHEMA_VERSION, path,
             f"schema version {version!r} is not supported (this graphbreak-doctor reads {BASELINE_SCHEMA_VERSION})")
    _require(isinstance(data.get("targets"), list), path, "missing 'targets' list")
    for i, t in enumerate(data["targets"]):
        _require(isinstance(t, dict) and isinstance(t.get("entries"), list), path, f"targets[{i}] needs an 'entries' list")
    try:
        baseline = build(Baseline, data, "")
    except ValueError as e:
        raise BaselineError(f"baseline {path}: {str(e).lstrip('.')}") from None
    _require(baseline.device, path, "missing 'device'")
    for i, t in enumerate(baseline.targets):
        _require(t.target, path, f"targets[{i}] needs a 'target' name")
        for j, r in enumerate(t.regions):
            where = f"targets[{i}].regions[{j}]"
            _require(r.function, path, f"{where} needs a 'function' name")
            _require(r.verdict in REGION_ORDER, path, f"{where}: 'verdict' must be one of {', '.join(REGION_ORDER)}")
    baseline.environment = {str(k): str(v) for k, v in baseline.environment.items()}
    return baseline
