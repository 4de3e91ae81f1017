"""The JSON Schemas (draft 2020-12) of the documents the doctor writes, one
file per kind: findings, baseline, diff, matrix.

They describe what the doctor writes today, field by field, and are the
contract a reader of those files (CI scripts, dashboards) can hold it to; the
test suite validates every document it writes against them. They are not used
to read files back: the typed loader (``model.loader``) and the baseline
parser accept older files the schemas would refuse (findings whose ``fix``
sat at ``target.fix``, keys added after schema 1 missing).

A schema names the others by file name (``"$ref": "findings.schema.json"``):
a validator needs all four (``load_all``). Nothing here imports a validator.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

# Document kind -> the ``kind`` field the document carries; findings carry none
# (they are recognised by ``schema_version`` and ``target``).
KINDS: dict[str, str | None] = {
    "findings": None,
    "baseline": "graphbreak-doctor baseline",
    "diff": "graphbreak-doctor diff",
    "matrix": "graphbreak-doctor matrix",
}


def file_name(kind: str) -> str:
    """The schema's file name, which is also its ``$id``."""
    if kind not in KINDS:
        raise KeyError(f"no schema for {kind!r} (known: {', '.join(KINDS)})")
    return f"{kind}.schema.json"


def load(kind: str) -> dict[str, Any]:
    """The schema of one document kind, parsed."""
    text = resources.files(__name__).joinpath(file_name(kind)).read_text(encoding="utf-8")
    return json.loads(text)


def load_all() -> dict[str, dict[str, Any]]:
    """Every schema, by kind."""
    return {kind: load(kind) for kind in KINDS}


def kind_of(document: Any) -> str | None:
    """Which of the doctor's documents this parsed JSON is, by its own marks
    (``kind``; findings: ``schema_version`` and ``target``); None for anything else."""
    if not isinstance(document, dict):
        return None
    marked = document.get("kind")
    for kind, value in KINDS.items():
        if value is not None and marked == value:
            return kind
    if marked is None and "schema_version" in document and "target" in document:
        return "findings"
    return None
