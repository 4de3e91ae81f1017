"""Every fixture breaks Dynamo for real; the doctor names the category and the place."""

from pathlib import Path

import pytest
import torch

from graphbreak_doctor.diagnose import diagnose, target_builder

ROOT = Path(__file__).resolve().parents[1]
BREAKS = ROOT / "fixtures" / "breaks"


def line_of(fixture: str, text: str) -> int:
    """Line number of the first source line containing ``text``."""
    for i, line in enumerate((BREAKS / f"{fixture}.py").read_text().splitlines(), 1):
        if text in line:
            return i
    raise AssertionError(f"{text!r} not in {fixture}")


# fixture, category, site file suffix (where Dynamo stopped), actionable line text, gb_type
CASES = [
    ("subprocess_call", "subprocess", "subprocess.py", "subprocess.check_output(", "Attempted to call function marked as skipped"),
    ("filesystem_exists", "filesystem", "genericpath>", "os.path.exists(", "Attempted to call function marked as skipped"),
    ("filesystem_pathstat", "filesystem", "pathlib.py", "CACHE.stat()", "Attempted to call function marked as skipped"),
    ("compiler_disable", "compiler-disable", "compiler_disable.py", "q = quantize(y)", "Skip calling `torch.compiler.disable()`d function"),
    ("opaque_ctypes", "opaque-call", "opaque_ctypes.py", "return _abs(-2)", "Unsupported method call"),
    ("builtin_namespace", "unsupported-builtin", "builtin_namespace.py", "types.SimpleNamespace(", "Unsupported function call"),
    ("builtin_datetime", "unsupported-builtin", "builtin_datetime.py", "datetime.datetime.now()", "Unsupported method call"),
    ("data_dependent", "data-dependent", "data_dependent.py", "if y.sum() > 0:", "Data-dependent branching"),
    ("logging_calls", "logging", "logging_calls.py", "logger.warning(", "logging.Logger method not supported for non-export cases"),
]


def trace(fixture: str, mode: str = "both"):
    return diagnose(target_builder(f"fixtures.breaks.{fixture}:target"), mode=mode, device="cpu")


@pytest.fixture(scope="module")
def traced():
    return {name: trace(name) for name, *_ in CASES}


@pytest.mark.parametrize("fixture,category,site_suffix,actionable_text,gb_type", CASES)
def test_fixture_category_and_site(traced, fixture, category, site_suffix, actionable_text, gb_type):
    findings = traced[fixture]
    first = findings.breaks[0]
    assert first.category == category
    assert first.gb_type == gb_type
    assert first.site.file.endswith(site_suffix)
    assert first.actionable_frame is not None
    assert first.actionable_frame.file == str(BREAKS / f"{fixture}.py")
    assert first.actionable_frame.line == line_of(fixture, actionable_text)
    assert first.package == "fixtures"
    assert first.fix.summary and first.fix.snippet
    # Seen by both modes, and the fullgraph verdict names this break.
    assert first.modes == ["explain", "fullgraph"]
    assert findings.fullgraph.ran and findings.fullgraph.ok is False
    assert findings.fullgraph.break_id == first.id


def test_fullgraph_only_mode_reports_first_failure():
    findings = trace("logging_calls", mode="fullgraph")
    assert [b.category for b in findings.breaks] == ["logging"]
    assert findings.breaks[0].modes == ["fullgraph"]
    assert findings.breaks[0].site.line == line_of("logging_calls", "logger.warning(")


def test_explain_sees_every_break_in_a_function(traced):
    findings = traced["logging_calls"]
    lines = [b.site.line for b in findings.breaks]
    assert lines == [line_of("logging_calls", "logger.warning("), line_of("logging_calls", 'print("layer done")')]
    assert findings.breaks[1].culprit == "builtins.print"
    assert findings.breaks[1].modes == ["explain"]


def test_stack_is_trimmed_to_the_target(traced):
    stack = traced["subprocess_call"].breaks[0].stack
    assert stack[0].function == "layer"
    assert [f.function for f in stack[:2]] == ["layer", "probe_version"]
    assert any(f.file.endswith("subprocess.py") and f.function == "check_output" for f in stack)
    assert traced["subprocess_call"].breaks[0].via == "subprocess.check_output"


def test_clean_function_has_no_breaks():
    findings = trace("clean")
    assert findings.breaks == []
    assert findings.fullgraph.ok is True
    assert findings.graph_count == 1
    assert findings.graphs[0].ops >= 2


def test_lru_cache_is_a_hazard_not_a_break():
    findings = trace("lru_hazard")
    assert findings.breaks == []
    assert [h.kind for h in findings.hazards] == ["lru_cache"]


def test_duplicates_are_merged_and_counted():
    from fixtures.breaks.subprocess_call import probe_version

    def thrice(x):
        x = x + len(probe_version())
        x = x * 2
        x = x + len(probe_version())
        x = x * 3
        x = x + len(probe_version())
        return x

    from graphbreak_doctor.targets import Target, TargetInfo

    findings = diagnose(lambda _log: Target(thrice, (torch.ones(2),), {}, TargetInfo(spec="thrice")), mode="explain",
                        device="cpu")
    assert len(findings.breaks) == 1
    assert findings.breaks[0].count == 3
    assert findings.breaks[0].category == "subprocess"


def test_doctor_finds_a_break_that_explain_does_not_list():
    from fixtures.breaks.builtin_namespace import target

    fn, args = target()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(*args)
    torch._dynamo.reset()
    assert explained.graph_break_count == 0  # the break is in a frame that produced no graph
    findings = trace("builtin_namespace", mode="explain")
    assert [b.category for b in findings.breaks] == ["unsupported-builtin"]
    assert findings.breaks[0].culprit == "types.SimpleNamespace"


def test_gb_ids_come_from_the_registry(traced):
    from graphbreak_doctor.analysis.registry import _by_type

    for findings in traced.values():
        for b in findings.breaks:
            assert b.gb_id == _by_type()[b.gb_type]


def test_one_run_does_not_leak_into_the_next():
    first = trace("subprocess_call")
    trace("clean")
    again = trace("subprocess_call")
    assert first.to_json() == again.to_json()
