"""Root causes, ranked for the reader: the first one is code the user can
change -- their own, then a library's -- never the standard library or torch
that a library's helper called into (``subprocess.run``, ``os.stat``,
``Path.exists``); a report of a break that lost its callers' frames is the
same break as the report that kept them; and the terminal leads with the
root causes, each fix once, as the HTML report does.

Real runs: the doctor traces the fixtures (user code -> the ``kernelkit``
library under ``fixtures/site-packages`` -> the standard library), and
ingests the log of a real ``torch.compile`` of them, rotated the way a
server's log is.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from graphbreak_doctor.frames import INFRASTRUCTURE, package_of

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "fixtures" / "site-packages"
ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(LIBRARY), os.environ.get("PYTHONPATH")]))}

# fixture, the function the first root cause names, its package, the standard-library file Dynamo stopped in
CASES = [
    ("subprocess_run", "toolkit_version", "kernelkit", "subprocess.py"),
    ("cached_stat", "artifact_stamp", "kernelkit", "pathlib.py"),
    ("and_user", "layer", "fixtures", "subprocess.py"),
]
INFRA_NAMES = ("Popen", "subprocess.py", "pathlib.py", "genericpath", "os.py", "posixpath")


def _first_cause_lines(stdout: str) -> list[str]:
    """The terminal's root-cause section: its header, then each cause and fix."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("root causes"))
    end = next(i for i, line in enumerate(lines) if line.startswith("the breaks, as Dynamo reported them"))
    return lines[start:end]


def _first_html_cause(html: str) -> str:
    m = re.search(r'<li id="cause-1" class="cause">\s*<h3>(.*?)</h3>', html, re.S)
    assert m, "the HTML report lists no root cause"
    return m.group(1)


def _check(stdout: str, findings: dict, html: str, function: str, package: str) -> None:
    """The first root cause is ``function`` of ``package`` on the terminal, in
    the JSON and in the HTML, and the terminal shows it before the breaks."""
    first = findings["root_causes"][0]
    assert first["frame"]["qualname"] == function and first["package"] == package
    assert package_of(first["frame"]["file"]) not in INFRASTRUCTURE
    for cause in findings["root_causes"][1:]:  # nothing of torch or the stdlib above code someone can change
        if package_of(cause["frame"]["file"]) in INFRASTRUCTURE:
            assert all(package_of(c["frame"]["file"]) in INFRASTRUCTURE
                       for c in findings["root_causes"][findings["root_causes"].index(cause):])
    section = _first_cause_lines(stdout)
    assert section[1].startswith(f"  #1 {function} ({package}) at "), section
    assert not any(name in section[1] for name in INFRA_NAMES), section[1]
    # Each fix once: under its root cause, never repeated under the breaks.
    for brk in findings["breaks"]:
        assert stdout.count(brk["fix"]["summary"]) == 1, brk["fix"]["summary"]
    head = _first_html_cause(html)
    assert f"<code>{function}</code>" in head and f"({package})" in head
    assert not any(name in head for name in INFRA_NAMES), head


@pytest.mark.parametrize("fixture,function,package,stdlib", CASES)
def test_a_trace_names_the_users_or_the_librarys_function_first(cli, tmp_path, fixture, function, package, stdlib):
    out, page = tmp_path / "f.json", tmp_path / "f.html"
    done = cli("trace", "--target", f"fixtures.breaks.through_library.{fixture}:target", "--device", "cpu",
               "--json", str(out), "--html", str(page), env=ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    findings = json.loads(out.read_text())
    # Dynamo stopped in the standard library, below the library's helper.
    assert any(stdlib in b["site"]["file"] for b in findings["breaks"])
    _check(done.stdout, findings, page.read_text(), function, package)
    # The terminal leads with the root causes: before the first break's entry.
    lines = done.stdout.splitlines()
    assert min(i for i, line in enumerate(lines) if line.startswith("root causes")) < \
        min(i for i, line in enumerate(lines) if line.startswith("  ["))
    for brk in findings["breaks"]:
        number = next(i for i, c in enumerate(findings["root_causes"], 1) if brk["id"] in c["break_ids"])
        assert f"({brk['id']})\n" in done.stdout and f"      fix: root cause #{number}" in done.stdout


def _rotated_log(fixture: str, folder: Path) -> tuple[Path, Path]:
    """A real torch.compile of the fixture with Dynamo's graph-break log on,
    rotated where Dynamo first repeats a break with its stack suppressed:
    ``server.log.1`` holds the first report (the whole stack), ``server.log``
    the repeats (the site only)."""
    script = ("import importlib, sys, torch\n"
              f"fn, args = importlib.import_module('fixtures.breaks.through_library.{fixture}').target()\n"
              "torch.compile(fn)(*args)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **ENV, "TORCH_LOGS": "graph_breaks"})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "user stack suppressed due to duplicate graph break" in line)
    older, newer = folder / "server.log.1", folder / "server.log"
    older.write_text("".join(lines[:cut]))
    newer.write_text("".join(lines[cut:]))
    return newer, older


@pytest.mark.parametrize("fixture,function,package,stdlib", CASES[:2])
def test_a_repeat_that_lost_its_callers_is_the_break_that_kept_them(cli, tmp_path, fixture, function, package, stdlib):
    """``ingest server.log*``: the shell lists the newer log, holding only
    repeats printed without their stack, before the older one holding the
    first report. The repeat is the same break: one break, its hits added,
    filed under the library's function, not under the standard library's."""
    newer, older = _rotated_log(fixture, tmp_path)
    out, page = tmp_path / "f.json", tmp_path / "f.html"
    done = cli("ingest", str(newer), str(older), "--json", str(out), "--html", str(page), env=ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    findings = json.loads(out.read_text())
    (brk,) = findings["breaks"]
    assert stdlib in brk["site"]["file"] and brk["actionable_frame"]["qualname"] == function
    assert brk["count"] >= 2
    assert len(findings["root_causes"]) == 1
    _check(done.stdout, findings, page.read_text(), function, package)
    # The other order reads the same.
    again = tmp_path / "g.json"
    assert cli("ingest", str(older), str(newer), "--json", str(again), "--no-html", env=ENV).returncode == 0
    assert json.loads(again.read_text())["breaks"] == findings["breaks"]
