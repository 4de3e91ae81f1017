"""Assertions for test suites: fail a unit test when torch.compile cannot
capture a function, with the doctor's explanation as the message.

    from graphbreak_doctor.testing import assert_fullgraph, assert_no_graph_breaks

    def test_layer_compiles():
        assert_fullgraph(layer, x, w)             # as torch.compile(fullgraph=True) sees it
        assert_no_graph_breaks(layer, x, w)       # every break, listed with its fix

The arguments are used as given (``device="cpu"`` by default: real tensors).
``device``, ``only_packages`` and ``ignore_packages`` are this module's
keywords; every other keyword argument goes to ``fn``. Each call resets
Dynamo's caches, like one ``graphbreak-doctor trace`` run.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from graphbreak_doctor.diagnose import diagnose
from graphbreak_doctor.model import Findings, TargetInfo
from graphbreak_doctor.gate.policy import Policy
from graphbreak_doctor.render.gate_text import describe_break
from graphbreak_doctor.targets import Target
from graphbreak_doctor.targets.factory import callable_name

__all__ = ["assert_fullgraph", "assert_no_graph_breaks", "diagnose_call"]


def diagnose_call(fn: Callable[..., Any], *args: Any, device: str = "cpu", mode: str = "both", **kwargs: Any) -> Findings:
    """The doctor's findings for ``fn(*args, **kwargs)`` (see graphbreak_doctor.diagnose)."""
    return _diagnose(fn, args, kwargs, device, mode)


def _diagnose(fn: Callable[..., Any], args: tuple, kwargs: dict, device: str, mode: str) -> Findings:
    # Arguments of fn travel as a tuple and a dict, so an fn with its own
    # `mode` or `device` keyword works with the assert_* helpers.
    module = getattr(fn, "__module__", None) or "?"
    info = TargetInfo(spec=f"{module}:{callable_name(fn)}", provider="call", function=callable_name(fn))
    target = Target(fn=fn, args=args, kwargs=kwargs, info=info)
    return diagnose(lambda _log: target, mode=mode, device=device)


def _crash_message(fn: Callable[..., Any], findings: Findings) -> str:
    return (f"torch.compile crashed while tracing {callable_name(fn)} (this is not a graph break): "
            f"{findings.fullgraph.error}")


def _breaks_message(findings: Findings, breaks: list) -> list[str]:
    lines = []
    for i, b in enumerate(breaks, 1):
        body = describe_break(b, "    ")
        lines.append(f"{i:>2}. " + body[0][4:])
        lines.extend(body[1:])
    return lines


def assert_no_graph_breaks(
    fn: Callable[..., Any],
    *args: Any,
    device: str = "cpu",
    only_packages: Iterable[str] = (),
    ignore_packages: Iterable[str] = (),
    **kwargs: Any,
) -> Findings:
    """Fail unless Dynamo traces ``fn(*args, **kwargs)`` without a graph break.

    Every break is found (explain mode, including breaks in frames that produce
    no graph); the message lists each with its category, where it happens and
    the suggested fix. Package filters count only breaks whose actionable
    frame is in (or not in) those packages. Returns the findings."""
    policy = Policy(only_packages=tuple(only_packages), ignore_packages=tuple(ignore_packages))
    findings = _diagnose(fn, args, kwargs, device, "explain")
    if findings.fullgraph.crashed:
        raise AssertionError(_crash_message(fn, findings))
    counted = [b for b in findings.breaks if policy.counts(b)]
    if counted:
        hits = sum(b.count for b in counted)
        head = (f"torch.compile breaks the graph of {callable_name(fn)} (device {device}): "
                f"{len(counted)} distinct break{'s' if len(counted) != 1 else ''}, {hits} hit{'s' if hits != 1 else ''}")
        raise AssertionError("\n".join([head, *_breaks_message(findings, counted)]))
    return findings


def assert_fullgraph(fn: Callable[..., Any], *args: Any, device: str = "cpu", **kwargs: Any) -> Findings:
    """Fail unless ``torch.compile(fn, fullgraph=True)`` captures ``fn(*args, **kwargs)``
    as one graph (what SGLang's piecewise CUDA graph runner needs).

    On failure the message names the hard failure and then every break an
    explain run finds, so one test run shows all there is to fix."""
    # One run of both modes: the fullgraph verdict and every break explain finds.
    findings = _diagnose(fn, args, kwargs, device, "both")
    if findings.fullgraph.crashed:
        raise AssertionError(_crash_message(fn, findings))
    if findings.fullgraph.ok:
        return findings
    lines = [f"torch.compile({callable_name(fn)}, fullgraph=True) fails (device {device}): {findings.fullgraph.error}"]
    first = findings.break_by_id(findings.fullgraph.break_id)
    if first is not None:
        lines.extend(describe_break(first, "    "))
    if findings.breaks:
        lines.append(f"all graph breaks (explain mode, {len(findings.breaks)} distinct):")
        lines.extend(_breaks_message(findings, findings.breaks))
    raise AssertionError("\n".join(lines))
