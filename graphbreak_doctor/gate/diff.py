"""Two diagnoses side by side: the breaks only one of them has, the breaks both
have, and what else differs (the fullgraph verdict, library versions, device).

Breaks are matched as baselines match them (``Break.key()``: category,
package, actionable qualname, gb_type; never line numbers), and grouped per
key the same way (``gate.baseline.entries_from``), so "new in B" here means
exactly what a baseline written from A would fail on. Typical pairs: before
and after a change, FlashInfer 0.6.3 and 0.7.4, an emulated GPU and the real
one (the match rate then says how well the emulation predicts the GPU).
"""

from __future__ import annotations

from typing import Any

from graphbreak_doctor.gate.baseline import entries_from
from graphbreak_doctor.model import Findings
from graphbreak_doctor.model.diff import Change, FindingsDiff, Pair, Side

_DEVICE_KEYS = ("name", "emulated", "gpu", "capability")


def verdict_of(findings: Findings) -> str:
    """'ok', 'failed', 'crashed' or 'not run' (no fullgraph mode was traced)."""
    fg = findings.fullgraph
    if fg.crashed:
        return "crashed"
    if not fg.ran:
        return "not run"
    return "ok" if fg.ok else "failed"


def _side(label: str, findings: Findings) -> Side:
    return Side(
        label=label,
        target=findings.target.spec,
        verdict=verdict_of(findings),
        error=findings.fullgraph.error,
        environment=dict(findings.environment),
        device={k: findings.device[k] for k in _DEVICE_KEYS if k in findings.device},
        breaks=len(findings.breaks),
    )


def _changes(a: dict[str, Any], b: dict[str, Any], keys: list[str]) -> list[Change]:
    return [Change(k, _text(a.get(k)), _text(b.get(k))) for k in keys if _text(a.get(k)) != _text(b.get(k))]


def _text(value: Any) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def diff(a: Findings, b: Findings, label_a: str = "A", label_b: str = "B") -> FindingsDiff:
    """What changed from ``a`` to ``b``."""
    entries_a = {e.key(): e for e in entries_from(a.breaks)}
    entries_b = {e.key(): e for e in entries_from(b.breaks)}
    result = FindingsDiff(a=_side(label_a, a), b=_side(label_b, b))
    result.only_a = [entries_a[k] for k in sorted(entries_a.keys() - entries_b.keys())]
    result.only_b = [entries_b[k] for k in sorted(entries_b.keys() - entries_a.keys())]
    result.both = [Pair(entries_a[k], entries_b[k]) for k in sorted(entries_a.keys() & entries_b.keys())]
    if result.a.verdict != result.b.verdict:
        result.verdict = Change("fullgraph", result.a.verdict, result.b.verdict)
    env_keys = sorted(set(a.environment) | set(b.environment))
    result.versions = _changes(a.environment, b.environment, env_keys)
    result.device = _changes(a.device, b.device, [k for k in _DEVICE_KEYS if k in a.device or k in b.device])
    return result
