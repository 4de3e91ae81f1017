"""GitHub Actions workflow commands for the gate (printed when GITHUB_ACTIONS=true).

``::error file=F,line=N,title=T::message`` puts each failing located problem
(``TargetResult.located``: a break, a CUDA-graph capture hazard) on the line
of the pull request's diff that someone can change (the actionable frame, the
hazard's frame); a failed check with no such line (a recompile-limit hit, a
capture that did not finish) is an annotation of its own. Files
outside the workspace (site-packages) still get an annotation, shown on the
job summary. Escaping follows the runner's rules (actions/toolkit,
packages/core/src/command.ts): ``%``, CR and LF in data; also ``:`` and ``,``
in properties.
"""

from __future__ import annotations

import os
from pathlib import Path

from graphbreak_doctor.model import GateReport, Located
from graphbreak_doctor.model.located import BREAK, HAZARD
from graphbreak_doctor.render.renderer import GATE, Renderer


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, message: str, *, file: str = "", line: int = 0, title: str = "") -> str:
    props = []
    if file:
        props.append(f"file={_prop(file)}")
        if line > 0:
            props.append(f"line={line}")
    if title:
        props.append(f"title={_prop(title)}")
    return f"::{level}{' ' + ','.join(props) if props else ''}::{_data(message)}"


def _workspace_path(path: str, workspace: Path) -> str:
    if any(part in ("site-packages", "dist-packages") for part in Path(path).parts):
        return path  # an installed library, even if its venv sits in the workspace
    try:
        return Path(path).resolve().relative_to(workspace).as_posix()
    except ValueError:
        return path


# An annotation's title per kind of located problem.
_TITLES = {BREAK: "graph break", HAZARD: "CUDA-graph capture hazard"}


def _annotation(name: str, loc: Located, root: Path) -> str:
    return command("error", f"{name}: {loc.message}\nfails: {', '.join(loc.checks)}\nfix: {loc.fix}",
                   file=_workspace_path(loc.frame.file, root), line=loc.frame.line,
                   title=f"{_TITLES.get(loc.kind, loc.kind)} [{loc.category}]")


def render(report: GateReport, workspace: str | os.PathLike | None = None) -> str:
    root = Path(workspace or os.environ.get("GITHUB_WORKSPACE") or os.getcwd()).resolve()
    lines = []
    for t in report.targets:
        if t.crashed:
            lines.append(command("error", f"{t.name}: {t.findings.incomplete()}", title="graphbreak-doctor: target crashed"))
        located = [loc for loc in t.located if loc.failing and loc.frame is not None]
        for case in t.cases:
            for f in case.failures:
                if not f.breaks and not any(h.site for h in f.hazards):  # no line of its own to point at
                    lines.append(command("error", f"{t.name} [{case.mode}]: {f.reason}",
                                         title=f"graphbreak-doctor: {f.check}"))
        lines.extend(_annotation(t.name, loc, root) for loc in located)
        for e in t.disappeared:
            lines.append(command("notice", f"{t.name}: baseline entry no longer seen, the baseline can shrink: {e.describe()}",
                                 title="graphbreak-doctor: baseline can shrink"))
    return "".join(line + "\n" for line in lines)


RENDERER = Renderer("github", GATE, render, help="GitHub Actions annotations (printed when GITHUB_ACTIONS=true)")
