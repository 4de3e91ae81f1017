"""One diagnosis: select the device, build the target inside it, trace each
mode, and turn what Dynamo reported into findings."""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform
import sys
from typing import Any, Callable

from graphbreak_doctor.analysis.build import build_findings
from graphbreak_doctor.capture import run as capture
from graphbreak_doctor.findings import Findings, JitRequest
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target, TargetError
from graphbreak_doctor.targets.provider import Selection

# What --mode accepts; "both" is explain + fullgraph.
MODE_CHOICES = ("explain", "fullgraph", "both", "piecewise")

# Builds the target inside the device; process-global changes it needs for the
# whole diagnosis go through the log.
Build = Callable[[UndoLog], Target]


def modes_for(mode: str) -> list[str]:
    return ["explain", "fullgraph"] if mode == "both" else [mode]


def environment() -> dict[str, str]:
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__}
    for dist in ("flashinfer-python", "sglang"):
        try:
            env[dist.split("-")[0]] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            env[dist.split("-")[0]] = ""
    return env


@contextlib.contextmanager
def device_context(name: str):
    """The selected device: an emulated GPU preset (torch and FlashInfer
    patched, fake CUDA tensors), ``cuda`` for a real GPU or ``cpu``."""
    from graphbreak_doctor.emulation import EmulatedDevice

    try:
        device = EmulatedDevice(name)
        stack = contextlib.ExitStack()
        stack.enter_context(device)
    except (ValueError, RuntimeError) as e:
        raise TargetError(str(e)) from e
    with stack:
        yield device


def selection_builder(selection: Selection, device: str) -> Build:
    """How to build a provider's selected target (looked up by name)."""
    from graphbreak_doctor.targets.registry import provider

    chosen = provider(selection.provider)
    return lambda log: chosen.build(selection, device, log)


def diagnose(
    build: Build,
    *,
    mode: str = "both",
    device: str = "sm120",
    progress: Callable[[str], None] = lambda _msg: None,
) -> Findings:
    """Trace the target ``build()`` returns (called inside the device) in each mode."""
    with device_context(device) as dev, UndoLog() as log:
        progress("building the target")
        target = build(log)
        results = []
        current: list[capture.BreakEvent] = []
        dev.on_jit = _jit_hook(current)
        try:
            # The target's own prints go to stderr: stdout carries the summary.
            with contextlib.redirect_stdout(sys.stderr):
                for m in modes_for(mode):
                    progress(f"tracing ({m})")
                    current.clear()
                    results.append(capture.run(target, m, on_event=current.append))
        finally:
            dev.on_jit = None
        jit = [JitRequest(name=r.name, action=r.action) for r in dev.jit_requests]
        progress("analysing")
        return build_findings(
            results,
            target=target.info,
            environment=environment(),
            device=dev.describe(),
            jit_requests=_dedupe(jit),
        )


def _jit_hook(current: list) -> Callable[[Any], None]:
    """JIT requests happen while the eager fallback after a break runs: file
    each one under the break Dynamo handled last."""
    def on_jit(record: Any) -> None:
        if current:
            entry = (record.name, record.action)
            if entry not in current[-1].jit:
                current[-1].jit.append(entry)
    return on_jit


def _dedupe(requests: list[JitRequest]) -> list[JitRequest]:
    seen, out = set(), []
    for r in requests:
        if (r.name, r.action) not in seen:
            seen.add((r.name, r.action))
            out.append(r)
    return out


def target_builder(spec: str) -> Build:
    """How to build ``--target pkg.module:factory`` (the factory provider's build)."""
    from graphbreak_doctor.targets.factory import PROVIDER

    selection = Selection(PROVIDER.name, spec, {"spec": spec})
    return lambda log: PROVIDER.build(selection, "", log)
