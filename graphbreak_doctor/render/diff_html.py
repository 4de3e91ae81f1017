"""The HTML form of a diff of two diagnoses: one small self-contained page.

Same style as the report (its stylesheet, inlined), autoescaped templates,
and a Content-Security-Policy that allows no script and no fetch at all.
"""

from __future__ import annotations

from markupsafe import Markup

from graphbreak_doctor import __version__
from graphbreak_doctor.analysis.diff import FindingsDiff
from graphbreak_doctor.render.html import _environment, _static

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def render(d: FindingsDiff) -> str:
    return _environment().get_template("diff.html.j2").render(
        d=d, version=__version__, csp=CSP, style=Markup(_static("report.css", "</style")),
    )
