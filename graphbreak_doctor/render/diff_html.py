"""The HTML form of a diff of two diagnoses: one small self-contained page.

Same style as the report (its stylesheet, inlined), autoescaped templates,
and a Content-Security-Policy that allows no script and no fetch at all.
"""

from __future__ import annotations

from markupsafe import Markup

from graphbreak_doctor import __version__
from graphbreak_doctor.model.diff import FindingsDiff
from graphbreak_doctor.render.html import inline_static, template_environment
from graphbreak_doctor.render.renderer import DIFF, Renderer

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def render(d: FindingsDiff) -> str:
    return template_environment().get_template("diff.html.j2").render(
        d=d, version=__version__, csp=CSP, style=Markup(inline_static("report.css", "</style")),
    )


RENDERER = Renderer("diff-html", DIFF, render, suffix=".html", option="--html",
                    help="the diff as an HTML page", title="HTML diff")
