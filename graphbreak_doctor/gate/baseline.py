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
from pathlib import Path

from graphbreak_doctor.frames import at, package_of
from graphbreak_doctor.model import CUDAGRAPH_MODE, Break, Findings
from graphbreak_doctor.model.cudagraph import CudaGraphHazard, CudaGraphMap
# The data model lives in graphbreak_doctor.model.baseline; the gate's callers
# reach it through here.
from graphbreak_doctor.model.baseline import (BASELINE_SCHEMA_VERSION, KEY_FIELDS, KIND, REGION_ORDER, Baseline,
                                              BaselineEntry, BaselineError, Key, RegionEntry, TargetBaseline, parse)

__all__ = ["BASELINE_SCHEMA_VERSION", "KEY_FIELDS", "KIND", "REGION_ORDER", "Baseline", "BaselineEntry", "BaselineError",
           "RegionEntry", "TargetBaseline", "entries_from", "hazard_entries", "hazard_key", "hint_of", "load", "parse",
           "target_baseline", "updated", "version_notes"]



def hint_of(b: Break) -> str:
    """Where the break is, the same on every machine (a hint: never matched)."""
    act = b.actionable_frame
    where = at(act, portable=True) if act else ""
    site = f"stops at {at(b.site, portable=True)}"
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


def hazard_key(hazard: CudaGraphHazard) -> Key:
    """A CUDA-graph capture hazard's baseline key: its category, the package
    and function of the frame to change, and what ran (no line numbers)."""
    site = hazard.site
    return (hazard.category, package_of(site.file) if site else "", (site.qualname or site.function) if site else "",
            hazard.what)


def hazard_entries(found: CudaGraphMap | None) -> list[BaselineEntry]:
    """One entry per hazard key of a CUDA-graph map, sorted."""
    by_key: dict[Key, BaselineEntry] = {}
    for hazard in found.hazards() if found is not None else []:
        key = hazard_key(hazard)
        entry = by_key.get(key)
        if entry is None:
            hint = at(hazard.site, portable=True) if hazard.site else ""
            by_key[key] = BaselineEntry(*key, [CUDAGRAPH_MODE], 1, hazard.count, hint)
        else:
            entry.breaks += 1
            entry.count += hazard.count
    return [by_key[k] for k in sorted(by_key)]


def target_baseline(findings: Findings, mode: str) -> TargetBaseline:
    regions = sorted((RegionEntry(r.function, r.verdict, len(r.breaks)) for r in findings.regions if r.verdict),
                     key=lambda r: r.function)
    return TargetBaseline(target=findings.target.spec, mode=mode,
                          entries=entries_from(findings.breaks) + hazard_entries(findings.cudagraphs),
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
    except ValueError as e:  # a number Python will not convert (an integer of thousands of digits)
        raise BaselineError(f"baseline {path} is JSON that cannot be read: {e}") from None
    return parse(data, path)
