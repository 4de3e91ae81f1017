"""The JSON Schemas of graphbreak_doctor/model/schema/ applied to what the
tests write: every findings, baseline, diff and matrix document a test leaves
under the session's temporary folders (or the shared traces folder) is
validated when the test ends (the autouse fixture in conftest.py).

A test that writes such a document by hand on purpose -- an old format the
loader still reads, a hostile or malformed input -- names those files with
``@pytest.mark.unchecked_json("old.json", ...)`` (no names: none of the
files it leaves is validated).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Iterable

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from graphbreak_doctor.model import schema

SCHEMAS = schema.load_all()
REGISTRY = Registry().with_resources(
    (schema.file_name(kind), Resource.from_contents(doc)) for kind, doc in SCHEMAS.items()
)
VALIDATORS = {kind: Draft202012Validator(doc, registry=REGISTRY) for kind, doc in SCHEMAS.items()}

MARKER = "unchecked_json"
# What a findings cache entry says it is (graphbreak_doctor/jobs/findings_cache.py: FORMAT).
CACHE_ENTRY = "graphbreak-doctor findings cache"
MARKER_HELP = (f"{MARKER}(*names): the test writes these JSON documents by hand on purpose (old formats, "
               "hostile input); they are not validated against the schemas (no names: none is)")
# The violations shown per file (the first ones, by path).
SHOWN = 5


def violations(document: Any, kind: str | None = None) -> list[str]:
    """What in ``document`` its schema refuses, one line each ("where: what");
    [] when it is valid or not one of the doctor's documents."""
    kind = kind or schema.kind_of(document)
    if kind is None:
        return []
    errors = sorted(VALIDATORS[kind].iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path])
    out = []
    for e in errors:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path) or "(top)"
        message = e.message if len(e.message) <= 300 else e.message[:300] + "..."
        out.append(f"{kind}{where}: {message}")
    return out


def read_document(path: Path) -> tuple[str | None, Any]:
    """(kind, parsed) of a regular JSON file; (None, None) for anything that
    is not one of the doctor's documents (or not JSON at all)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None, None
    if b"schema_version" not in data:
        return None, None
    try:
        document = json.loads(data.decode("utf-8-sig"))
    except (ValueError, RecursionError):
        return None, None
    if isinstance(document, dict) and document.get("format") == CACHE_ENTRY:
        # A findings cache entry (docs/cache.md): the findings it keeps.
        outcome = document.get("outcome")
        return ("findings", outcome["findings"]) if isinstance(outcome, dict) else (None, None)
    return schema.kind_of(document), document


class Watch:
    """The JSON files under some folders, each validated once per content
    (a file written again is validated again)."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[int, int, int]] = {}

    def new_files(self, folders: Iterable[Path]) -> list[Path]:
        found = []
        for folder in folders:
            for root, _dirs, files in os.walk(folder):  # symlinks are not followed
                for name in files:
                    if not name.endswith(".json"):
                        continue
                    path = os.path.join(root, name)
                    try:
                        st = os.lstat(path)
                    except OSError:
                        continue
                    if not stat.S_ISREG(st.st_mode):  # a link, a FIFO a test made: never opened
                        continue
                    mark = (st.st_ino, st.st_mtime_ns, st.st_size)
                    if self.seen.get(path) != mark:
                        self.seen[path] = mark
                        found.append(Path(path))
        return found

    def check(self, folders: Iterable[Path], unchecked: set[str] | None = frozenset()) -> list[str]:
        """The violations in the files new or changed since the last call, one
        block per file; ``unchecked``: file names left alone (None: every file)."""
        problems = []
        for path in self.new_files(f for f in folders if f.is_dir()):
            if unchecked is None or path.name in unchecked:
                continue
            kind, document = read_document(path)
            if kind is None:
                continue
            found = violations(document, kind)
            if found:
                more = f"\n  ... and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
                problems.append(f"{path} is not a valid {kind} document ({schema.file_name(kind)}):\n  "
                                + "\n  ".join(found[:SHOWN]) + more)
        return problems


WATCH = Watch()


def unchecked_names(node) -> set[str] | None:
    """The file names the test's ``unchecked_json`` markers name (None: all)."""
    names: set[str] = set()
    for mark in node.iter_markers(MARKER):
        if not mark.args:
            return None
        names.update(mark.args)
    return names


def after_test(node, folders: Iterable[Path | str | None]) -> list[str]:
    """What the documents the test left behind violate."""
    return WATCH.check([Path(f) for f in folders if f], unchecked_names(node))
