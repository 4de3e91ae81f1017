"""`trace --cudagraph` / `check --cudagraph`: a target captured into a CUDA
graph on the emulated GPU as a server captures it (two eager warm-ups, then
torch's own `torch.cuda.graph` around one call), and every capture hazard
inside the captured segment with its category, line and fix.

The targets (fixtures/cudagraph_hazards.py) each hold one hazard -- an
`.item()` on a device tensor, a branch on a CPU tensor, random numbers from
a generator the graph does not know -- and their fixed
versions hold none; the line reported is found by its text in the fixture,
not written here.
"""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, run_cli
from graphbreak_doctor.model import Findings

FIXTURE = ROOT / "fixtures" / "cudagraph_hazards.py"
SPEC = "fixtures.cudagraph_hazards:{}"


def _line(text: str) -> int:
    return next(i for i, line in enumerate(FIXTURE.read_text().splitlines(), 1) if text in line)


@pytest.fixture(scope="module")
def captured() -> dict[str, Findings]:
    """Each fixture target's CUDA-graph map, captured in this process."""
    from graphbreak_doctor.diagnose import target_builder, trace_cudagraphs

    return {name: trace_cudagraphs(target_builder(SPEC.format(name)), device="sm120")
            for name in ("item_in_capture", "item_fixed", "host_branch", "host_branch_fixed", "noise_own_generator",
                         "noise_default_generator", "item_of_computed", "nonzero_of_computed")}


@pytest.mark.parametrize("name, category, text, fix", [
    ("item_in_capture", "cudagraph-sync", "scale.item()", "sync-outside-capture"),
    ("host_branch", "cudagraph-frozen-value", "if LENGTHS.max() > 4:", "read-at-replay"),
    ("noise_own_generator", "cudagraph-rng", "torch.randn(x.shape", "register-generator"),
    ("item_of_computed", "cudagraph-sync", "peak = int(y.abs().amax().item())", "sync-outside-capture"),
])
def test_a_hazard_in_the_captured_segment_is_found_at_its_line(captured, name, category, text, fix):
    found = captured[name].cudagraphs
    (phase,) = found.phases
    assert phase.backend == "full" and phase.sizes == [16]
    (capture,) = phase.captures
    assert capture.error == "" and capture.segments == 1 and capture.breaks == []
    (hazard,) = capture.hazards
    assert hazard.category == category and hazard.fix == fix and hazard.segment == 1
    assert hazard.site.file == str(FIXTURE) and hazard.site.line == _line(text), hazard.site
    assert text in hazard.fix_text and hazard.site.function in hazard.fix_text
    assert hazard.stack[-1] == hazard.site


@pytest.mark.parametrize("name", ["item_fixed", "host_branch_fixed", "noise_default_generator"])
def test_the_fixed_targets_have_no_hazard(captured, name):
    found = captured[name].cudagraphs
    (capture,) = found.phases[0].captures
    assert capture.error == "" and capture.segments == 1 and capture.hazards == []


def test_reads_outside_the_capture_are_no_hazard(captured):
    # The warm-ups run the same `.item()` twice before the capture: only the
    # captured call counts.
    (hazard,) = captured["item_in_capture"].cudagraphs.hazards()
    assert hazard.count == 1


def test_a_value_the_emulated_gpu_does_not_know_is_no_error_of_the_target(captured, tmp_path):
    """A value only the GPU computes. Its `.item()` (ScaleByPeak) is assumed
    in the warm-ups and the capture, and said; `nonzero` of it
    (CountPositive) has no size to assume: the eager warm-ups stop there and
    the map says so, and the capture goes on, where the call is the hazard
    (as on a GPU, the capture cannot finish). `trace` says the same, never
    exit 2: fullgraph captures the whole forward (Dynamo's verdict; the
    captured graph's run stops at the read), and explain stops at the read's
    line."""
    line = _line("peak = int(")
    assert "a device value read on the host (torch.float32): 1.0" in captured["item_of_computed"].cudagraphs.assumed
    found = captured["nonzero_of_computed"].cudagraphs
    where = _line("positive = (y > 0).nonzero()")
    (stopped,) = [a for a in found.assumed if a.startswith("the eager warm-ups")]
    assert f"(aten.nonzero.default at " in stopped and f"cudagraph_hazards.py:{where} in forward)" in stopped
    assert stopped.endswith("captured after 0 of 2"), stopped
    (capture,) = found.phases[0].captures
    (hazard,) = capture.hazards
    assert hazard.category == "cudagraph-sync" and hazard.site.line == where and "nonzero" in capture.error
    spec = SPEC.format("item_of_computed")
    done = run_cli("trace", "--target", spec, "--mode", "fullgraph", "--json", str(tmp_path / "f.json"), "--no-html")
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    found = json.loads((tmp_path / "f.json").read_text())
    assert found["fullgraph"]["ok"] is True and found["fullgraph"]["note"].startswith(
        "the captured graph's run stopped where it read a device value the emulated GPU does not know "
        "(aten._local_scalar_dense.default)"), found["fullgraph"]
    assert found["warm_up"]["ran"] is False and found["warm_up"]["error"].endswith(
        f"cudagraph_hazards.py:{line} in forward (a device value the emulated GPU does not know)"), found["warm_up"]
    explain = run_cli("trace", "--target", spec, "--mode", "explain", "--json", str(tmp_path / "e.json"), "--no-html")
    assert explain.returncode == 3, explain.stdout + explain.stderr[-2000:]
    crashed = json.loads((tmp_path / "e.json").read_text())
    assert crashed["fullgraph"]["site"]["line"] == line and crashed["fullgraph"]["site"]["file"] == str(FIXTURE)
    assert crashed["fullgraph"]["error"].startswith("the traced code read a device value the emulated GPU does "
                                                    "not know (aten._local_scalar_dense.default at ")
    assert [b["category"] for b in crashed["breaks"]] == ["data-dependent"]  # the break before the read is kept
    assert "raises without torch.compile" not in explain.stderr


def test_findings_of_schema_1_are_read_without_a_cudagraph_map(captured):
    data = captured["item_fixed"].to_dict()
    assert data["schema_version"] == 2
    data["schema_version"] = 1
    data.pop("cudagraphs")
    old = Findings.from_dict(data)
    assert old.cudagraphs is None and old.schema_version == 2
    again = Findings.from_json(captured["item_in_capture"].to_json())
    assert again.cudagraphs == captured["item_in_capture"].cudagraphs


def test_check_fails_on_a_hazard_the_baseline_lacks_and_passes_on_the_same_one(tmp_path):
    spec = SPEC.format("item_in_capture")
    common = ("--target", spec, "--cudagraph", "--mode", "explain")
    out = tmp_path / "check.json"
    bare = run_cli("check", *common, "--max-breaks", "5", "--json", str(out))
    assert bare.returncode == 1, bare.stderr[-2000:]
    assert "cudagraph-hazard: 1 capture hazard not in the baseline; first: cudagraph-sync" in bare.stdout
    written = run_cli("baseline", "write", *common, "-o", str(tmp_path / "b.json"))
    assert written.returncode == 0, written.stderr[-2000:]
    baseline = json.loads((tmp_path / "b.json").read_text())
    entries = baseline["targets"][0]["entries"]
    assert [e["modes"] for e in entries if e["category"] == "cudagraph-sync"] == [["cudagraph"]]
    same = run_cli("check", *common, "--baseline", str(tmp_path / "b.json"), "--sarif", str(tmp_path / "same.sarif"),
                   env={"GITHUB_ACTIONS": "true"})
    assert same.returncode == 0, same.stdout + same.stderr[-2000:]
    # Accepted by the baseline: a note in SARIF, and no annotation.
    results = json.loads((tmp_path / "same.sarif").read_text())["runs"][0]["results"]
    (result,) = [r for r in results if r["ruleId"] == "cudagraph-sync"]
    assert result["level"] == "note" and all(r["level"] == "note" for r in results)
    assert result["properties"]["baseline"] == "accepted"
    assert "::error" not in same.stdout
    # The baseline without the hazard: the same run is a new hazard again.
    baseline["targets"][0]["entries"] = [e for e in entries if e["category"] != "cudagraph-sync"]
    (tmp_path / "lacks.json").write_text(json.dumps(baseline))
    lacks = run_cli("check", *common, "--baseline", str(tmp_path / "lacks.json"))
    assert lacks.returncode == 1 and "cudagraph-hazard" in lacks.stdout, lacks.stdout


def test_the_report_shows_the_map_in_every_output(tmp_path):
    spec = SPEC.format("host_branch")
    out, page = tmp_path / "f.json", tmp_path / "f.html"
    done = run_cli("trace", "--target", spec, "--cudagraph", "--mode", "explain", "--json", str(out),
                   "--html", str(page))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "CUDA-graph map: 1 phase captured: 1 capture hazard (cudagraph-frozen-value 1)" in done.stdout
    assert f"cudagraph-frozen-value at fixtures/cudagraph_hazards.py:{_line('LENGTHS.max()')}" in done.stdout
    findings = json.loads(out.read_text())
    assert findings["cudagraphs"]["phases"][0]["captures"][0]["hazards"][0]["fix"] == "read-at-replay"
    html = page.read_text()
    assert 'id="cudagraphs"' in html and "cat-cudagraph-frozen-value" in html and "read-at-replay" in html


def test_check_points_sarif_and_github_annotations_at_each_hazard_s_line(tmp_path):
    # A host sync (.item() of a device tensor) and a CPU value frozen into
    # the graph (a branch on a host tensor), each inside the captured segment.
    sar = tmp_path / "gate.sarif"
    done = run_cli("check", "--target", SPEC.format("item_in_capture"), "--target", SPEC.format("host_branch"),
                   "--cudagraph", "--mode", "explain", "--sarif", str(sar), env={"GITHUB_ACTIONS": "true"})
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    doc = json.loads(sar.read_text())
    (run,) = doc["runs"]
    results = {r["ruleId"]: r for r in run["results"] if r["ruleId"].startswith("cudagraph-")}
    assert set(results) == {"cudagraph-sync", "cudagraph-frozen-value"}, run["results"]
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    for category, text, recipe in (("cudagraph-sync", "scale.item()", "sync-outside-capture"),
                                   ("cudagraph-frozen-value", "if LENGTHS.max() > 4:", "read-at-replay")):
        result = results[category]
        assert result["level"] == "error" and result["properties"]["recipe"] == recipe
        assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == category
        physical = result["locations"][0]["physicalLocation"]
        assert physical["artifactLocation"] == {"uri": "fixtures/cudagraph_hazards.py", "uriBaseId": "%SRCROOT%"}
        assert physical["region"]["startLine"] == _line(text)
        assert result["message"]["text"].startswith(f"CUDA-graph capture hazard [{category}]")
        assert len(result["partialFingerprints"]["graphbreakKey/v1"]) == 32
        # The rule's help is the category's recipe, as a break's is.
        assert rules[category]["shortDescription"]["text"] == f"CUDA-graph capture hazard: {category}"
        assert rules[category]["help"]["markdown"].startswith("**")
        (annotation,) = [line for line in done.stdout.splitlines()
                         if f"title=CUDA-graph capture hazard [{category}]::" in line]
        assert annotation.startswith(f"::error file=fixtures/cudagraph_hazards.py,line={_line(text)},"), annotation
        assert "%0Afails: cudagraph-hazard%0Afix: " in annotation
    # The hazards are annotated at their lines, not again as a failure with no line.
    assert "title=graphbreak-doctor: cudagraph-hazard" not in done.stdout
