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
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import FI_NEW, FI_OLD, ROOT, doctor
from graphbreak_doctor.model import Findings
from graphbreak_doctor.matrix.envs import Environments, EnvSpec, installed
from graphbreak_doctor.model.matrix import CRASHED, FAILED, NOT_AVAILABLE, NOT_RUNNABLE, OK, Cell
from graphbreak_doctor.matrix.bisection import bisect

SGLANG_WHEELS = [p for p in os.environ.get("GRAPHBREAK_DOCTOR_WHEELS", "").split(os.pathsep) if p]
SGLANG_MATRIX = pytest.mark.skipif(not os.environ.get("GRAPHBREAK_DOCTOR_MATRIX_SGLANG"),
                                   reason="builds SGLang environments (GB, minutes): "
                                          "set GRAPHBREAK_DOCTOR_MATRIX_SGLANG=1")


def test_table_shows_each_cells_verdict(reference_run):
    proc, _out, _ = reference_run
    lines = proc.stdout.splitlines()
    header = next(ln for ln in lines if ln.startswith("versions"))
    assert header.split() == ["versions", "sm120", "sm100"]
    for version in (FI_OLD, FI_NEW):
        row = next(ln for ln in lines if ln.startswith(f"flashinfer {version} "))
        # The reference layer calls FlashInfer's fp4_quantize directly: its
        # nvcc probe stops fullgraph on both releases on sm120, and on sm100
        # where the release has no CuTe DSL FP4 path; the current release
        # quantizes and multiplies with CuTe DSL kernels on sm100, whose
        # source hashing stops it first (_FIRST_FAILURE).
        cells = row.split("FAILED: ")[1:]
        assert [c.split(",")[0].strip() for c in cells] == [_FIRST_FAILURE["sm120", version],
                                                           _FIRST_FAILURE["sm100", version]], row
    assert f"{FI_OLD} -> {FI_NEW}:" in proc.stdout


# The first failure of the reference dense layer per (device, FlashInfer).
_FIRST_FAILURE = {("sm120", FI_OLD): "subprocess (get_cuda_version)", ("sm120", FI_NEW): "subprocess (get_cuda_version)",
                  ("sm100", FI_OLD): "subprocess (get_cuda_version)",
                  ("sm100", FI_NEW): "unsupported-builtin (_hash_source_files)"}


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
        first = _FIRST_FAILURE[cell["device"], cell["flashinfer"]]
        assert cell["status"] == FAILED and cell["category"] == first.split(" ")[0]
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
        assert "get_cuda_version" in report or "_hash_source_files" in report
    assert "Between neighbouring versions" in page and f"{FI_OLD} -&gt; {FI_NEW}" in page


def test_second_set_up_reuses_the_environments(reference_run, envs_dir):
    environments = Environments(envs_dir)
    for version in (FI_OLD, FI_NEW):
        env = environments.ensure(EnvSpec(flashinfer=version))
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


FP4_WRAPPER = "fixtures.flashinfer_targets:fp4_quantize_wrapper"


def test_a_target_of_your_own_across_flashinfer_releases(tmp_path, envs_dir):
    """Any provider that offers itself to the matrix names what each cell
    traces: here --target, the user's own function calling FlashInfer."""
    out = tmp_path / "m.json"
    proc = doctor("matrix", "--target", FP4_WRAPPER, "--flashinfer", f"{FI_OLD},{FI_NEW}", "--mode", "fullgraph",
                  "--envs", str(envs_dir), "--no-html", "--json", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[0] == f"matrix: {FP4_WRAPPER} (factory), mode fullgraph, torch {installed('torch')}"
    result = json.loads(out.read_text())
    assert (result["layer"], result["impl"]) == ("target", "factory")
    old, new = result["cells"]
    assert (old["flashinfer"], new["flashinfer"]) == (FI_OLD, FI_NEW)
    assert {old["layer"], new["layer"]} == {FP4_WRAPPER}
    # Both releases probe nvcc (get_cuda_version) on the wrapper's traced path;
    # each cell traced with its own environment's FlashInfer.
    for cell, version in ((old, FI_OLD), (new, FI_NEW)):
        assert (cell["status"], cell["category"], cell["function"]) == (FAILED, "subprocess", "get_cuda_version")
        assert cell["findings"]["environment"]["flashinfer"] == version


@pytest.mark.parametrize("args, message", [
    (["--layer", "dense", "--flashinfer", "0.6.x"], "not a version"),
    (["--layer", "dense", "--device", "sm999"], "unknown emulated device"),
    (["--layer", "dense", "--impl", "reference", "--sglang", "0.5.9"], "leave out --sglang"),
    (["--layer", "dense", "--bisect", "torch", "1..2"], "the axis is sglang or flashinfer"),
    (["--layer", "dense", "--bisect", "sglang", "0.5.23..0.5.9"], "LOW older than HIGH"),
    (["--layer", "dense", "--bisect", "sglang", "0.5.9..0.5.23", "--sglang", "0.5.9"], "leave out --sglang"),
    (["--layer", "dense", "--sglang", "0.5.9", "--flashinfer", "0.6.3", "--json", "/no/such/dir/m.json"],
     "no such folder"),
    (["--model", "--sglang-args", "--enable-torch-compile"], "--sglang-args needs --sglang"),
    (["--layer", "dense", "--impl", "reference", "--sglang-args", "--enable-torch-compile"],
     "--sglang-args needs --sglang"),
    (["--model", "--sglang", "0.5.23", "--sglang-args", "--attention-backend 'fa3"], "No closing quotation"),
    (["--model", "--sglang", "0.5.23", "--sglang-args", "--model-path /tmp"], "/tmp holds no config.json"),
    (["--model", "--sglang", "0.5.23", "--model-path", "qwen3-30b-a3b", "--sglang-args", "--model-path /tmp"],
     "give one"),
    (["--layer", "dense", "--sglang", "0.5.23", "--model-path", "deepseek-v3"], "give --model, not --layer"),
    (["--model", "--impl", "reference"], "leave out --impl reference"),
    (["--model", "--sglang", "0.5.23", "--mode", "fullgraph"], "runs the compile map"),
    (["--model", "--bisect", "sglang", "0.5.9..0.5.23"], "give --layer, not --model"),
    (["--layer", "dense", "--mode", "map"], "give --model"),
    (["--model", "--layer", "dense"], "not allowed with argument"),
    (["--layer", "dense", "--address", "127.0.0.1:6379"], "--address names a Ray cluster: give --executor ray"),
    (["--layer", "dense", "--executor", "ray", "--jobs", "2"], "--jobs is for --executor local"),
    (["--layer", "dense", "--executor", "slurm"], "invalid choice: 'slurm'"),
    (["--target", "fixtures.breaks.subprocess_call:target", "--impl", "sglang"], "are for GLM-5's layers"),
    (["--target", "not a spec"], "pkg.module:factory"),
    (["--target", "fixtures.breaks.subprocess_call:target", "--layer", "dense"], "not allowed with argument"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    proc = doctor("matrix", *args, "--envs", str(tmp_path / "envs"), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def _cells(version: str, status: str, category: str = "") -> list[Cell]:
    return [Cell(version, "sm120", "dense", status=status, category=category, reason="x")]


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
    cells = {(c["release"], c["flashinfer"]): c for c in json.loads((tmp_path / "m.json").read_text())["cells"]}
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


# --model: each cell is the compile map of SGLang's GLM-5 model forward, run
# in the release's own environment (built from uv's cache: about 15-25 s
# each the first time, then reused) under the matrix's launch arguments.


@pytest.mark.slow
@SGLANG_MATRIX
def test_model_cell_is_the_releases_compile_map(tmp_path):
    """0.5.23's default launch runs the prefill as a breakable CUDA graph (no
    torch.compile of the forward); the phases enter the MoE top-k helper. The
    table, the JSON and the HTML page carry the same cell."""
    links = [a for w in SGLANG_WHEELS for a in ("--find-links", w)]
    proc = doctor("matrix", "--model", "--sglang", "0.5.23", "--device", "sm120", *links,
                  "--json", str(tmp_path / "m.json"), "--html", str(tmp_path / "m.html"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["layer"] == "model" and data["launch"] == []
    (cell,) = data["cells"]
    assert cell["status"] == OK, cell["reason"]
    assert cell["prefill"].startswith("breakable CUDA graph") and cell["prefill_fullgraph"] == ""
    entered = {r["function"].rsplit(".", 1)[-1]: r for r in cell["regions"]}
    assert "_biased_grouped_topk_postprocess" in entered and cell["registered"] > 0
    assert all(r["verdict"] for r in cell["regions"])
    # The cell's findings are its map, run in the release's environment.
    findings = Findings.from_dict(cell["findings"])
    assert findings.environment["sglang"] == "0.5.23"
    assert [r.function for r in findings.regions if r.entered] == [r["function"] for r in cell["regions"]]
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("sglang 0.5.23 "))
    assert "prefill: breakable CUDA graph" in row and f"{len(cell['regions'])} region" in row
    # The same worker captured both phases with SGLang's own CUDA-graph backends.
    assert "CUDA graphs: decode full (1 segment), prefill breakable (" in row and "no capture hazard" in row, row
    assert [p.backend for p in findings.cudagraphs.phases] == ["full", "breakable"]
    page = (tmp_path / "m.html").read_text()
    assert "_biased_grouped_topk_postprocess" in page and "breakable CUDA graph" in page
    # What SGLang printed in the workers is in the log beside the JSON, not on the terminal.
    log = (tmp_path / "m.log").read_text()
    assert log.startswith("=== sglang 0.5.23 + ") and "(map, sm120)\n" in log
    written = {ln for ln in log.splitlines()[2:] if ln.strip()}
    assert written and not written & set((proc.stdout + proc.stderr).splitlines())


@pytest.mark.slow
@SGLANG_MATRIX
def test_an_argument_a_release_lacks_is_not_available_there_in_sglangs_words(tmp_path):
    """--disable-piecewise-cuda-graph exists in 0.5.12 and no longer in 0.5.23:
    the 0.5.23 cell says so in SGLang's words, the 0.5.12 one runs."""
    proc = doctor("matrix", "--model", "--sglang", "0.5.12,0.5.23", "--sglang-args", "--disable-piecewise-cuda-graph",
                  "--jobs", "2", "--json", str(tmp_path / "m.json"), "--no-html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["launch"] == ["--disable-piecewise-cuda-graph"]
    cells = {c["release"]: c for c in data["cells"]}
    # 0.5.12 takes the argument (what its map then finds is the emulation's
    # business: docs/matrix.md lists how far each release gets).
    assert cells["0.5.12"]["status"] not in (NOT_AVAILABLE, NOT_RUNNABLE), cells["0.5.12"]["reason"]
    gone = cells["0.5.23"]
    assert gone["status"] == NOT_AVAILABLE and gone["findings"] is None
    assert "--disable-piecewise-cuda-graph" in gone["reason"], gone["reason"]  # argparse's own message
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("sglang 0.5.23 "))
    assert f"not available in this release: {gone['reason']}" in row


@pytest.mark.slow
@SGLANG_MATRIX
def test_each_release_says_how_it_runs_the_prefill_and_why(tmp_path):
    """The default GLM-5 launch: 0.5.9 leaves piecewise capture opt-in,
    0.5.12 turns it off for GLM-5 by a rule of its own code (told with its
    line and condition), 0.5.23 captures a breakable CUDA graph. The prefill
    line is known once the release resolved the launch, also in a cell whose
    map stops later in the emulation."""
    links = [a for w in SGLANG_WHEELS for a in ("--find-links", w)]
    proc = doctor("matrix", "--model", "--sglang", "0.5.9,0.5.12,0.5.23", "--device", "sm120", "--jobs", "2", *links,
                  "--json", str(tmp_path / "m.json"), "--no-html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {c["release"]: c for c in json.loads((tmp_path / "m.json").read_text())["cells"]}
    assert cells["0.5.9"]["prefill"].startswith("no prefill CUDA graph"), cells["0.5.9"]
    assert cells["0.5.12"]["prefill"].startswith("no prefill CUDA graph"), cells["0.5.12"]
    (rule,) = [r for r in cells["0.5.12"]["said"] if r.startswith("SGLang's rule: disable_piecewise_cuda_graph = True")]
    assert "_handle_piecewise_cuda_graph (server_args.py:" in rule and "is_piecewise_cuda_graph_disabled_model" in rule
    # The rule names the model: the release's own list that holds its architecture.
    assert "(GlmMoeDsaForCausalLM is in piecewise_cuda_graph_disabled_model_archs (model_config.py:" in rule
    # 0.5.12's phases run through the backend its model runner's set-up makes.
    assert cells["0.5.12"]["status"] == OK and cells["0.5.12"]["regions"], cells["0.5.12"]["reason"]
    assert cells["0.5.23"]["prefill"].startswith("breakable CUDA graph")
    for release, cell in cells.items():
        if cell["status"] == CRASHED:  # stopped in the emulation after the launch resolved: the row still says it
            row = next(ln for ln in proc.stdout.splitlines() if ln.startswith(f"sglang {release} "))
            assert f"prefill: {cell['prefill']}" in row and Findings.from_dict(cell["findings"]).target.facts["launch"]


@pytest.mark.slow
@SGLANG_MATRIX
def test_the_oldest_release_with_its_own_flashinfer_gives_the_prefill_fullgraph_verdict(tmp_path):
    """0.5.9 with the FlashInfer it pins and its opt-in piecewise capture: the
    CuTe DSL of its time (its FA4 interface imports), the extend metadata and
    forward run, and its piecewise runner's fullgraph compile of the prefill
    forward stops at the DSA indexer's data-dependent branch."""
    links = [a for w in SGLANG_WHEELS for a in ("--find-links", w)]
    proc = doctor("matrix", "--model", "--sglang", "0.5.9", "--flashinfer", "0.6.3", "--device", "sm120", *links,
                  "--sglang-args", "--enable-piecewise-cuda-graph", "--json", str(tmp_path / "m.json"), "--no-html",
                  cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (cell,) = json.loads((tmp_path / "m.json").read_text())["cells"]
    assert cell["status"] == FAILED, cell["reason"]
    assert cell["prefill"].startswith("piecewise CUDA graph: the model forward is compiled with torch.compile")
    assert cell["prefill_fullgraph"] == "fails: data-dependent (forward_cuda)", cell["prefill_fullgraph"]
    compiled = [r for r in cell["regions"] if r["options"].get("fullgraph")]
    assert [r["function"].rsplit(".", 2)[-2:] for r in compiled] == [["DeepseekV2Model", "forward"]]
    # The runner compiles at each of its capture sizes: the largest, a middle and the smallest are driven.
    assert "(the largest, a middle and the smallest of its " in cell["prefill"], cell["prefill"]
    assert compiled[0]["verdict"] == "fails" and compiled[0]["phases"] == {"extend": 3}


@pytest.mark.slow
@SGLANG_MATRIX
def test_an_argument_no_release_takes_is_bad_input(tmp_path):
    proc = doctor("matrix", "--model", "--sglang", "0.5.23", "--sglang-args", "--no-such-option",
                  "--json", str(tmp_path / "m.json"), "--html", str(tmp_path / "m.html"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("graphbreak-doctor: ") and "--no-such-option" in last and "0.5.23" in last
    assert list(tmp_path.iterdir()) == []


def test_a_release_refusing_the_launch_reads_not_available_with_sglangs_message():
    """The refusal carries SGLang's own message (LaunchRefused), and the cell
    shows it; other bad input in a cell is a cell that cannot run here."""
    from graphbreak_doctor.jobs.job import TRACE, Job, Outcome
    from graphbreak_doctor.matrix.run import _refused
    from graphbreak_doctor.targets import LaunchRefused
    from graphbreak_doctor.targets.frameworks.sglang.launch import rejected
    from graphbreak_doctor.targets.provider import Selection

    error = rejected("0.5.23", "unrecognized arguments: --enable-piecewise-cuda-graph")
    assert isinstance(error, LaunchRefused) and error.said == "unrecognized arguments: --enable-piecewise-cuda-graph"
    assert str(error) == "SGLang 0.5.23 rejects the launch arguments: " + error.said
    job = Job(TRACE, Selection("glm5", "glm5-sglang-model-extend", {}), "sm120", "map")
    cell = _refused(Cell("0.7.4", "sm120", "model", status=OK, framework="sglang", release="0.5.23"),
                    Outcome(job, usage=True, message=str(error), refused=error.said))
    assert cell.status == NOT_AVAILABLE
    assert cell.text("2.13.0") == "not available in this release: unrecognized arguments: --enable-piecewise-cuda-graph"
    assert not cell.decided and cell.to_dict()["regions"] == []
    # Text that reads like a refusal but is not one is not taken for one.
    other = _refused(Cell("0.7.4", "sm120", "model", status=OK, framework="sglang", release="0.5.23"),
                     Outcome(job, usage=True, message=str(error) + " (said by a target)"))
    assert other.status == NOT_RUNNABLE


def test_a_model_cell_says_prefill_sglangs_word_and_regions_in_one_line():
    cell = Cell("0.7.4", "sm120", "model", status=OK, framework="sglang", release="0.5.12",
                prefill="no prefill CUDA graph (the forward runs eagerly; no torch.compile of the forward)",
                said=["SGLang said: Disable piecewise CUDA graph because the model is GlmMoeDsaForCausalLM"],
                regions=[{"function": "m.a", "phases": {"extend": 1}, "options": {}, "verdict": "ok"},
                         {"function": "m.b", "phases": {"decode": 4}, "options": {}, "verdict": "graph breaks"}])
    assert cell.text("2.13.0") == ("OK: prefill: no prefill CUDA graph (the forward runs eagerly; no torch.compile of "
                                   "the forward); SGLang said: Disable piecewise CUDA graph because the model is "
                                   "GlmMoeDsaForCausalLM; 2 regions entered (1 ok, 1 graph breaks)")
    cell.prefill_fullgraph = "fails: subprocess (get_cuda_version)"
    assert "-> fullgraph fails: subprocess (get_cuda_version);" in cell.text("2.13.0")


def test_neighbouring_maps_tell_a_region_that_moved_module_as_one_move():
    """Two releases whose maps enter the same function from different modules
    (a package renamed): one "moved" part with both modules, not an "entered"
    and a "no longer entered" under the same short name."""
    from graphbreak_doctor.matrix.run import _map_summary

    def cell(release, *functions, verdict="ok"):
        return Cell("0.7.4", "sm120", "model", status=OK, framework="sglang", release=release, prefill="breakable CUDA graph",
                    regions=[{"function": f, "phases": {"decode": 1}, "options": {}, "verdict": verdict}
                             for f in functions])

    a = cell("0.5.12", "s.nsa.nsa_indexer.Indexer.gate", "s.topk.impl", "s.topk.post")
    b = cell("0.5.23", "s.dsa.dsa_indexer.Indexer.gate", "s.topk.post", "s.rope.apply", verdict="graph breaks")
    assert _map_summary(a, b).split("; ") == [
        "region Indexer.gate moved (s.nsa.nsa_indexer -> s.dsa.dsa_indexer, ok -> graph breaks)",
        "region apply now entered (graph breaks)", "region impl no longer entered", "region post: ok -> graph breaks"]


@pytest.mark.parametrize("release, flashinfer, expected", [
    # The release's own pin, where the FlashInfer accepts it.
    (["nvidia-cutlass-dsl[cu13]==4.8.0"], ["nvidia-cutlass-dsl>=4.8.0"], ("4.8.0", "[cu13]")),
    # No upper bound: the lowest version it allows, the one of its day.
    (["nvidia-cutlass-dsl>=4.3.4"], ["nvidia-cutlass-dsl>=4.3.4"], ("4.3.4", "")),
    # The two cannot agree: the lowest the FlashInfer accepts (the release's extras kept).
    (["nvidia-cutlass-dsl[cu13]==4.6.2"], ["nvidia-cutlass-dsl>=4.8.0",
                                           'nvidia-cutlass-dsl[cu13]>=4.8.0; extra == "cu13"'], ("4.8.0", "[cu13]")),
    (["nvidia-cutlass-dsl>=4.3.4"], ["nvidia-cutlass-dsl>=4.8.0"], ("4.8.0", "")),
    (["numpy"], ["torch"], None),
])
def test_the_cute_dsl_is_the_version_of_the_releases_time(release, flashinfer, expected):
    """FOLLOW_TIME: read from the release's and the FlashInfer's own
    requirement lines (as their wheels declare them)."""
    from graphbreak_doctor.matrix.envs import of_its_time

    chosen = of_its_time("nvidia-cutlass-dsl", release, flashinfer)
    assert (chosen[:2] if chosen else None) == expected
    if chosen and chosen[0] != release[0].split("=")[-1]:  # not the release's own: the note says why
        assert chosen[2].startswith("the release asks nvidia-cutlass-dsl") and "the FlashInfer's is installed" in chosen[2]
    elif chosen:
        assert chosen[2] == ""


def test_a_stopped_cell_says_what_its_environment_could_not_hold():
    cell = Cell("0.7.4", "sm120", "model", status=CRASHED, framework="sglang", release="0.5.9", reason="the phases stopped: x",
                prefill="no prefill CUDA graph",
                environment=["nvidia-cutlass-dsl 4.8.0: the release asks nvidia-cutlass-dsl>=4.3.4 ..."])
    assert cell.text("2.13.0") == ("CRASHED: the phases stopped: x; prefill: no prefill CUDA graph; environment: "
                                   "nvidia-cutlass-dsl 4.8.0: the release asks nvidia-cutlass-dsl>=4.3.4 ...")
    assert cell.to_dict()["environment"] == cell.environment


def test_without_uv_the_matrix_is_one_line_exit_2_before_any_cell(tmp_path):
    # An interpreter where uv neither imports nor is on the PATH, as the doctor
    # installed without its dependencies.
    code = "import sys; sys.modules['uv'] = None; from graphbreak_doctor.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, "matrix", "--layer", "dense", "--impl", "reference",
                           "--flashinfer", FI_OLD], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("graphbreak-doctor: error: uv, which builds the matrix's environments, "
                                  "is not installed here") and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stdout == "" and not any(tmp_path.iterdir())
