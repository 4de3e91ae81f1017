"""One diagnosis: select the device, build the target inside it, trace each
mode, and turn what Dynamo reported into findings.

Each mode starts from a fresh build of the target in a fresh device context,
and torch's global settings are put back after it (a target that changes the
default dtype does not change the next mode). ``trace_mode`` is what a worker
process runs (graphbreak_doctor.jobs); ``diagnose`` runs every mode in this
process and joins them the same way the workers' findings are joined.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform
import sys
from typing import Any, Callable

from graphbreak_doctor.analysis.assemble import assemble, captured, join, sized
from graphbreak_doctor.analysis.warm_state import compare
from graphbreak_doctor.capture import trace as capture
from graphbreak_doctor.capture.unknown_values import unknown_read
from graphbreak_doctor.model import DEFAULT_DEVICE, FULLGRAPH_MODES, Findings, JitRequest, modes_for
from graphbreak_doctor.model.warm_up import WarmUp
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import Target, TargetError
from graphbreak_doctor.targets.provider import Selection
from graphbreak_doctor.text import one_line

# Builds the target inside the device; process-global changes it needs for the
# whole diagnosis go through the log.
Build = Callable[[UndoLog], Target]


def environment() -> dict[str, str]:
    import torch

    from graphbreak_doctor.targets.frameworks import registry

    env = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        env["flashinfer"] = importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        env["flashinfer"] = ""
    env.update(registry.releases())
    # A patch written by ``fix --write-patch``, loaded in this process
    # (PYTHONPATH=DIR): what it changed is part of what was traced.
    written = getattr(sys.modules.get("graphbreak_doctor_patch"), "STATE", None)
    if isinstance(written, dict):
        env["patch"] = (f"refused: {written.get('refused')}" if written.get("refused")
                        else "patched " + (", ".join(written.get("applied") or ()) or "nothing yet"))
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


def target_builder(spec: str) -> Build:
    """How to build ``--target pkg.module:factory`` (the factory provider's build)."""
    from graphbreak_doctor.targets.factory import PROVIDER

    selection = Selection(PROVIDER.name, spec, {"spec": spec}, spec=spec)
    return lambda log: PROVIDER.build(selection, "", log)


@contextlib.contextmanager
def inside_device(device: str):
    """The set-up every diagnosis shares: torch's global settings and the
    environment saved before the device changes anything, the device entered,
    and an undo log for what the build changes; yields (device, log) and puts
    everything back afterwards, however the block ends."""
    with UndoLog() as state:
        state.keep_torch_state()
        state.keep_environment()
        with device_context(device) as dev, UndoLog() as log:
            yield dev, log


def build_target(build: Build, log: UndoLog, mode: str, progress: Callable[[str], None]) -> Target:
    """Build the target (inside the device) and put it in the state its code
    is compiled in for ``mode`` (Target.prepare)."""
    progress("building the target")
    target = build(log)
    if target.prepare is not None:
        progress(f"preparing the target ({mode})")
        target.prepare(mode, log)
    return target


def warm_up(target: Target, dev: Any, *, cold: bool, progress: Callable[[str], None],
            fatal: Callable[[Exception], bool] = lambda _e: False) -> WarmUp:
    """Put the target in the state a server compiles it in: one eager call
    at the traced size (servers run their forward before they capture it),
    unless ``cold`` or the target's framework warms it up itself. An eager
    call that raises is no verdict: the target is traced cold, and says so --
    unless ``fatal`` says the failure ends the run (the worker's memory limit
    caused it: jobs/local.py), which is raised."""
    if target.own_warm_up:
        return WarmUp(ran=not cold, how="skipped (--cold)" if cold else
                      "the framework's own warm-up, where the framework runs it")
    if cold:
        return WarmUp(how="skipped (--cold)")
    progress("warming up: one eager call")
    jit_before, modules_before = len(dev.jit_requests), set(sys.modules)
    warm = WarmUp(ran=True, how="one eager call at the traced size")
    try:
        with contextlib.redirect_stdout(sys.stderr):
            target.fn(*target.args, **target.kwargs)
    except Exception as e:
        if fatal(e):
            raise
        unknown = unknown_read(e)  # where the emulated GPU's knowledge ends: no error of the target's
        warm.ran, warm.error = False, (f"{type(e).__name__}: {unknown} (a device value the emulated GPU does not "
                                       "know)" if unknown else one_line(f"{type(e).__name__}: {e}", 200))
    warm.loaded = [f"{r.name} ({r.action})" for r in dev.jit_requests[jit_before:]]
    warm.imported = _packages(set(sys.modules) - modules_before)
    return warm


def _packages(modules: set[str], most: int = 20) -> list[str]:
    """The packages of newly imported modules, two name parts deep
    ("flashinfer.jit"), sorted; at most ``most``, then how many more."""
    names = sorted({".".join(m.split(".")[:2]) for m in modules})
    return names[:most] + ([f"and {len(names) - most} more"] if len(names) > most else [])


def trace_mode(
    build: Build,
    mode: str,
    *,
    device: str = DEFAULT_DEVICE,
    progress: Callable[[str], None] = lambda _msg: None,
    cold: bool = False,
    fatal: Callable[[Exception], bool] = lambda _e: False,
) -> Findings:
    """Build the target inside the device, warm it up (``warm_up``; not when
    ``cold``; ``fatal``: which of its failures end the run) and trace it in
    one mode. A fullgraph mode of a target the doctor warms up is traced cold
    first, too: when the two stop at different first failures, the findings
    say so (analysis/warm_state.py)."""
    with inside_device(device) as (dev, log):
        target = build_target(build, log, mode, progress)
        before = None
        if mode in FULLGRAPH_MODES and not cold and not target.own_warm_up:
            with contextlib.redirect_stdout(sys.stderr):
                progress(f"tracing cold ({mode}), before the warm-up")
                before = capture.trace(target, mode, decompile=False)
        warm = warm_up(target, dev, cold=cold, progress=progress, fatal=fatal)
        # What the build and its warm-up asked for is not a trace-time request.
        already = len(dev.jit_requests)
        current: list[capture.BreakEvent] = []
        dev.on_jit = _jit_hook(current)
        try:
            # The target's own prints go to stderr: stdout carries the summary.
            with contextlib.redirect_stdout(sys.stderr):
                progress(f"tracing ({mode})")
                result = capture.trace(target, mode, on_event=current.append)
        finally:
            dev.on_jit = None
        jit = [JitRequest(name=r.name, action=r.action) for r in dev.jit_requests[already:]]
        progress("analysing")
        findings = assemble([result], target=target.info, environment=environment(), device=dev.describe(),
                            jit=jit, excerpts=True)
        if before is not None and warm.ran:
            compare(warm, assemble([before], target=target.info, environment={}, device={}), findings)
        findings.warm_up = warm
        return findings


def trace_sizes(
    builds: list[tuple[str, Build]],
    *,
    device: str = DEFAULT_DEVICE,
    progress: Callable[[str], None] = lambda _msg: None,
) -> Findings:
    """Build the target at each size (``builds``: (the size as given, its
    build)) inside one device, and call it compiled once at each, in order,
    as a server does (graphbreak_doctor.capture.sizes)."""
    from graphbreak_doctor.analysis.recompiles import judge
    from graphbreak_doctor.capture import sizes

    with inside_device(device) as (dev, log):
        built = []
        for label, build in builds:
            progress(f"building the target at size {label}")
            built.append((label, build_target(build, log, "explain", lambda _m: None)))
        progress(f"calling it compiled at {len(built)} sizes")
        with contextlib.redirect_stdout(sys.stderr):
            run = judge(sizes.run(built))
        first = built[0][1]
        return sized(first.info, environment(), dev.describe(), run)


def trace_cudagraphs(
    build: Build,
    *,
    device: str = DEFAULT_DEVICE,
    progress: Callable[[str], None] = lambda _msg: None,
) -> Findings:
    """The target captured into CUDA graphs on the emulated GPU as a server
    captures it (graphbreak_doctor.cudagraph): its CUDA-graph map."""
    from graphbreak_doctor.cudagraph.capture import cudagraph_map
    from graphbreak_doctor.model import CUDAGRAPH_MODE

    with inside_device(device) as (dev, log):
        target = build_target(build, log, CUDAGRAPH_MODE, progress)
        progress("capturing it into CUDA graphs")
        found = cudagraph_map(target, log)
        return captured(target.info, environment(), dev.describe(), found)


def diagnose(
    build: Build,
    *,
    mode: str = "both",
    device: str = DEFAULT_DEVICE,
    progress: Callable[[str], None] = lambda _msg: None,
) -> Findings:
    """Trace the target ``build()`` returns (called inside the device) in each
    mode, in this process."""
    return join([trace_mode(build, m, device=device, progress=progress) for m in modes_for(mode)])


def _jit_hook(current: list) -> Callable[[Any], None]:
    """JIT requests happen while the eager fallback after a break runs: file
    each one under the break Dynamo handled last."""
    def on_jit(record: Any) -> None:
        if current:
            entry = (record.name, record.action)
            if entry not in current[-1].jit:
                current[-1].jit.append(entry)
    return on_jit

