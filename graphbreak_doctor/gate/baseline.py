"""Baselines: the graph breaks a project has accepted, per target and device.

A baseline entry is a break's line-number-free identity, ``Break.key()`` =
(category, package, actionable qualname, gb_type), so edits that only move
code do not fail the gate. Each entry also keeps a human hint (where it was
seen, how often) that is never used for matching. Breaks that share a key
(the same function breaking at two sites the same way) make one entry.

The file is JSON with a schema version; one file can hold several targets
(the dense and the MoE layer) for one device.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from graphbreak_doctor.frames import short_path
from graphbreak_doctor.model import (REGION_BREAKS, REGION_CRASHED, REGION_FAILS, REGION_OK, BaselineEntry, Break,
                                        Findings)

BASELINE_SCHEMA_VERSION = 1
KIND = "graphbreak-doctor baseline"

Key = tuple[str, str, str, str]
KEY_FIELDS = ("category", "package", "qualname", "gb_type")


class BaselineError(ValueError):
    """An unreadable or inconsistent baseline file (a usage error: exit 2)."""


# A compile-map region's verdicts, best first: a verdict further down is worse.
REGION_ORDER = (REGION_OK, REGION_BREAKS, REGION_FAILS, REGION_CRASHED)


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
    mode: str
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
            "targets": [{k: v for k, v in asdict(t).items() if k != "regions" or v} for t in self.targets],
        }
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _short(path: str) -> str:
    """Hints read the same on every machine (they are never matched)."""
    return short_path(path, portable=True)


def hint_of(b: Break) -> str:
    act = b.actionable_frame
    where = f"{_short(act.file)}:{act.line}" if act else ""
    site = f"stops at {_short(b.site.file)}:{b.site.line}"
    return f"{where}, {site}" if where and (act.file, act.line) != (b.site.file, b.site.line) else where or site


def entries_from(breaks: list[Break]) -> list[BaselineEntry]:
    """One entry per key, sorted, so the same run writes the same file."""
    by_key: dict[Key, BaselineEntry] = {}
    for b in breaks:
        category, package, qualname, gb_type = b.key()
        entry = by_key.get(b.key())
        if entry is None:
            by_key[b.key()] = BaselineEntry(category, package, qualname, gb_type, list(b.modes), 1, b.count, hint_of(b))
            continue
        entry.breaks += 1
        entry.count += b.count
        entry.modes = [m for m in ("explain", "fullgraph", "piecewise") if m in entry.modes or m in b.modes]
    return [by_key[k] for k in sorted(by_key)]


def target_baseline(findings: Findings, mode: str) -> TargetBaseline:
    regions = sorted((RegionEntry(r.function, r.verdict, len(r.breaks)) for r in findings.regions if r.verdict),
                     key=lambda r: r.function)
    return TargetBaseline(target=findings.target.spec, mode=mode, entries=entries_from(findings.breaks),
                          regions=regions)


def updated(previous: Baseline | None, device: str, written: list[TargetBaseline], environment: dict[str, str]) -> Baseline:
    """``previous`` with the written targets replaced (or added); other targets kept."""
    if previous is not None and previous.device != device:
        raise BaselineError(
            f"the baseline file holds device {previous.device!r}, not {device!r}: write a separate file per device"
        )
    names = {t.target for t in written}
    kept = [t for t in previous.targets if t.target not in names] if previous else []
    targets = sorted(kept + written, key=lambda t: t.target)
    env = {k: v for k, v in environment.items() if k != "python" and v}
    return Baseline(device=device, targets=targets, environment=env)


def version_notes(baseline: Baseline, current: dict[str, str], path: str) -> list[str]:
    """Library versions that differ from the ones the baseline was written with:
    breaks come and go with them (FlashInfer 0.6.3 and 0.7.4 differ)."""
    return [
        f"baseline {path} was written with {name} {was}, this run has {current.get(name) or 'none'}"
        for name, was in sorted(baseline.environment.items())
        if name != "python" and current.get(name, "") != was
    ]


def _require(cond: bool, path: str, what: str) -> None:
    if not cond:
        raise BaselineError(f"baseline {path}: {what}")


def _str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def parse(data: Any, path: str = "<baseline>") -> Baseline:
    _require(isinstance(data, dict), path, "expected a JSON object")
    _require(data.get("kind") == KIND, path, f"not a graphbreak-doctor baseline (kind {data.get('kind')!r})")
    version = data.get("schema_version")
    _require(version == BASELINE_SCHEMA_VERSION, path,
             f"schema version {version!r} is not supported (this graphbreak-doctor reads {BASELINE_SCHEMA_VERSION})")
    _require(isinstance(data.get("device"), str) and data["device"], path, "missing 'device'")
    _require(isinstance(data.get("targets"), list), path, "missing 'targets' list")
    env = data.get("environment", {})
    _require(isinstance(env, dict), path, "'environment' must be an object")
    targets = []
    for i, t in enumerate(data["targets"]):
        _require(isinstance(t, dict) and isinstance(t.get("target"), str) and t["target"], path,
                 f"targets[{i}] needs a 'target' name")
        _require(isinstance(t.get("entries"), list), path, f"targets[{i}] needs an 'entries' list")
        entries = []
        for j, e in enumerate(t["entries"]):
            where = f"targets[{i}].entries[{j}]"
            _require(isinstance(e, dict), path, f"{where} must be an object")
            for name in KEY_FIELDS:
                _require(isinstance(e.get(name), str), path, f"{where} needs a string {name!r}")
            _require(_str_list(e.get("modes", [])), path, f"{where}: 'modes' must be a list of strings")
            for name in ("breaks", "count"):
                _require(isinstance(e.get(name, 1), int), path, f"{where}: {name!r} must be an integer")
            _require(isinstance(e.get("hint", ""), str), path, f"{where}: 'hint' must be a string")
            entries.append(BaselineEntry(
                e["category"], e["package"], e["qualname"], e["gb_type"],
                list(e.get("modes", [])), e.get("breaks", 1), e.get("count", 1), e.get("hint", ""),
            ))
        regions = []
        _require(isinstance(t.get("regions", []), list), path, f"targets[{i}]: 'regions' must be a list")
        for j, r in enumerate(t.get("regions", [])):
            where = f"targets[{i}].regions[{j}]"
            _require(isinstance(r, dict) and isinstance(r.get("function"), str) and r["function"], path,
                     f"{where} needs a 'function' name")
            _require(r.get("verdict") in REGION_ORDER, path,
                     f"{where}: 'verdict' must be one of {', '.join(REGION_ORDER)}")
            _require(isinstance(r.get("breaks", 0), int) and not isinstance(r.get("breaks", 0), bool), path,
                     f"{where}: 'breaks' must be an integer")
            regions.append(RegionEntry(r["function"], r["verdict"], r.get("breaks", 0)))
        targets.append(TargetBaseline(target=t["target"], mode=str(t.get("mode", "")), entries=entries,
                                      regions=regions))
    return Baseline(device=data["device"], targets=targets, environment={str(k): str(v) for k, v in env.items()})


def load(path: str | os.PathLike) -> Baseline:
    path = str(path)
    if os.path.exists(path) and not os.path.isfile(path):  # a folder, a FIFO, a device: never read
        raise BaselineError(f"baseline {path} is not a regular file")
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise BaselineError(f"baseline {path} does not exist (create it with `graphbreak-doctor baseline write`)")
    except OSError as e:
        raise BaselineError(f"cannot read baseline {path}: {e.strerror or e}")
    except UnicodeDecodeError:
        raise BaselineError(f"baseline {path} is not UTF-8 text")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise BaselineError(f"baseline {path} is not valid JSON: {e.msg} at line {e.lineno}")
    except RecursionError:
        raise BaselineError(f"baseline {path} is JSON nested too deeply to be a baseline") from None
    return parse(data, path)
