"""The HTML form of a compatibility matrix: the table (each cell links to its
own report, written beside the page), the diffs between neighbouring
versions, and the bisection. Same style and Content-Security-Policy as the
diff page: no script, no fetch."""

from __future__ import annotations

from markupsafe import Markup

from graphbreak_doctor import __version__
from graphbreak_doctor.model.matrix import MatrixResult
from graphbreak_doctor.render.diff_html import CSP
from graphbreak_doctor.render.html import inline_static, template_environment
from graphbreak_doctor.render.matrix_terminal import table, title
from graphbreak_doctor.render.renderer import MATRIX, Renderer


def render(m: MatrixResult) -> str:
    rows = []
    for row, labels in zip(m.rows(), table(m)[1:]):
        cells = [m.at(row, d) for d in m.devices]
        rows.append((labels[0], list(zip(cells, labels[1:]))))
    return template_environment().get_template("matrix.html.j2").render(
        m=m, rows=rows, title=title(m), version=__version__, csp=CSP, style=Markup(inline_static("report.css", "</style")),
    )


RENDERER = Renderer("matrix-html", MATRIX, render, suffix=".html", option="--html",
                    help="the matrix as an HTML page (each cell's report beside it)", title="HTML matrix")
