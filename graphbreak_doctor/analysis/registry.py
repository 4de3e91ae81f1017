"""gb ids from Dynamo's graph-break registry (torch/_dynamo/graph_break_registry.json)
and the hint constants Dynamo attaches to breaks (torch/_dynamo/graph_break_hints.py)."""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
from pathlib import Path



def _dynamo_file(name: str) -> Path | None:
    """A file of torch/_dynamo, found without importing torch: the commands
    that only read files (ingest, report, diff, check --from, baseline write
    --from) never load torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent / "_dynamo" / name


@functools.cache
def _registry() -> dict[str, list[dict]]:
    path = _dynamo_file("graph_break_registry.json")
    try:
        return json.loads(path.read_text()) if path is not None else {}
    except (OSError, ValueError):
        return {}


@functools.cache
def _by_type() -> dict[str, str]:
    out: dict[str, str] = {}
    data = _registry()
    for gb_id in sorted(data):
        for entry in data[gb_id]:
            out.setdefault(entry.get("Gb_type", "").strip(), gb_id)
    return out


def gb_id_for(gb_type: str, fallback: str = "") -> str:
    """The registry id of a gb_type ('GB0007'), else the id Dynamo linked to."""
    return _by_type().get(gb_type.strip(), fallback)


@functools.cache
def caused_by_earlier_hint() -> str:
    """Dynamo's hint on a break that may follow from an earlier one
    (``CAUSED_BY_EARLIER_GRAPH_BREAK`` in torch/_dynamo/graph_break_hints.py,
    read from the file)."""
    path = _dynamo_file("graph_break_hints.py")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8")) if path is not None else None
    except (OSError, SyntaxError, ValueError):
        tree = None
    for node in tree.body if tree is not None else ():
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CAUSED_BY_EARLIER_GRAPH_BREAK"
                                                for t in node.targets):
            try:
                return str(ast.literal_eval(node.value)[0])
            except (ValueError, TypeError, IndexError):
                break
    from torch._dynamo import graph_break_hints  # the file moved: ask the module

    return graph_break_hints.CAUSED_BY_EARLIER_GRAPH_BREAK[0]


@functools.cache
def consequential_ids() -> frozenset[str]:
    """Registry ids whose hints say the break may follow from an earlier one
    (graph break in loop GB7000, reconstruction failures, a break under a
    generic context manager)."""
    hint = caused_by_earlier_hint()
    return frozenset(gb_id for gb_id, entries in _registry().items()
                     if any(hint in entry.get("Hints", []) for entry in entries))
