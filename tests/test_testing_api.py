"""graphbreak_doctor.testing: assertions a test suite calls on its own functions."""

from __future__ import annotations

import pytest
import torch

from fixtures.breaks import clean, logging_calls, subprocess_call
from fixtures.gate import wrong_fake
from graphbreak_doctor.testing import assert_fullgraph, assert_no_graph_breaks


def test_clean_function_passes_both_assertions():
    x, w = torch.ones(4, 8), torch.ones(8, 8)
    findings = assert_fullgraph(clean.layer, x, w)
    assert findings.fullgraph.ok is True
    assert assert_no_graph_breaks(clean.layer, x, w).breaks == []


def test_no_graph_breaks_lists_every_break_with_category_site_and_fix():
    with pytest.raises(AssertionError) as info:
        assert_no_graph_breaks(logging_calls.layer, torch.ones(8))
    message = str(info.value)
    assert message.startswith("torch.compile breaks the graph of layer (device cpu): 2 distinct breaks")
    assert " 1. [logging] fixtures/breaks/logging_calls.py:12 in layer (fixtures)" in message
    assert "logging.Logger method not supported for non-export cases: logging.Logger.warning" in message
    assert " 2. [logging] fixtures/breaks/logging_calls.py:14 in layer (fixtures)" in message
    assert message.count("fix: ") == 2


def test_package_filters_and_keyword_arguments_reach_fn():
    def layer(x, *, scale):
        return subprocess_call.layer(x) * scale

    with pytest.raises(AssertionError, match=r"\[subprocess\] fixtures/breaks/subprocess_call.py:10"):
        assert_no_graph_breaks(layer, torch.ones(8), scale=2.0)
    findings = assert_no_graph_breaks(layer, torch.ones(8), scale=2.0, ignore_packages=["fixtures"])
    assert [b.category for b in findings.breaks] == ["subprocess"]


def test_fullgraph_names_the_hard_failure_then_every_break():
    with pytest.raises(AssertionError) as info:
        assert_fullgraph(subprocess_call.layer, torch.ones(8))
    message = str(info.value)
    first, *rest = message.splitlines()
    assert first == ("torch.compile(layer, fullgraph=True) fails (device cpu): "
                     "Attempted to call function marked as skipped")
    assert "[subprocess] fixtures/breaks/subprocess_call.py:10 in probe_version (fixtures)" in rest[0]
    assert "all graph breaks (explain mode, 1 distinct):" in message
    assert "fix: Move `subprocess.check_output` out of probe_version" in message


def test_a_crash_under_dynamo_is_not_reported_as_a_break():
    with pytest.raises(AssertionError, match=r"crashed while tracing layer \(this is not a graph break\): "
                                             r"TorchRuntimeError"):
        assert_fullgraph(wrong_fake.layer, torch.ones(4, 8), torch.ones(4, 3))
    # The same function runs eagerly: the crash is Dynamo's (a wrong fake), not the code's.
    assert wrong_fake.layer(torch.ones(4, 8), torch.ones(4, 3)).shape == (4, 3)


def test_a_function_with_its_own_mode_and_device_keywords():
    import torch

    from graphbreak_doctor.testing import assert_fullgraph, assert_no_graph_breaks

    def scale(x, mode="double", device=None):
        return x * (2 if mode == "double" else 3)

    findings = assert_no_graph_breaks(scale, torch.ones(4), mode="triple")
    assert findings.breaks == []
    assert assert_fullgraph(scale, torch.ones(4), mode="triple").fullgraph.ok is True
