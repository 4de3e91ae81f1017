"""The compile map: which ``torch.compile`` regions a target's own code
registers and enters, each traced with the options its code gave it.

``torch.compile`` is recorded from before the target is built (its framework
imported), the target runs each of its phases (``Target.discover``: a
server's prefill and decode forwards), and every region a phase entered is
traced the way its code asked for: ``fullgraph=True`` gives the first hard
failure, ``fullgraph=False`` every break and the graphs it splits into,
``dynamic=True`` is traced dynamic. The call traced is the first one the
phase made, with its own arguments (fake tensors on an emulated device),
inside the context the phase ran it in.
Regions no phase entered are listed as registered only.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import sys
import traceback
from typing import Any, Callable

import torch

from graphbreak_doctor.analysis.assemble import mapped, region_breaks, stopped
from graphbreak_doctor.capture import trace as capture
from graphbreak_doctor.capture.regions import CompileRecorder, Site
from graphbreak_doctor.capture.unknown_values import unknown_read
from graphbreak_doctor.diagnose import Build, environment, inside_device
from graphbreak_doctor.model import (DEFAULT_DEVICE, REGION_BREAKS, REGION_CRASHED, REGION_FAILS, REGION_OK, Findings,
                                     Region, TargetInfo)
from graphbreak_doctor.frames import make_frame, raised_at
from graphbreak_doctor.patching import UndoLog
from graphbreak_doctor.targets import PhaseNotRun, Target, TargetError
from graphbreak_doctor.text import one_line

def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    name = getattr(value, "__qualname__", None)
    if callable(value) and name:  # a backend function: where it is defined, not its address
        return f"{getattr(value, '__module__', '') or ''}.{name}".lstrip(".")
    if callable(value):  # a backend object (a framework's backend class): its class, not its address
        return f"{type(value).__module__}.{type(value).__qualname__}"
    return repr(value)


def _own_backend(site: Site) -> bool:
    """The code gave torch.compile a backend function of its own (a framework's
    piecewise backend), not one of torch's backends by name."""
    backend = site.options.get("backend")
    module = getattr(backend, "__module__", "") or ""
    return callable(backend) and module.split(".", 1)[0] != "torch"


def trace_region(site: Site, progress: Callable[[str], None] = lambda _m: None,
                 split_ops: tuple[str, ...] = (),
                 splitter: Callable[[Any], tuple[int, list[str]]] | None = None) -> Region:
    """The region of one torch.compile call; traced when a phase entered it.
    ``split_ops``: the ops the target's framework cuts a compiled graph at; a
    fullgraph region compiled with a backend of the code's own (the framework's
    piecewise backend) is traced as that backend sees it, and its pieces counted:
    by ``splitter``, the framework's own split, where it has one (the ops each
    splitting piece was cut at are then the region's ``split_ops``)."""
    region = Region(function=site.name, site=make_frame(site.file, site.line, site.name.rsplit(".", 1)[-1]),
                    options={k: _plain(v) for k, v in site.options.items()},
                    calls=dict(site.calls), shapes={k: list(v) for k, v in site.shapes.items()},
                    recompiles=[dict(r) for r in site.recompiles])
    if not site.entered or site.options.get("disable"):
        return region
    phase = next(iter(site.calls))
    args, kwargs = site.first[phase]
    fullgraph = bool(site.options.get("fullgraph"))
    mode = "fullgraph" if fullgraph else "explain"
    progress(f"tracing region {site.name} ({mode})")
    info = TargetInfo(spec=site.name, function=site.name)
    pieces = fullgraph and bool(split_ops) and _own_backend(site)
    if pieces:
        info.split_ops = list(split_ops)
    target = Target(fn=site.fn, args=args, kwargs=kwargs, info=info, splitter=splitter)
    marked = marked_dynamic(site.fn, args, kwargs)
    if marked:
        region.options["marked_dynamic"] = marked
    region.traced, region.traced_phase = mode, phase
    try:
        with site.context.get(phase, contextlib.nullcontext)():
            # "piecewise": fullgraph, the graph's pieces counted at the split ops.
            result = capture.trace(target, "piecewise" if pieces else mode, decompile=False,
                                 dynamic=site.options.get("dynamic"))
    except TargetError as e:
        # The region's own code raises as its phase ran it, compiled or not:
        # the server fails here too. A verdict of the region, not bad input.
        cause = e.__cause__
        why = f"{type(cause).__name__}: {one_line(str(cause), 200)}" if cause is not None else str(e)
        region.verdict, region.error = REGION_CRASHED, f"raises as its phase ran it, compiled or not: {why}"
        return region
    region.graphs, region.breaks = len(result.graphs), region_breaks(result)
    if pieces:
        region.split_ops = list(split_ops)
        region.pieces = sum(g.pieces for g in result.graphs)
        if result.cut_at:  # the framework's own split: the ops it did cut at
            region.split_ops = list(dict.fromkeys(result.cut_at))
    counts = collections.Counter(op for g in result.graphs for op in g.collectives)
    # A split op names one op, or the ops of one cut ("a + b").
    cut_at = {name.strip() for names in region.split_ops for name in names.split(" + ")}
    region.collectives = [{"op": op, "count": n, "as": "split point" if op in cut_at else "graph op"}
                          for op, n in counts.items()]
    if result.crashed:
        region.verdict, region.error = REGION_CRASHED, result.error
    elif fullgraph:
        region.verdict = REGION_OK if result.ok else REGION_FAILS
        region.error = result.error
    else:
        region.verdict = REGION_BREAKS if region.breaks or len(result.graphs) > 1 else REGION_OK
    return region


def marked_dynamic(fn: Any, args: tuple, kwargs: dict) -> str:
    """The dims the caller marked dynamic (``torch._dynamo.mark_dynamic``,
    ``mark_unbacked``) on the region's arguments, by the names ``fn`` gives
    them: 'input_ids[0], positions[0]'."""
    try:
        named = list(inspect.signature(fn).bind(*args, **kwargs).arguments.items())
    except (TypeError, ValueError):  # no signature to bind: by position
        named = [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    out = []
    for name, value in named:
        if not isinstance(value, torch.Tensor):
            continue
        for attribute, kind in (("_dynamo_dynamic_indices", ""), ("_dynamo_unbacked_indices", " unbacked")):
            for dim in sorted(getattr(value, attribute, ()) or ()):
                out.append(f"{name}[{dim}]{kind}")
    return ", ".join(out)


class PhasesStopped(Exception):
    """The target's phases raised an error that is neither bad input nor a
    region's: a phase that cannot run here (PhaseNotRun), or its framework
    failed to build. ``findings`` is the map as far as it got: the target
    with what it recorded before it stopped (a server's resolved launch), no
    regions, crashed with the error."""

    def __init__(self, findings: Findings) -> None:
        super().__init__(findings.fullgraph.error)
        self.findings = findings


def record_phases(build: Build, log: UndoLog,
                  progress: Callable[[str], None] = lambda _msg: None) -> tuple[Target, CompileRecorder]:
    """Build the target with torch.compile recorded (call inside the device;
    changes the build needs go through ``log``) and run its phases.
    PhasesStopped when a phase raises anything but a TargetError."""
    recorder = CompileRecorder()
    with UndoLog() as recording:
        recorder.install(recording)
        progress("building the target (torch.compile recorded)")
        target = build(log)
        if target.discover is None:
            raise TargetError(f"{target.info.display()} has no phases to run: it has no compile map")
        recorder.eager = target.eager_phases
        progress("running each phase")
        try:
            target.discover(log, recorder.phase)
        except TargetError:
            raise
        except Exception as e:
            said = (one_line(str(e)) if isinstance(e, PhaseNotRun)
                    else f"{type(e).__name__}: {one_line(str(e))}{raised_at(e)}")
            unknown = unknown_read(e)
            if unknown:  # where the emulated GPU's knowledge ends, not the target's error: say which read
                said += (f"; that is a read of a device value the emulated GPU does not know ({unknown}), which "
                         "a GPU reads and goes on")
            error = f"the phases stopped: {said}"
            # The whole stack goes to the job's log (stderr), for whoever
            # needs to know which call of the target's code stopped.
            print(f"graphbreak-doctor: {error}", file=sys.stderr)
            traceback.print_exception(e, file=sys.stderr)
            raise PhasesStopped(stopped(target.info, environment(), {}, error)) from e
    return target, recorder


def map_regions(build: Build, *, device: str = DEFAULT_DEVICE,
                progress: Callable[[str], None] = lambda _msg: None) -> Findings:
    """Build the target with torch.compile recorded, run its phases, and trace
    each region they entered; findings with the target and its ``regions``."""
    with inside_device(device) as (dev, log):
        try:
            target, recorder = record_phases(build, log, progress)
        except PhasesStopped as stopped:
            stopped.findings.device = dev.describe()
            raise
        regions = [trace_region(site, progress, target.split_ops, target.splitter) for site in recorder.sites]
        found = mapped(target.info, environment(), dev.describe(), regions)
        if target.cudagraphs is not None:  # the framework's own CUDA-graph capture, of the model its phases built
            from graphbreak_doctor.cudagraph.capture import cudagraph_map

            progress("capturing the phases into CUDA graphs")
            found.cudagraphs = cudagraph_map(target, log)
        return found


__all__ = ["PhasesStopped", "map_regions", "record_phases", "trace_region"]
