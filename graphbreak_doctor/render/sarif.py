"""SARIF 2.1.0 for the gate: one result per distinct break, for code scanning.

- ruleId = the break's category; the rule's help is the category's fix recipe
  (graphbreak_doctor.analysis.fixes), the result's message carries the fix
  suggested for this break.
- location = the actionable frame (the code someone can change), else the
  site where Dynamo stopped. Files under the working directory get a
  relative URI against ``%SRCROOT%`` (what GitHub code scanning maps to the
  repository); other files an absolute ``file://`` URI.
- level: ``error`` for breaks that fail a check, ``note`` for the rest
  (accepted by the baseline, filtered out, or within budget).
- partialFingerprints carry ``Break.key()`` hashed: the same break keeps its
  identity when lines move, as baselines do.

Findings from elsewhere are rendered whatever they hold: a category the
registry does not know gets a rule of its own (with the fallback category's
help), a path that cannot name a file here (a NUL, a lone surrogate) is not
resolved and its URI shows it percent-encoded, and the text is JSON made by
``model.json_text`` (NUL as ``\\u0000``, a lone surrogate as ``\\ud800``).
"""

from __future__ import annotations

import hashlib
import os
import urllib.parse
from collections import defaultdict
from pathlib import Path

from graphbreak_doctor import __version__
from graphbreak_doctor.analysis import categories
from graphbreak_doctor.analysis.categories import CATEGORIES
from graphbreak_doctor.model import Break, Frame, GateReport, doc_url
from graphbreak_doctor.model.cache_facts import cache_note
from graphbreak_doctor.model.json_text import dumps
from graphbreak_doctor.render.renderer import GATE, Renderer

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SRCROOT = "%SRCROOT%"
INFO_URI = "https://meta-pytorch.github.io/compile-graph-break-site/"


def _generic(text: str) -> str:
    return text.format_map(defaultdict(lambda: "…", call="the call", function="the function",
                                       package="the library", op="the op"))


def _rule_order(category: str) -> tuple[int, str]:
    """The registry's order; categories it does not know after it, by name."""
    return (CATEGORIES.index(category), "") if category in CATEGORIES else (len(CATEGORIES), category)


def _rule(category: str) -> dict:
    # Imported here: the recipes import torch, which the command line only
    # needs when SARIF is written.
    from graphbreak_doctor import recipes

    record = categories.get(category if category in CATEGORIES else categories.FALLBACK)
    why = record.why
    recipe = recipes.get(record.advice).advice
    name = "".join(part.capitalize() for part in category.split("-"))
    return {
        "id": category,
        "name": f"GraphBreak{name}",
        "shortDescription": {"text": f"graph break: {category}"},
        "fullDescription": {"text": f"torch.compile (Dynamo) breaks the graph: {why}."},
        "help": {
            "text": f"{_generic(recipe.summary)}. {_generic(recipe.detail)}",
            "markdown": f"**{_generic(recipe.summary)}**\n\n{_generic(recipe.detail)}\n\n"
                        f"```python\n{_generic(recipe.snippet)}\n```",
        },
        "defaultConfiguration": {"level": "error"},
        "properties": {"tags": ["torch.compile", "graph-break"]},
    }


def _names_a_file(path: str) -> bool:
    """Whether ``path`` can name a file on this machine: no NUL, and
    encodable as a file name (a lone surrogate is not)."""
    if "\x00" in path:
        return False
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        return False
    return True


def _file_uri(p: Path) -> str:
    if _names_a_file(str(p)):
        return p.as_uri()
    # As Path.as_uri quotes, the characters it cannot encode shown as escapes.
    return "file://" + urllib.parse.quote(str(p).encode("utf-8", "backslashreplace"))


def _artifact(path: str, root: Path) -> dict:
    p = Path(path)
    # An installed library is not the project's source even when its virtual
    # environment lives in the checkout (.venv/lib/.../site-packages).
    installed = any(part in ("site-packages", "dist-packages") for part in p.parts)
    if not p.is_absolute():
        return {"uri": p.as_posix()} if installed else {"uri": p.as_posix(), "uriBaseId": SRCROOT}
    if _names_a_file(path):
        p = p.resolve()
    if not installed:
        try:
            return {"uri": p.relative_to(root).as_posix(), "uriBaseId": SRCROOT}
        except ValueError:
            pass
    return {"uri": _file_uri(p)}


def _location(frame: Frame, b: Break, root: Path) -> dict:
    loc = {
        "physicalLocation": {
            "artifactLocation": _artifact(frame.file, root),
            "region": {"startLine": max(frame.line, 1)},
        },
    }
    if frame.qualname:
        loc["logicalLocations"] = [{"fullyQualifiedName": f"{b.package}.{frame.qualname}", "kind": "function"}]
    return loc


def _message(b: Break) -> str:
    act = b.actionable_frame
    where = f" in {act.qualname} ({b.package})" if act else ""
    culprit = f": {b.culprit}" if b.culprit else ""
    return f"Graph break [{b.category}]{where}: {b.gb_type}{culprit}. Fix: {b.fix.summary}"


def fingerprint(b: Break) -> str:
    # surrogatepass: a lone surrogate from a file has bytes too (UTF-8 text is unchanged).
    return hashlib.sha256("|".join(b.key()).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def render(report: GateReport, root: str | os.PathLike | None = None) -> str:
    root = Path(root or os.getcwd()).resolve()
    used = sorted({b.category for t in report.targets for b in t.findings.breaks}, key=_rule_order)
    index = {c: i for i, c in enumerate(used)}
    results = []
    for t in report.targets:
        failing = {b.id for b in t.failing_breaks()}
        new = {b.id for b in t.new}
        counted = {b.id for b in t.counted}
        for b in t.findings.breaks:
            frame = b.actionable_frame or b.site
            props = {
                "target": t.name, "package": b.package, "qualname": frame.qualname, "gbType": b.gb_type,
                "count": b.count, "modes": b.modes, "counted": b.id in counted, "fix": b.fix.summary,
                "site": f"{b.site.file}:{b.site.line}",
            }
            if b.gb_id:
                props["gbId"], props["documentation"] = b.gb_id, doc_url(b.gb_id)
            if cache_note(t.findings.cache):  # the verdict was read back from the findings cache
                props["cache"], props["cacheStoredAt"] = t.findings.cache.source, t.findings.cache.stored_at
            if t.baseline_used:
                props["baseline"] = "new" if b.id in new else "accepted" if b.id in counted else "not counted"
            results.append({
                "ruleId": b.category,
                "ruleIndex": index[b.category],
                "level": "error" if b.id in failing else "note",
                "message": {"text": _message(b)},
                "locations": [_location(frame, b, root)],
                "partialFingerprints": {"graphbreakKey/v1": fingerprint(b)},
                "properties": props,
            })
    crashed = [t for t in report.targets if t.crashed]
    cached = [t for t in report.targets if cache_note(t.findings.cache)]
    run = {
        "tool": {"driver": {
            "name": "graphbreak-doctor",
            "version": __version__,
            "informationUri": INFO_URI,
            "rules": [_rule(c) for c in used],
        }},
        "originalUriBaseIds": {SRCROOT: {"uri": root.as_uri() + "/"}},
        "invocations": [{
            "executionSuccessful": not crashed,
            "toolExecutionNotifications": [
                {"level": "error", "message": {"text": f"{t.name}: {t.findings.incomplete()}"}}
                for t in crashed
            ] + [
                {"level": "note", "message": {"text": f"{t.name}: verdict {cache_note(t.findings.cache)}"}}
                for t in cached
            ],
        }],
        "results": results,
    }
    doc = {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}
    return dumps(doc)


RENDERER = Renderer("sarif", GATE, render, suffix=".sarif", option="--sarif",
                    help="SARIF 2.1.0 for code scanning: one result per distinct break",
                    title="SARIF")
