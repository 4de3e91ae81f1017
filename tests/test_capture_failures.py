"""Fullgraph failures that are not ``Unsupported`` are findings with a category
and a site; real crashes stay crashes. Decided on Dynamo's exception types."""

from pathlib import Path

import pytest

from graphbreak_doctor.diagnose import diagnose, target_builder

ROOT = Path(__file__).resolve().parents[1]
BREAKS = ROOT / "fixtures" / "breaks"


def line_of(path: Path, text: str) -> int:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if text in line:
            return i
    raise AssertionError(f"{text!r} not in {path}")


def trace(spec: str, mode: str = "both"):
    return diagnose(target_builder(spec), mode=mode, device="cpu")


# fixture, the line Dynamo fails at, an exception type on the chain, the advice
CASES = [
    ("item_branch", "if x.sum().item() > 0:", "torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode",
     "static-control-flow"),
    ("unbacked_split", "torch.split(x, active)", "torch._dynamo.exc.UserErrorType.CONSTRAINT_VIOLATION",
     "static-control-flow"),
    ("dynamic_size", "if x.shape[0] == 8:", "torch.fx.experimental.symbolic_shapes.ConstraintViolationError",
     "keep-size-dynamic"),
]


@pytest.mark.parametrize("fixture,text,exception,advice", CASES)
def test_fullgraph_failure_is_a_finding_not_a_crash(fixture, text, exception, advice):
    findings = trace(f"fixtures.breaks.{fixture}:target", mode="fullgraph")
    fg = findings.fullgraph
    assert fg.ran and fg.ok is False and not fg.crashed
    assert findings.incomplete() == ""
    first = findings.break_by_id(fg.break_id)
    assert first is not None, "the verdict names the failing break"
    assert first.category == "data-dependent"
    assert exception in first.exceptions
    assert not first.gb_id  # no registry id: the exception type decided
    source = BREAKS / f"{fixture}.py"
    assert (first.site.file, first.site.line) == (str(source), line_of(source, text))
    assert first.actionable_frame == first.site
    assert first.fix.recipe == advice


def test_check_fails_the_gate_instead_of_crashing(cli):
    result = cli("check", "--target", "fixtures.breaks.item_branch:target", "--device", "cpu", "--require-fullgraph",
                 "--in-process")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "crash" not in result.stdout.lower()
    traced = cli("trace", "--target", "fixtures.breaks.item_branch:target", "--device", "cpu", "--no-html", "--in-process")
    assert traced.returncode == 0, traced.stderr
    assert "fullgraph: FAILED -- Guard on a data-dependent expression [data-dependent] at " \
           "fixtures/breaks/item_branch.py:" in traced.stdout
    assert "CRASHED" not in traced.stdout


def test_a_stack_read_from_the_message_is_counted():
    """ConstraintViolationError carries no frames: its message's "User stack:" is
    read, and the findings say so."""
    findings = trace("fixtures.breaks.dynamic_size:target")
    (brk,) = findings.breaks
    assert brk.modes == ["explain", "fullgraph"]
    assert brk.fallbacks == ["stack"]
    assert findings.message_fallbacks == {"stack": 1}


def test_a_fake_kernel_that_disagrees_with_its_kernel_is_still_a_crash(cli):
    findings = trace("fixtures.gate.wrong_fake:target")
    assert findings.fullgraph.crashed
    assert "TorchRuntimeError" in findings.fullgraph.error
    source = ROOT / "fixtures" / "gate" / "wrong_fake.py"
    site = findings.fullgraph.site
    assert (site.file, site.line) == (str(source), line_of(source, "return pack_halves(x) @ w"))
    result = cli("check", "--target", "fixtures.gate.wrong_fake:target", "--device", "cpu", "--in-process")
    assert result.returncode == 3
    traced = cli("trace", "--target", "fixtures.gate.wrong_fake:target", "--device", "cpu", "--no-html", "--in-process")
    assert traced.returncode == 3
    assert "at fixtures/gate/wrong_fake.py:" in traced.stdout


def test_capture_failure_names_are_the_installed_torch_types():
    """The table is by qualified name (a log read back names the types in
    text); each must be a type of the installed torch, or a failure of that
    type would be reported as a crash."""
    import importlib

    from graphbreak_doctor.capture import exceptions

    for name in exceptions.CAPTURE_FAILURES:
        module, _, attr = name.rpartition(".")
        tp = getattr(importlib.import_module(module), attr)
        assert isinstance(tp, type) and issubclass(tp, Exception), name
        assert f"{tp.__module__}.{tp.__qualname__}" == name
