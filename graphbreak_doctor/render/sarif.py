"""SARIF 2.1.0 for the gate: one result per located problem
(``TargetResult.located``): each distinct break and each distinct CUDA-graph
capture hazard, for code scanning.

- ruleId = the break's or hazard's category; the rule's help is the
  category's fix recipe (graphbreak_doctor.analysis.fixes), the result's
  message carries the fix suggested for this break or hazard.
- location = the actionable frame (the code someone can change), else the
  site where Dynamo stopped; a hazard's, the frame the recorder names. Files
  under the working directory get a relative URI against ``%SRCROOT%`` (what
  GitHub code scanning maps to the repository); other files an absolute
  ``file://`` URI. A problem with no line (a recompile-limit hit) is a
  notification of the run: code scanning refuses a result without a location.
- level: ``error`` for problems that fail a check, ``note`` for the rest
  (accepted by the baseline, filtered out, or within budget).
- partialFingerprints carry the problem's line-free key hashed
  (``Break.key()``, a hazard's baseline key): the same problem keeps its
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
from graphbreak_doctor.model import Break, Frame, GateReport, TargetResult, doc_url
from graphbreak_doctor.model.cache_facts import cache_note
from graphbreak_doctor.model.json_text import dumps
from graphbreak_doctor.model.located import BREAK, HAZARD, Located
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
    # The registry is read when SARIF is written, not when this module is
    # imported: a plugin may import the renderers while the categories load.
    known = categories.CATEGORIES
    return (known.index(category), "") if category in known else (len(known), category)


# How a rule describes its kind of problem: name prefix, short description,
# full description (before the category's why), tags.
_KIND_WORDS = {
    BREAK: ("GraphBreak", "graph break", "torch.compile (Dynamo) breaks the graph", ["torch.compile", "graph-break"]),
    HAZARD: ("CaptureHazard", "CUDA-graph capture hazard", "a CUDA-graph capture goes wrong",
             ["cuda-graph", "capture-hazard"]),
}


def _rule(category: str, kind: str = BREAK) -> dict:
    # Imported here: the recipes import torch, which the command line only
    # needs when SARIF is written.
    from graphbreak_doctor import recipes

    record = categories.get(category if category in categories.CATEGORIES else categories.FALLBACK)
    why = record.why
    recipe = recipes.get(record.advice).advice
    name = "".join(part.capitalize() for part in category.split("-"))
    prefix, short, full, tags = _KIND_WORDS[kind]
    return {
        "id": category,
        "name": f"{prefix}{name}",
        "shortDescription": {"text": f"{short}: {category}"},
        "fullDescription": {"text": f"{full}: {why}."},
        "help": {
            "text": f"{_generic(recipe.summary)}. {_generic(recipe.detail)}",
            "markdown": f"**{_generic(recipe.summary)}**\n\n{_generic(recipe.detail)}\n\n"
                        f"```python\n{_generic(recipe.snippet)}\n```",
        },
        "defaultConfiguration": {"level": "error"},
        "properties": {"tags": tags},
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


def _location(frame: Frame, package: str, root: Path) -> dict:
    loc = {
        "physicalLocation": {
            "artifactLocation": _artifact(frame.file, root),
            "region": {"startLine": max(frame.line, 1)},
        },
    }
    if frame.qualname:
        loc["logicalLocations"] = [{"fullyQualifiedName": f"{package}.{frame.qualname}", "kind": "function"}]
    return loc


def _break_message(b: Break) -> str:
    act = b.actionable_frame
    where = f" in {act.qualname} ({b.package})" if act else ""
    culprit = f": {b.culprit}" if b.culprit else ""
    return f"Graph break [{b.category}]{where}: {b.gb_type}{culprit}. Fix: {b.fix.summary}"


def fingerprint(b: Break) -> str:
    return _hashed(b.key())


def _hashed(key: tuple[str, ...]) -> str:
    # surrogatepass: a lone surrogate from a file has bytes too (UTF-8 text is unchanged).
    return hashlib.sha256("|".join(key).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _break_properties(t: TargetResult, loc: Located) -> dict:
    b = loc.subject
    props = {
        "target": t.name, "package": b.package, "qualname": loc.frame.qualname, "gbType": b.gb_type,
        "count": b.count, "modes": b.modes, "counted": any(x.id == b.id for x in t.counted), "fix": b.fix.summary,
        "site": f"{b.site.file}:{b.site.line}",
    }
    if b.gb_id:
        props["gbId"], props["documentation"] = b.gb_id, doc_url(b.gb_id)
    return props


def _hazard_properties(t: TargetResult, loc: Located) -> dict:
    h = loc.subject
    return {"target": t.name, "package": loc.package, "qualname": loc.frame.qualname, "what": h.what,
            "count": h.count, "segment": h.segment, "recipe": h.fix, "fix": loc.fix}


_PROPERTIES = {BREAK: _break_properties, HAZARD: _hazard_properties}


def _message(loc: Located) -> str:
    if loc.kind == BREAK:
        return _break_message(loc.subject)
    return f"{loc.message}. Fix: {loc.fix}" if loc.fix else loc.message


def _result(t: TargetResult, loc: Located, index: dict[str, int], root: Path) -> dict:
    props = _PROPERTIES[loc.kind](t, loc)
    if cache_note(t.findings.cache):  # the verdict was read back from the findings cache
        props["cache"], props["cacheStoredAt"] = t.findings.cache.source, t.findings.cache.stored_at
    if t.baseline_used:
        props["baseline"] = loc.baseline
    return {
        "ruleId": loc.category,
        "ruleIndex": index[loc.category],
        "level": "error" if loc.failing else "note",
        "message": {"text": _message(loc)},
        "locations": [_location(loc.frame, loc.package, root)],
        "partialFingerprints": {"graphbreakKey/v1": _hashed(loc.key)},
        "properties": props,
    }


def render(report: GateReport, root: str | os.PathLike | None = None) -> str:
    root = Path(root or os.getcwd()).resolve()
    kinds: dict[str, str] = {}  # each rule's category, and the kind of problem that first used it
    for t in report.targets:
        for loc in t.located:
            if loc.frame is not None:
                kinds.setdefault(loc.category, loc.kind)
    used = sorted(kinds, key=_rule_order)
    index = {c: i for i, c in enumerate(used)}
    results = [_result(t, loc, index, root) for t in report.targets for loc in t.located if loc.frame is not None]
    # Code scanning refuses a result with no location: a problem with no line is said of the run.
    unlocated = [{"level": "error" if loc.failing else "note", "message": {"text": f"{t.name}: {_message(loc)}"}}
                 for t in report.targets for loc in t.located if loc.frame is None]
    crashed = [t for t in report.targets if t.crashed]
    cached = [t for t in report.targets if cache_note(t.findings.cache)]
    run = {
        "tool": {"driver": {
            "name": "graphbreak-doctor",
            "version": __version__,
            "informationUri": INFO_URI,
            "rules": [_rule(c, kinds[c]) for c in used],
        }},
        "originalUriBaseIds": {SRCROOT: {"uri": root.as_uri() + "/"}},
        "invocations": [{
            "executionSuccessful": not crashed,
            "toolExecutionNotifications": [
                {"level": "error", "message": {"text": f"{t.name}: {t.findings.incomplete()}"}}
                for t in crashed
            ] + unlocated + [
                {"level": "note", "message": {"text": f"{t.name}: verdict {cache_note(t.findings.cache)}"}}
                for t in cached
            ],
        }],
        "results": results,
    }
    doc = {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}
    return dumps(doc)


RENDERER = Renderer("sarif", GATE, render, suffix=".sarif", option="--sarif",
                    help="SARIF 2.1.0 for code scanning: one result per distinct break or capture hazard",
                    title="SARIF")
