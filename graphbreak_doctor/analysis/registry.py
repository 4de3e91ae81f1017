"""gb ids from Dynamo's graph-break registry (torch/_dynamo/graph_break_registry.json)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

DOC_URL = "https://meta-pytorch.github.io/compile-graph-break-site/gb/{id}.html"


@functools.cache
def _by_type() -> dict[str, str]:
    import torch._dynamo

    path = Path(torch._dynamo.__file__).with_name("graph_break_registry.json")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out: dict[str, str] = {}
    for gb_id in sorted(data):
        for entry in data[gb_id]:
            out.setdefault(entry.get("Gb_type", "").strip(), gb_id)
    return out


def gb_id_for(gb_type: str, fallback: str = "") -> str:
    """The registry id of a gb_type ('GB0007'), else the id Dynamo linked to."""
    return _by_type().get(gb_type.strip(), fallback)


def doc_url(gb_id: str) -> str:
    return DOC_URL.format(id=gb_id.lower()) if gb_id else ""
