"""The CI gate: `graphbreak-doctor check` / `baseline write`, their exit codes,
baselines that survive line shifts, JUnit XML and SARIF.

Real Dynamo runs throughout: the CLI through a subprocess (tests/conftest.py
run_cli; --in-process: what runs in the worker processes is tests/test_faults.py's
subject), the checks in-process over one diagnosis per module.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import junitparser
import pytest

from graphbreak_doctor.analysis.categories import CATEGORIES
from graphbreak_doctor.diagnose import diagnose, target_builder
from graphbreak_doctor.gate import baseline as baselines
from graphbreak_doctor.model import GateReport
from graphbreak_doctor.gate.policy import Policy, evaluate
from graphbreak_doctor.render import junit, sarif

from conftest import ROOT, run_cli

CLEAN = "fixtures.breaks.clean:target"
SUBPROCESS = "fixtures.breaks.subprocess_call:target"
CRASH = "fixtures.gate.wrong_fake:target"
DRIFTING = "fixtures.gate.drifting:target"
DRIFTING_SRC = ROOT / "fixtures" / "gate" / "drifting.py"


# --- SARIF 2.1.0: the required fields of the schema (sarif-schema-2.1.0.json), vendored
# as checks: sarifLog requires version + runs; run requires tool; tool requires driver;
# toolComponent requires name; result requires message (text or id); reportingDescriptor
# requires id; region.startLine is an integer >= 1; level is one of four values.

def sarif_problems(doc: dict) -> list[str]:
    problems = []
    if doc.get("version") != "2.1.0":
        problems.append("version must be '2.1.0'")
    if not isinstance(doc.get("$schema"), str) or "sarif" not in doc["$schema"]:
        problems.append("$schema must name the SARIF schema")
    runs = doc.get("runs")
    if not isinstance(runs, list) or not runs:
        return problems + ["runs must be a non-empty list"]
    for r, run in enumerate(runs):
        driver = run.get("tool", {}).get("driver", {})
        if not isinstance(driver.get("name"), str) or not driver["name"]:
            problems.append(f"runs[{r}].tool.driver.name is required")
        rules = driver.get("rules", [])
        for i, rule in enumerate(rules):
            if not isinstance(rule.get("id"), str):
                problems.append(f"runs[{r}].tool.driver.rules[{i}].id is required")
        for i, res in enumerate(run.get("results", [])):
            where = f"runs[{r}].results[{i}]"
            if not isinstance(res.get("message", {}).get("text"), str) or not res["message"]["text"]:
                problems.append(f"{where}.message.text is required")
            if not isinstance(res.get("ruleId"), str):
                problems.append(f"{where}.ruleId is required here")
            if "ruleIndex" in res and rules[res["ruleIndex"]]["id"] != res["ruleId"]:
                problems.append(f"{where}.ruleIndex does not point at rule {res['ruleId']}")
            if res.get("level", "warning") not in ("none", "note", "warning", "error"):
                problems.append(f"{where}.level is not a SARIF level")
            locations = res.get("locations")
            if not isinstance(locations, list) or not locations:
                problems.append(f"{where}.locations is required here")
                continue
            for loc in locations:
                phys = loc.get("physicalLocation", {})
                if not isinstance(phys.get("artifactLocation", {}).get("uri"), str):
                    problems.append(f"{where}: physicalLocation.artifactLocation.uri is required")
                line = phys.get("region", {}).get("startLine")
                if not isinstance(line, int) or line < 1:
                    problems.append(f"{where}: region.startLine must be an integer >= 1")
    return problems


def junit_cases(path: Path) -> dict[str, junitparser.TestCase]:
    xml = junitparser.JUnitXml.fromfile(str(path))
    return {f"{c.classname}/{c.name}": c for suite in xml for c in suite}


def one_line_error(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("graphbreak-doctor: error: ")
    assert "Traceback" not in result.stderr
    return lines[0]


def copy_fixture(dest_root: Path, source: str) -> Path:
    """fixtures/gate/drifting.py at the same module path under ``dest_root``."""
    pkg = dest_root / "fixtures" / "gate"
    pkg.mkdir(parents=True)
    (dest_root / "fixtures" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    path = pkg / "drifting.py"
    path.write_text(source)
    return path


# --- exit 0 ----------------------------------------------------------------------

def test_clean_target_passes_every_check(tmp_path):
    xml, sar = tmp_path / "gate.xml", tmp_path / "gate.sarif"
    result = run_cli("check", "--in-process", "--target", CLEAN, "--device", "cpu", "--require-fullgraph", "--max-breaks", "0",
                     "--fail-on", "subprocess", "--junit", str(xml), "--sarif", str(sar),
                     env={"GITHUB_ACTIONS": "true"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gate: passed (2 target x mode checks)" in result.stdout
    assert "::error" not in result.stdout
    cases = junit_cases(xml)
    assert sorted(cases) == [f"{CLEAN}/explain (cpu)", f"{CLEAN}/fullgraph (cpu)"]
    assert all(c.is_passed for c in cases.values())
    doc = json.loads(sar.read_text())
    assert sarif_problems(doc) == [] and doc["runs"][0]["results"] == []


# --- exit 1: a failing gate and its outputs (one run, several assertions) --------------

@pytest.fixture(scope="module")
def failing(tmp_path_factory):
    out = tmp_path_factory.mktemp("failing")
    result = run_cli("check", "--in-process", "--target", SUBPROCESS, "--device", "cpu", "--require-fullgraph",
                     "--fail-on", "subprocess,logging", "--junit", str(out / "gate.xml"),
                     "--sarif", str(out / "gate.sarif"), "--json", str(out / "findings.json"),
                     env={"GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(ROOT)})
    return result, out


def test_failing_gate_exits_1_with_a_verdict(failing):
    result, out = failing
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{SUBPROCESS} [explain, cpu]: FAILED" in result.stdout
    assert "require-fullgraph: fullgraph capture failed: Attempted to call function marked as skipped" in result.stdout
    assert "fail-on: 1 break in forbidden categories: subprocess" in result.stdout
    assert "[subprocess] fixtures/breaks/subprocess_call.py:10 in probe_version (fixtures)" in result.stdout
    assert "gate: FAILED (2 of 2 target x mode checks failed: fail-on, require-fullgraph)" in result.stdout
    assert json.loads((out / "findings.json").read_text())["breaks"][0]["category"] == "subprocess"


def test_junit_has_one_failing_testcase_per_mode_with_location(failing):
    _, out = failing
    xml = junitparser.JUnitXml.fromfile(str(out / "gate.xml"))
    suites = list(xml)
    assert len(suites) == 1 and suites[0].tests == 2 and suites[0].failures == 2 and suites[0].errors == 0
    cases = junit_cases(out / "gate.xml")
    explain, fullgraph = cases[f"{SUBPROCESS}/explain (cpu)"], cases[f"{SUBPROCESS}/fullgraph (cpu)"]
    for case in (explain, fullgraph):
        (failure,) = case.result
        assert isinstance(failure, junitparser.Failure)
        assert "fixtures/breaks/subprocess_call.py:10 in probe_version" in failure.text
        assert "fix: Move `subprocess.check_output` out of probe_version" in failure.text
    assert explain.result[0].type == "fail-on"
    assert fullgraph.result[0].type == "require-fullgraph"
    assert "require-fullgraph: fullgraph capture failed" in fullgraph.result[0].message


def test_sarif_has_required_fields_and_points_at_the_actionable_frame(failing):
    _, out = failing
    doc = json.loads((out / "gate.sarif").read_text())
    assert sarif_problems(doc) == []
    run = doc["runs"][0]
    assert run["tool"]["driver"]["name"] == "graphbreak-doctor"
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["subprocess"]
    assert "once" in run["tool"]["driver"]["rules"][0]["help"]["text"]
    (res,) = run["results"]
    assert res["ruleId"] == "subprocess" and res["level"] == "error"
    phys = res["locations"][0]["physicalLocation"]
    assert phys["artifactLocation"] == {"uri": "fixtures/breaks/subprocess_call.py", "uriBaseId": "%SRCROOT%"}
    assert phys["region"]["startLine"] == 10
    assert "Fix: Move `subprocess.check_output` out of probe_version" in res["message"]["text"]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == ROOT.as_uri() + "/"


def test_github_annotations_on_the_changeable_line(failing):
    result, _ = failing
    annotations = [line for line in result.stdout.splitlines() if line.startswith("::")]
    assert len(annotations) == 1
    line = annotations[0]
    assert line.startswith("::error file=fixtures/breaks/subprocess_call.py,line=10,title=graph break [subprocess]::")
    # Newlines in the message are escaped: one annotation is one line.
    assert "%0Afails: fail-on, require-fullgraph%0Afix: Move" in line


def test_annotations_only_under_github_actions(tmp_path):
    result = run_cli("check", "--in-process", "--target", SUBPROCESS, "--device", "cpu", "--mode", "fullgraph",
                     env={"GITHUB_ACTIONS": ""})
    assert result.returncode == 1
    assert "::error" not in result.stdout
    # No criterion: the gate is --max-breaks 0.
    assert "max-breaks: 1 break counted, at most 0 allowed" in result.stdout


# --- exit 2: usage and input errors, one line, nothing traced or written -----------------

def _bad_baseline(tmp_path: Path, text: str) -> str:
    path = tmp_path / "baseline.json"
    path.write_text(text)
    return str(path)


def _valid_baseline(device: str = "cpu", target: str = CLEAN) -> str:
    return baselines.Baseline(device=device, targets=[baselines.TargetBaseline(target, "both", [])]).to_json()


USAGE_CASES = [
    (["--fail-on", "subprocess,bogus"], "unknown category bogus (choose from subprocess, filesystem"),
    (["--max-breaks", "-1"], "expected an integer >= 0"),
    (["--mode", "explain", "--require-fullgraph"], "--require-fullgraph needs a fullgraph mode"),
    (["--only-packages", "a", "--ignore-packages", "b"], "not allowed with argument"),
    (["--baseline", "{tmp}/missing.json"], "does not exist (create it with `graphbreak-doctor baseline write`)"),
    (["--baseline", "bad:{{ not json"], "is not valid JSON"),
    (["--baseline", 'bad:{"kind": "graphbreak-doctor baseline", "schema_version": 99}'], "schema version 99"),
    (["--baseline", 'bad:{"kind": "something else"}'], "not a graphbreak-doctor baseline"),
    (["--baseline", "bad:" + _valid_baseline().replace('"entries": []', '"entries": [{"category": 1}]')],
     "targets[0].entries[0]: missing field(s) package, qualname, gb_type"),
    (["--baseline", "bad:" + _valid_baseline(device="sm120")], "written for device 'sm120', this check runs on 'cpu'"),
]


@pytest.mark.unchecked_json("baseline.json")  # malformed baselines, written by hand
@pytest.mark.parametrize("extra,message", USAGE_CASES, ids=[m[:30] for _, m in USAGE_CASES])
def test_usage_errors_exit_2_in_one_line(tmp_path, extra, message):
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    extra = [_bad_baseline(tmp_path, e[4:]) if e.startswith("bad:") else e for e in extra]
    junit_path = tmp_path / "gate.xml"
    result = run_cli("check", "--in-process", "--target", CLEAN, "--device", "cpu", *extra, "--junit", str(junit_path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in one_line_error(result)
    assert not junit_path.exists()


def test_baseline_without_this_target_exits_2(tmp_path):
    path = _bad_baseline(tmp_path, _valid_baseline(target="fixtures.breaks.other:target"))
    result = run_cli("check", "--in-process", "--target", CLEAN, "--device", "cpu", "--mode", "fullgraph", "--baseline", path)
    assert result.returncode == 2
    assert f"has no entry for target {CLEAN} (it has: fixtures.breaks.other:target)" in one_line_error(result)


def test_baseline_write_refuses_to_overwrite_a_broken_file(tmp_path):
    path = _bad_baseline(tmp_path, "not json")
    result = run_cli("baseline", "write", "--in-process", "--target", CLEAN, "--device", "cpu", "-o", path)
    assert result.returncode == 2
    assert "refusing to overwrite it" in one_line_error(result)
    assert Path(path).read_text() == "not json"


def test_baseline_needs_an_action_and_an_output():
    assert run_cli("baseline").returncode == 2
    result = run_cli("baseline", "write", "--in-process", "--target", CLEAN)
    assert result.returncode == 2 and "-o/--output" in one_line_error(result)


# --- exit 3: a target that crashes under Dynamo (a wrong fake), not a break ---------------

def test_crash_under_dynamo_exits_3_and_reports_an_error(tmp_path):
    xml, sar = tmp_path / "gate.xml", tmp_path / "gate.sarif"
    result = run_cli("check", "--in-process", "--target", CRASH, "--device", "cpu", "--junit", str(xml), "--sarif", str(sar))
    assert result.returncode == 3, result.stdout + result.stderr
    assert "the target crashed under Dynamo (not a graph break): TorchRuntimeError" in result.stdout
    assert "gate: CRASHED" in result.stdout
    cases = junit_cases(xml)
    assert len(cases) == 2
    for case in cases.values():
        (error,) = case.result
        assert isinstance(error, junitparser.Error) and "TorchRuntimeError" in error.message
    doc = json.loads(sar.read_text())
    assert sarif_problems(doc) == []
    assert doc["runs"][0]["invocations"][0]["executionSuccessful"] is False


def test_baseline_write_of_a_crashing_target_exits_3_and_writes_nothing(tmp_path):
    out = tmp_path / "b.json"
    result = run_cli("baseline", "write", "--in-process", "--target", CRASH, "--device", "cpu", "--mode", "fullgraph", "-o", str(out))
    assert result.returncode == 3
    assert "crashed under Dynamo" in result.stderr and "no baseline written" in result.stderr
    assert not out.exists()


# --- baselines: line shifts, new and disappeared breaks ---------------------------------------

@pytest.fixture(scope="module")
def drifting_baseline(tmp_path_factory):
    """Baseline of fixtures/gate/drifting.py as committed (subprocess + logging)."""
    path = tmp_path_factory.mktemp("baseline") / "drifting.json"
    result = run_cli("baseline", "write", "--in-process", "--target", DRIFTING, "--device", "cpu", "-o", str(path))
    assert result.returncode == 0, result.stderr
    assert f"{DRIFTING} (cpu, both): 2 accepted break key(s): logging, subprocess" in result.stdout
    return path


def test_baseline_file_holds_keys_and_hints(drifting_baseline):
    data = json.loads(drifting_baseline.read_text())
    assert data["schema_version"] == 1 and data["device"] == "cpu"
    (target,) = data["targets"]
    assert target["target"] == DRIFTING
    keys = [tuple(e[k] for k in baselines.KEY_FIELDS) for e in target["entries"]]
    assert keys == [
        ("logging", "fixtures", "report", "logging.Logger method not supported for non-export cases"),
        ("subprocess", "fixtures", "probe_version", "Attempted to call function marked as skipped"),
    ]
    assert target["entries"][1]["hint"].startswith("fixtures/gate/drifting.py:19")


def test_baseline_survives_a_line_shift(tmp_path, drifting_baseline):
    shifted = DRIFTING_SRC.read_text()
    shifted = "# a new licence header\n" * 7 + shifted.replace("\n\n\ndef ", "\n\n\n# moved\n\n\ndef ")
    copy_fixture(tmp_path, shifted)
    sar = tmp_path / "gate.sarif"
    result = run_cli("check", "--in-process", "--target", DRIFTING, "--device", "cpu", "--baseline", str(drifting_baseline),
                     "--sarif", str(sar), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gate: passed" in result.stdout and "no longer seen" not in result.stdout
    # The shift is real: the same breaks now sit on other lines of another file.
    lines = {r["properties"]["qualname"]: r["locations"][0]["physicalLocation"]["region"]["startLine"]
             for r in json.loads(sar.read_text())["runs"][0]["results"]}
    assert lines["probe_version"] != 19 and lines["probe_version"] >= 19 + 7
    assert all(r["level"] == "note" and r["properties"]["baseline"] == "accepted"
               for r in json.loads(sar.read_text())["runs"][0]["results"])


def test_new_break_fails_and_disappeared_one_is_reported(tmp_path, drifting_baseline):
    edited = DRIFTING_SRC.read_text().replace(
        '    logger.warning("layer input has %d elements", x.numel())\n',
        '    if os.path.exists("/nonexistent/graphbreak-doctor"):\n        x = x + 1\n',
    ).replace("import logging\n", "import logging\nimport os\n")
    assert "os.path.exists" in edited
    copy_fixture(tmp_path, edited)
    xml, sar = tmp_path / "gate.xml", tmp_path / "gate.sarif"
    result = run_cli("check", "--in-process", "--target", DRIFTING, "--device", "cpu", "--baseline", str(drifting_baseline),
                     "--junit", str(xml), "--sarif", str(sar), cwd=tmp_path, env={"GITHUB_ACTIONS": "true"})
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "baseline: 1 break not in the baseline" in out
    assert "[filesystem] fixtures/gate/drifting.py:" in out and "in report (fixtures)" in out
    assert "1 accepted break(s) no longer seen" in out
    assert "- [logging] report (fixtures): logging.Logger method not supported" in out
    # Only the new break is an error; the accepted subprocess break is not.
    errors = [line for line in out.splitlines() if line.startswith("::error")]
    assert len(errors) == 1 and "graph break [filesystem]" in errors[0]
    assert any(line.startswith("::notice") and "baseline can shrink" in line for line in out.splitlines())
    (failure,) = junit_cases(xml)[f"{DRIFTING}/explain (cpu)"].result
    assert failure.type == "baseline" and "[filesystem]" in failure.text
    results = json.loads(sar.read_text())["runs"][0]["results"]
    levels = {(r["ruleId"], r["properties"]["baseline"]): r["level"] for r in results}
    assert levels == {("subprocess", "accepted"): "note", ("filesystem", "new"): "error"}


def test_baseline_write_updates_one_target_and_keeps_the_others(tmp_path, drifting_baseline):
    path = tmp_path / "both.json"
    shutil.copy(drifting_baseline, path)
    result = run_cli("baseline", "write", "--in-process", "--target", CLEAN, "--device", "cpu", "--mode", "fullgraph", "-o", str(path))
    assert result.returncode == 0, result.stderr
    data = baselines.load(path)
    assert [t.target for t in data.targets] == [CLEAN, DRIFTING]
    assert data.for_target(CLEAN).entries == [] and len(data.for_target(DRIFTING).entries) == 2
    result = run_cli("baseline", "write", "--in-process", "--target", CLEAN, "--device", "sm120", "-o", str(path))
    assert result.returncode == 2 and "write a separate file per device" in one_line_error(result)


# --- the checks in-process, over one real diagnosis with breaks in two packages ---------------

@pytest.fixture(scope="module")
def mixed():
    """fixtures/gate/mixed.py on an emulated sm120: the fixture's own subprocess
    break plus FlashInfer's (fp4_quantize wrapper)."""
    return diagnose(target_builder("fixtures.gate.mixed:target"), mode="both", device="sm120")


def _ids(breaks) -> set[str]:
    return {b.id for b in breaks}


def test_package_filters_count_only_the_selected_packages(mixed):
    packages = {b.package for b in mixed.breaks}
    assert packages == {"fixtures", "flashinfer"}
    own = {b.id for b in mixed.breaks if b.package == "fixtures"}
    library = {b.id for b in mixed.breaks if b.package == "flashinfer"}
    assert own and library
    for policy, expected in [
        (Policy(max_breaks=0, only_packages=("fixtures",)), own),
        (Policy(max_breaks=0, ignore_packages=("flashinfer",)), own),
        (Policy(max_breaks=0, only_packages=("flashinfer",)), library),
        (Policy(max_breaks=0), own | library),
    ]:
        result = evaluate("mixed", mixed, policy)
        assert _ids(result.counted) == expected
        explain = result.cases[0]
        assert explain.mode == "explain" and explain.failures[0].check == "max-breaks"
        assert _ids(explain.failures[0].breaks) == expected
    assert evaluate("mixed", mixed, Policy(ignore_packages=("fixtures", "flashinfer"))).passed


def test_fail_on_names_only_breaks_of_those_categories(mixed):
    result = evaluate("mixed", mixed, Policy(fail_on=("subprocess",), ignore_packages=("flashinfer",)))
    (failure,) = result.cases[0].failures
    assert failure.check == "fail-on" and {b.category for b in failure.breaks} == {"subprocess"}
    assert {b.package for b in failure.breaks} == {"fixtures"}
    assert evaluate("mixed", mixed, Policy(fail_on=("data-dependent", "logging"))).passed


def test_require_fullgraph_fails_only_the_fullgraph_case(mixed):
    result = evaluate("mixed", mixed, Policy(require_fullgraph=True))
    explain, fullgraph = result.cases
    assert explain.passed
    (failure,) = fullgraph.failures
    assert failure.check == "require-fullgraph" and failure.breaks[0].id == mixed.fullgraph.break_id


def test_baseline_from_the_same_run_passes_and_an_edited_one_does_not(mixed):
    written = baselines.target_baseline(mixed, "both")
    assert evaluate("mixed", mixed, Policy(), written).passed
    dropped, *kept = written.entries
    extra = baselines.BaselineEntry("logging", "fixtures", "gone_helper", "some gb_type", ["explain"])
    result = evaluate("mixed", mixed, Policy(), baselines.TargetBaseline("mixed", "both", kept + [extra]))
    assert not result.passed
    assert {b.key() for b in result.new} == {dropped.key()}
    assert result.disappeared == [extra]
    report = GateReport(device="sm120", targets=[result])
    # The renderers agree with the checks: the dropped key is the only SARIF error.
    errors = [r for r in json.loads(sarif.render(report, ROOT))["runs"][0]["results"] if r["level"] == "error"]
    assert {(r["ruleId"], r["properties"]["package"], r["properties"]["qualname"]) for r in errors} == {
        (dropped.category, dropped.package, dropped.qualname)
    }
    assert "gone_helper" in junit.render(report)


def test_policy_rejects_unknown_categories():
    with pytest.raises(ValueError, match="unknown break category 'nope'"):
        Policy(fail_on=("nope",))
    assert "other" in CATEGORIES


# --- a break report that cannot be parsed: the gate cannot vouch for the target ---


def test_an_unparsed_break_report_fails_the_gate_with_exit_3(tmp_path):
    junit = tmp_path / "gate.xml"
    result = run_cli("check", "--in-process", "--target", "fixtures.gate.unparsable:target", "--device", "cpu",
                     "--max-breaks", "5", "--junit", str(junit))
    assert result.returncode == 3, result.stdout + result.stderr
    assert "1 break report could not be parsed (first: TypeError" in result.stdout
    errors = [r for case in junit_cases(junit).values() for r in case.result if isinstance(r, junitparser.Error)]
    assert errors and "could not be parsed" in errors[0].message
    traced = run_cli("trace", "--in-process", "--target", "fixtures.gate.unparsable:target", "--device", "cpu", "--no-html",
                     "--json", str(tmp_path / "f.json"))
    assert traced.returncode == 0 and "UNPARSED: 1 break report could not be parsed" in traced.stdout
    data = json.loads((tmp_path / "f.json").read_text())
    (event,) = data["unparsed_events"]
    assert event["reason"].startswith("TypeError") and "Graph break in user code" in event["excerpt"]
