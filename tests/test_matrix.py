"""The compatibility matrix: real environments built with uv, real traces in
each cell's own environment, the table / JSON / HTML of what they found,
bisection, and bad input.

The fast tests build reference-layer environments (no SGLang: torch from the
local wheel, FlashInfer from uv's cache) in the doctor's cache folder, where
they are kept for the next run, and trace in fullgraph mode. The
tests that build SGLang environments are slow (several GB, minutes) and run
only with GRAPHBREAK_DOCTOR_MATRIX_SGLANG=1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from graphbreak_doctor.findings import Findings
from graphbreak_doctor.matrix.envs import Builder, EnvSpec, default_envs_dir, installed
from graphbreak_doctor.matrix.result import CRASHED, FAILED, NOT_RUNNABLE, OK, Cell
from graphbreak_doctor.matrix.run import bisect

ROOT = Path(__file__).resolve().parents[1]
FI_OLD, FI_NEW = "0.6.3", installed("flashinfer-python")
SGLANG_WHEELS = [p for p in os.environ.get("GRAPHBREAK_DOCTOR_WHEELS", "").split(os.pathsep) if p]
SGLANG_MATRIX = pytest.mark.skipif(not os.environ.get("GRAPHBREAK_DOCTOR_MATRIX_SGLANG"),
                                   reason="builds SGLang environments (GB, minutes): "
                                          "set GRAPHBREAK_DOCTOR_MATRIX_SGLANG=1")


def doctor(*args: str, cwd: Path, timeout: float = 1200) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "graphbreak_doctor", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=timeout, check=False)


@pytest.fixture(scope="session")
def envs_dir() -> Path:
    """The doctor's own environments folder (graphbreak_doctor/cache.py): kept
    between runs, as `matrix` keeps them, and built from uv's cache; a second
    run of the tests builds nothing."""
    return default_envs_dir()


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory, envs_dir):
    """One real matrix: the reference dense layer on FlashInfer 0.6.3 and the
    installed one, sm120 and sm100, two workers at a time."""
    out = tmp_path_factory.mktemp("matrix-out")
    start = time.monotonic()
    proc = doctor("matrix", "--layer", "dense", "--impl", "reference", "--flashinfer", f"{FI_OLD},{FI_NEW}",
                  "--device", "sm120,sm100", "--mode", "fullgraph", "--jobs", "2", "--envs", str(envs_dir),
                  "--json", str(out / "m.json"), "--html", str(out / "m.html"), cwd=out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, out, time.monotonic() - start


def test_table_shows_each_cells_verdict(reference_run):
    proc, _out, _ = reference_run
    lines = proc.stdout.splitlines()
    header = next(ln for ln in lines if ln.startswith("versions"))
    assert header.split() == ["versions", "sm120", "sm100"]
    for version in (FI_OLD, FI_NEW):
        row = next(ln for ln in lines if ln.startswith(f"flashinfer {version} "))
        # The reference layer calls FlashInfer's fp4_quantize directly: its
        # nvcc probe stops fullgraph on both releases and both devices.
        assert row.count("FAILED: subprocess (get_cuda_version)") == 2, row
    assert f"{FI_OLD} -> {FI_NEW}:" in proc.stdout


def test_each_cell_ran_in_its_own_environment(reference_run):
    _proc, out, _ = reference_run
    data = json.loads((out / "m.json").read_text())
    assert data["kind"] == "graphbreak-doctor matrix" and data["torch"] == installed("torch")
    assert len(data["cells"]) == 4
    for cell in data["cells"]:
        findings = Findings.from_dict(cell["findings"])
        # The FlashInfer the trace imported is the cell's, not this interpreter's.
        assert findings.environment["flashinfer"] == cell["flashinfer"]
        assert findings.environment["torch"] == installed("torch")
        assert findings.device["name"] == cell["device"]
        assert cell["status"] == FAILED and cell["category"] == "subprocess"
        assert cell["breaks"] == len(findings.breaks) >= 1
    assert {d["axis"] for d in data["diffs"]} == {"flashinfer"}
    assert all(d["diff"]["versions"] for d in data["diffs"])  # flashinfer's version differs


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.links.append(dict(attrs)["href"])


def test_html_links_every_cell_to_its_report(reference_run):
    _proc, out, _ = reference_run
    page = (out / "m.html").read_text()
    parser = _Links()
    parser.feed(page)
    cell_links = [link for link in parser.links if link.endswith(".html")]
    assert len(cell_links) == 4
    for link in cell_links:
        report = (out / link).read_text()
        assert "get_cuda_version" in report
    assert "Between neighbouring versions" in page and f"{FI_OLD} -&gt; {FI_NEW}" in page


def test_second_set_up_reuses_the_environments(reference_run, envs_dir):
    builder = Builder(envs_dir)
    for version in (FI_OLD, FI_NEW):
        env = builder.ensure(EnvSpec("", version))
        assert not env.built
        manifest = json.loads((env.path / "matrix-env.json").read_text())
        assert manifest["torch"] == installed("torch")
        assert env.seconds < 0.1 * manifest["seconds"]


def test_a_cell_that_cannot_be_built_says_why_and_the_rest_go_on(tmp_path, envs_dir):
    proc = doctor("matrix", "--layer", "dense", "--impl", "reference", "--flashinfer", f"0.0.1,{FI_OLD}",
                  "--mode", "fullgraph", "--envs", str(envs_dir), "--no-html", "--json", str(tmp_path / "m.json"),
                  cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("flashinfer 0.0.1"))
    assert f"not runnable on torch {installed('torch')}: cannot install flashinfer 0.0.1" in row
    cells = json.loads((tmp_path / "m.json").read_text())["cells"]
    assert [c["status"] for c in cells] == [NOT_RUNNABLE, FAILED]


@pytest.mark.parametrize("args, message", [
    (["--layer", "dense", "--flashinfer", "0.6.x"], "not a version"),
    (["--layer", "dense", "--device", "sm999"], "unknown emulated device"),
    (["--layer", "dense", "--impl", "reference", "--sglang", "0.5.9"], "leave out --sglang"),
    (["--layer", "dense", "--bisect", "torch", "1..2"], "the axis is sglang or flashinfer"),
    (["--layer", "dense", "--bisect", "sglang", "0.5.23..0.5.9"], "LOW older than HIGH"),
    (["--layer", "dense", "--bisect", "sglang", "0.5.9..0.5.23", "--sglang", "0.5.9"], "leave out --sglang"),
    (["--layer", "dense", "--sglang", "0.5.9", "--flashinfer", "0.6.3", "--json", "/no/such/dir/m.json"],
     "no such folder"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    proc = doctor("matrix", *args, "--envs", str(tmp_path / "envs"), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def _cells(version: str, status: str, category: str = "") -> list[Cell]:
    return [Cell("", version, "sm120", "dense", status=status, category=category, reason="x")]


def _each(verdict):
    """A probe of several releases from a verdict of one."""
    return lambda versions: {v: verdict(v) for v in versions}


def test_bisect_finds_the_first_change_in_log_n_cells():
    versions = [f"0.{i}" for i in range(19)]
    asked = []

    def probe(v: str) -> list[Cell]:
        asked.append(v)
        return _cells(v, OK) if int(v.split(".")[1]) >= 4 else _cells(v, FAILED, "subprocess")

    b = bisect(versions, _each(probe), "sglang")
    assert b.first == "0.4"
    assert asked[:2] == ["0.0", "0.18"]  # the ends first
    assert len(asked) <= 2 + 5  # ceil(log2(18)) probes between the ends
    assert "0.4 is the first release where the verdict changes" in b.line


def test_bisect_steps_over_releases_without_a_verdict():
    versions = [f"0.{i}" for i in range(9)]
    broken = {"0.4": NOT_RUNNABLE, "0.5": CRASHED}

    def probe(v: str) -> list[Cell]:
        if v in broken:
            return _cells(v, broken[v])
        return _cells(v, OK) if int(v.split(".")[1]) >= 3 else _cells(v, FAILED, "subprocess")

    b = bisect(versions, _each(probe), "sglang")
    assert b.first == "0.3"
    assert [v for v, _ in b.probes][:4] == ["0.0", "0.8", "0.4", "0.5"]  # the nearest to the middle first
    assert "stepped over 0.4, 0.5 (no verdict)" in b.line
    batches = []
    wide = bisect(versions, lambda vs: batches.append(vs) or {v: probe(v) for v in vs}, "sglang", width=2)
    assert wide.first == "0.3" and batches[:3] == [["0.0", "0.8"], ["0.4"], ["0.5", "0.3"]]


def test_bisect_says_when_nothing_changes_or_an_end_does_not_run():
    same = bisect(["1", "2", "3"], _each(lambda v: _cells(v, OK)), "flashinfer")
    assert same.first == "" and "does not change" in same.line and len(same.probes) == 2
    dead = bisect(["1", "2", "3"], _each(lambda v: _cells(v, NOT_RUNNABLE if v == "1" else OK)), "flashinfer")
    assert dead.first == "" and "1 (an end of the range) is not runnable: x" in dead.line


@pytest.mark.slow
@SGLANG_MATRIX
def test_sglang_matrix_tells_the_story(tmp_path):
    """SGLang 0.5.9 calls flashinfer.fp4_quantize directly (its nvcc probe
    stops fullgraph); 0.5.23 wraps it in a registered op (clean)."""
    links = [a for w in SGLANG_WHEELS for a in ("--find-links", w)]
    proc = doctor("matrix", "--layer", "dense", "--sglang", "0.5.9,0.5.23", "--flashinfer", f"{FI_OLD},{FI_NEW}",
                  "--device", "sm120", *links, "--json", str(tmp_path / "m.json"), "--no-html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {(c["sglang"], c["flashinfer"]): c for c in json.loads((tmp_path / "m.json").read_text())["cells"]}
    old = cells[("0.5.9", FI_OLD)]
    assert old["status"] == FAILED and old["category"] == "subprocess" and old["function"] == "get_cuda_version"
    assert cells[("0.5.23", FI_NEW)]["status"] == OK


@pytest.mark.slow
@SGLANG_MATRIX
def test_bisect_finds_the_release_that_wrapped_fp4_quantize(tmp_path):
    links = [a for w in SGLANG_WHEELS for a in ("--find-links", w)]
    proc = doctor("matrix", "--layer", "dense", "--bisect", "sglang", "0.5.9..0.5.23", "--flashinfer", FI_NEW,
                  "--mode", "fullgraph", *links, "--no-json", "--no-html", cwd=tmp_path, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bisect sglang: 0.5.12 is the first release where the verdict changes" in proc.stdout
