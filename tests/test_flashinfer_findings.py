"""FlashInfer's FP4 quantization on an emulated SM120, as the doctor reports it:
categories, verdict, fixes and JIT requests."""

import importlib.metadata

import pytest

from conftest import FP4_WRAPPER, FP4_WRAPPER_COLD

pytestmark = pytest.mark.flashinfer_version
FLASHINFER = importlib.metadata.version("flashinfer-python")
HAS_OP = not FLASHINFER.startswith("0.6.")


@pytest.fixture(scope="module")
def wrapper(traces):
    """The wrapper traced in a process of its own, as a user runs it (the session's traces)."""
    done = traces.get(*FP4_WRAPPER_COLD)
    assert done.code == 0, done.stderr[-3000:]
    return done.findings


def test_wrapper_breaks_have_the_four_categories_and_fullgraph_fails_on_subprocess(wrapper):
    categories = {b.category for b in wrapper.breaks}
    assert {"subprocess", "filesystem", "unsupported-builtin", "opaque-call"} <= categories
    first = wrapper.break_by_id(wrapper.fullgraph.break_id)
    assert wrapper.fullgraph.ok is False and first.category == "subprocess"
    assert first.actionable_frame.file.endswith("flashinfer/jit/cpp_ext.py")
    assert first.package == "flashinfer"
    fs = next(b for b in wrapper.breaks if b.category == "filesystem")
    assert fs.culprit == "posix.stat" and "flashinfer/jit/" in fs.actionable_frame.file
    assert any(f.file.endswith("pathlib.py") for f in fs.stack)


def test_warm_the_subprocess_failure_stays_and_the_first_call_breaks_go(traces, wrapper):
    """The default trace runs the wrapper eagerly first, as a server warms up:
    FlashInfer's JIT module is built then, not while Dynamo traces, and the
    breaks only a first call meets are gone; the subprocess probe, which runs
    on every call, still stops fullgraph -- the failure users report."""
    warm = traces.get(*FP4_WRAPPER).findings
    first = warm.break_by_id(warm.fullgraph.break_id)
    assert warm.fullgraph.ok is False and first.category == "subprocess"
    assert warm.warm_up.ran and warm.warm_up.how == "one eager call at the traced size"
    assert any(n.startswith("fp4_quantization_120") for n in warm.warm_up.loaded), warm.warm_up.loaded
    assert not any(b.jit for b in warm.breaks)
    assert {b.key() for b in warm.breaks} < {b.key() for b in wrapper.breaks}


def test_jit_builds_are_shown_beside_the_break_that_caused_them(wrapper):
    jit = [(j.action, j.name) for b in wrapper.breaks for j in b.jit]
    assert ("build", "fp4_quantization_120f" if HAS_OP else "fp4_quantization_120") in jit
    assert {r.name for r in wrapper.jit_requests} >= {name for _, name in jit}


@pytest.mark.skipif(not HAS_OP, reason="torch.ops.flashinfer.fp4_quantize exists from flashinfer 0.7")
def test_wrapper_fix_points_to_the_registered_op(wrapper):
    quantization = [b for b in wrapper.breaks if any(f.function == "fp4_quantize" for f in b.stack)]
    assert quantization
    for b in quantization:
        assert b.fix.recipe == "use-registered-op"
        assert "torch.ops.flashinfer.fp4_quantize" in b.fix.summary


@pytest.mark.skipif(not HAS_OP, reason="torch.ops.flashinfer.fp4_quantize exists from flashinfer 0.7")
def test_registered_op_has_no_quantization_break(traces):
    findings = traces.get("--target", "fixtures.flashinfer_targets:fp4_quantize_op", "--device", "sm120",
                          "--mode", "both").findings
    assert findings.breaks == []
    assert findings.fullgraph.ok is True


@pytest.mark.skipif(HAS_OP, reason="flashinfer 0.6 has no registered op to point to")
def test_063_fixes_wrap_the_call_and_hoist_the_probes_inside(wrapper):
    """No registered op: the call the target makes becomes a custom op (the
    change in the user's code); hoisting FlashInfer's probes is the change
    inside the library."""
    by_category = {b.category: b.fix for b in wrapper.breaks}
    for category, inside in (("subprocess", "hoist-subprocess"), ("filesystem", "hoist-filesystem")):
        fix = by_category[category]
        assert fix.recipe == "wrap-custom-op" and "`flashinfer.fp4_quantize`" in fix.summary
        assert fix.where.startswith("fixtures/flashinfer_targets.py:")
        assert fix.secondary.recipe == inside and fix.secondary.where.startswith("flashinfer/jit/")
