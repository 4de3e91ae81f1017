"""The commands that only read files -- `ingest`, `report`, `diff`, `check
--from`, `baseline write --from` -- start without importing torch: Dynamo's
graph-break registry and hints are read from the files torch ships, found
without importing it. Each command runs in a process of its own; what it
loaded is read from its sys.modules at the end."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT
from hostile_material import graph_break_log, make_findings, write_findings

# Runs the command line, then says whether torch was ever imported.
_WRAPPER = """
import sys
{preload}
from graphbreak_doctor.cli import main
code = main(sys.argv[1:])
print("torch loaded:", "torch" in sys.modules, file=sys.stderr)
sys.exit(code)
"""


def _run(*argv, preload: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _WRAPPER.format(preload=preload), *map(str, argv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("startup")
    (folder / "run.log").write_text(graph_break_log(3))
    write_findings(folder / "findings.json", make_findings(2))
    return folder


@pytest.mark.parametrize("argv,code", [
    (("ingest", "{d}/run.log", "--json", "{d}/ingested.json", "--html", "{d}/ingested.html"), 0),
    (("report", "{d}/findings.json", "--html", "{d}/report.html"), 0),
    (("diff", "{d}/findings.json", "{d}/run.log", "--html", "{d}/diff.html"), 0),
    (("check", "--from", "{d}/run.log", "--junit", "{d}/gate.xml", "--sarif", "{d}/gate.sarif"), 1),
    (("baseline", "write", "--from", "{d}/findings.json", "-o", "{d}/baseline.json"), 0),
])
def test_file_reading_commands_do_not_import_torch(inputs, argv, code):
    result = _run(*[a.format(d=inputs) for a in argv])
    assert result.returncode == code, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == "torch loaded: False", result.stderr


def test_findings_are_the_same_with_or_without_torch(inputs):
    for name, preload in (("without.json", ""), ("with.json", "import torch")):
        result = _run("ingest", inputs / "run.log", "--json", inputs / name, "--no-html", preload=preload)
        assert result.returncode == 0, result.stderr
    without, with_torch = (json.loads((inputs / n).read_text()) for n in ("without.json", "with.json"))
    assert without == with_torch and len(without["breaks"]) == 3
