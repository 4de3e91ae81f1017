"""The HTML report: one self-contained file that a person reads in a browser.

Templates, CSS and JS live in ``render/templates/`` (jinja2, autoescaping on
for every template). The page is complete without JS -- folding uses
``<details>`` -- and the inline script only adds filtering by category and
package and expand/collapse-all. Nothing is fetched: a Content-Security-Policy
allows no network source at all and only the one inline script, by hash, so
text from a break (an error message, a source line, a file name) can never
become a running script even if it slipped past escaping.

Like every renderer this one only presents the findings, and reads nothing
else: the source lines around a break are those the trace recorded in the
findings (``Break.excerpts``), else the one line a frame kept -- never a file
of the machine that renders the report, whose paths findings from elsewhere
may name (``/etc/passwd``). Every value printed goes through
``text.escape_controls`` (NUL, escape sequences and other control characters,
lone surrogates shown as escapes; ``finalize`` below), and a free-form value
(a target's facts, the device) is shown :data:`MAX_NESTING` levels deep, then
as its JSON text: findings from elsewhere may nest it 900 deep. What it adds
is the layout of the breaks' call graph (``svg.py``).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from graphbreak_doctor import __version__
from graphbreak_doctor.frames import call_graph, node_id, short_path
from graphbreak_doctor.model import MAP_MODE, Break, Findings, Frame, TargetInfo, doc_url
from graphbreak_doctor.model.json_text import flat, nests_deeper
from graphbreak_doctor.render import compile_map, cudagraph, sizes, svg, warm
from graphbreak_doctor.render.causes import cause_fixes
from graphbreak_doctor.render.renderer import FINDINGS, Renderer
from graphbreak_doctor.text import counted as _plural
from graphbreak_doctor.text import escape_controls

TEMPLATES = Path(__file__).with_name("templates")
# Levels of a free-form value shown as nested lists and tables; deeper, its JSON text.
MAX_NESTING = 6


@dataclass
class SourceLine:
    number: int
    text: str
    hit: bool


@dataclass
class Excerpt:
    frame: Frame
    lines: list[SourceLine]
    # False when the findings recorded no lines around the frame: only the
    # line the frame kept is shown.
    from_file: bool


def excerpt(frame: Frame | None, brk: Break | None = None) -> Excerpt | None:
    """The source lines around ``frame`` that the findings carry (``brk``'s
    excerpts), else the frame's own line. Nothing is read from disk."""
    if frame is None:
        return None
    recorded = brk.excerpt_for(frame) if brk is not None else None
    if recorded is not None:
        lines = [SourceLine(recorded.first + i, text, recorded.first + i == frame.line)
                 for i, text in enumerate(recorded.lines)]
        return Excerpt(frame, lines, True)
    return Excerpt(frame, [SourceLine(frame.line, frame.code, True)] if frame.code else [], False)


def _finalize(value: Any) -> Any:
    """Every printed value, control characters escaped (the markup of our own
    templates and inlined CSS/JS has only line breaks and tabs)."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, Markup):
        return Markup(escape_controls(str(value), keep="\n\t"))
    if isinstance(value, (dict, list, tuple)) and nests_deeper(value, MAX_NESTING):
        value = flat(value)  # str() of a deep value would recurse without bound
    return escape_controls(str(value), keep="\n\t")


def _ticks(text: str) -> Markup:
    """Escape ``text`` and show `backticked` parts as code, as the fix recipes write them."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # unbalanced: leave the backticks as they are
        return escape(text)
    return Markup("").join(escape(p) if i % 2 == 0 else Markup("<code>%s</code>") % p for i, p in enumerate(parts))


_CODE_NAME = re.compile(r"^(?P<name>.*) \((?P<file>.+):(?P<line>\d+)\)$")


def _code_name(name: str) -> str:
    """'fn (/long/path/file.py:12)' as capture names decompiled code, with a short path."""
    m = _CODE_NAME.match(name)
    return f"{m['name']} ({short_path(m['file'])}:{m['line']})" if m else name


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "x"


def _meta_rows(target: TargetInfo) -> list[tuple[str, Any]]:
    return [(k, v) for k, v in target.facts.items() if v not in (None, "", [], {})]


@functools.lru_cache(maxsize=None)
def template_environment():
    """The templates' environment, made once: each template is compiled on
    its first use, not once per page (a matrix writes a report per cell)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=_finalize,
    )
    env.filters.update(short=short_path, ticks=_ticks, slug=_slug, doc_url=doc_url, code_name=_code_name,
                       json_text=flat)
    env.globals.update(plural=_plural, excerpt=excerpt, max_nesting=MAX_NESTING,
                       is_mapping=lambda v: isinstance(v, dict),
                       is_sequence=lambda v: isinstance(v, (list, tuple)))
    return env


def inline_static(name: str, closing: str) -> str:
    """CSS/JS inlined verbatim (not escaped: they are ours, not data)."""
    text = (TEMPLATES / name).read_text(encoding="utf-8")
    if closing in text.lower():
        raise ValueError(f"{name} must not contain {closing!r}: it would end its element early")
    return text


def _csp(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    return (
        "default-src 'none'; "
        f"script-src 'sha256-{digest}'; "
        "style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    )


def _card_context(findings: Findings) -> dict[str, Any]:
    """Lookups the cards need: which root cause each break is filed under."""
    cause_of = {}
    for i, cause in enumerate(findings.root_causes, 1):
        for bid in cause.break_ids:
            cause_of.setdefault(bid, (i, cause))
    return {"cause_of": cause_of, "cause_fixes": cause_fixes(findings)}


def _facets(breaks: list[Break], attribute: str) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for b in breaks:
        value = getattr(b, attribute)
        counts[value] = counts.get(value, 0) + 1
    return sorted(counts.items())


def render(findings: Findings) -> str:
    """The report as one HTML document."""
    env = template_environment()
    script = inline_static("report.js", "</script")
    style = inline_static("report.css", "</style")
    causes = {node_id(c.frame): f"#cause-{i}" for i, c in enumerate(findings.root_causes, 1)}
    picture = svg.layout(call_graph(findings.breaks), causes=causes)
    hits = sum(b.count for b in findings.breaks)
    page = env.get_template("report.html.j2").render(
        f=findings,
        version=__version__,
        headline=findings.target.display(),
        meta_rows=_meta_rows(findings.target),
        hits=hits,
        first_failure=findings.break_by_id(findings.fullgraph.break_id),
        categories=_facets(findings.breaks, "category"),
        packages=_facets(findings.breaks, "package"),
        hazard_kinds=_hazard_kinds(findings),
        picture=picture,
        node_size=(svg.NODE_W, svg.NODE_H),
        style=Markup(style),
        script=Markup(script),
        csp=_csp(script),
        compile_rows=compile_map.rows(findings),
        compile_phases=compile_map.phase_lines(findings),
        compile_words=compile_map.framework_words(findings),
        compile_registered=compile_map.registered_only(findings),
        compile_args=compile_map.launch_arguments(findings),
        compile_summary=compile_map.summary(findings),
        compile_fullgraph=compile_map.fullgraph_line(findings),
        map_only=findings.modes == [MAP_MODE],
        sizes_summary=sizes.summary(findings.sized) if findings.sized else "",
        sizes_lines=sizes.call_lines(findings.sized) if findings.sized else [],
        sizes_fix=sizes.fix_line(findings.sized) if findings.sized else "",
        cudagraph_summary=cudagraph.summary(findings.cudagraphs) if findings.cudagraphs else "",
        cudagraph_phase=cudagraph.phase_line,
        cudagraph_capture=cudagraph.capture_line,
        cudagraph_hazard=cudagraph.hazard_line,
        cudagraph_fix=cudagraph.fix_line,
        warm_lines=warm.lines(findings),
        warm_how=warm.how(findings),
        **_card_context(findings),
    )
    return page


def _hazard_kinds(findings: Findings) -> list[tuple[str, list]]:
    kinds: dict[str, list] = {}
    for h in findings.hazards:
        kinds.setdefault(h.kind, []).append(h)
    return list(kinds.items())


RENDERER = Renderer("html", FINDINGS, render, suffix=".html", option="--html",
                    help="the HTML report: one self-contained file for a browser",
                    title="HTML report")
