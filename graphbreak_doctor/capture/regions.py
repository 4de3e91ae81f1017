"""Every ``torch.compile`` call a target's code makes, found while it runs.

A serving framework decides for itself what it compiles: decorators on
helpers (``@torch.compile(dynamic=True)``), a graph runner that wraps the
model's forward when its launch arguments say so. The doctor never lists
those by hand. :class:`CompileRecorder` replaces ``torch.compile`` (through
an undo log) before the framework is imported; each call registers a
*site* (the compiled function, where it is defined, the options it asked
for) and hands back a plain function that calls what the real
``torch.compile`` returned. While a phase is marked (:meth:`phase`), calls
through it are counted per phase with the shapes of their tensor arguments,
and the first call's arguments are kept so the region can be traced later
with the options the framework gave it.

A site whose function never runs in any marked phase is only *registered*
(importing a framework registers the sites of every model it ships). A call
made while Dynamo traces another region is part of that region's graph, not
a call of the phase's own, and is not counted.

The same function compiled again with the same options (a graph runner
compiles its forward once per batch size) is one site. A call that made
Dynamo compile again is kept with Dynamo's own guard-failure reasons (its
``guard_failures`` record, filled on every recompile): what the server pays
when it calls the region at another size.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from graphbreak_doctor.patching import UndoLog

# torch.compile's keyword options that say how a region is compiled.
OPTION_NAMES = ("fullgraph", "dynamic", "backend", "mode", "disable")


def describe_args(args: tuple, kwargs: dict) -> str:
    """The shapes of the tensor arguments, as '[16, 6144], [16, 32, 1]'."""
    shapes = [list(a.shape) for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    return ", ".join("[" + ", ".join(str(d) for d in shape) + "]" for shape in shapes) or "(no tensors)"


@dataclass
class Site:
    """One torch.compile call: what it compiles and how, and where it ran."""

    fn: Callable[..., Any]
    options: dict[str, Any]
    name: str
    file: str
    line: int
    # Per phase: calls, distinct argument shapes, and the first call's arguments.
    calls: dict[str, int] = field(default_factory=dict)
    shapes: dict[str, list[str]] = field(default_factory=dict)
    first: dict[str, tuple[tuple, dict]] = field(default_factory=dict)
    # Per phase: what the first call ran inside (the phase's context, e.g. a
    # framework's forward context), to enter again when the region is traced.
    context: dict[str, Callable[[], Any]] = field(default_factory=dict)
    # Calls that made Dynamo compile again: phase, shapes, its guard-failure reasons.
    recompiles: list[dict[str, Any]] = field(default_factory=list)

    def enter(self, phase: str, args: tuple, kwargs: dict, context: Callable[[], Any] | None = None) -> None:
        if phase not in self.first and context is not None:
            self.context[phase] = context
        self.calls[phase] = self.calls.get(phase, 0) + 1
        shapes = self.shapes.setdefault(phase, [])
        text = describe_args(args, kwargs)
        if text not in shapes:
            shapes.append(text)
        self.first.setdefault(phase, (args, kwargs))

    @property
    def entered(self) -> bool:
        return bool(self.calls)

    def same_region(self, name: str, file: str, line: int, options: dict[str, Any]) -> bool:
        """The same function compiled again with the same options (a graph
        runner compiles the forward once per batch size)."""
        return (self.name, self.file, self.line, self.options) == (name, file, line, options)


def _where(fn: Any) -> tuple[str, str, int]:
    """(qualified name, file, first line) of a compiled callable."""
    if getattr(fn, "__func__", None) is torch.nn.Module._call_impl:  # nn.Module.compile(): the module's forward
        fn = fn.__self__
    target = getattr(fn, "forward", fn) if isinstance(fn, torch.nn.Module) else fn
    target = inspect.unwrap(getattr(target, "__func__", target))
    name = getattr(target, "__qualname__", None) or type(target).__name__
    module = getattr(target, "__module__", "") or ""
    code = getattr(target, "__code__", None)
    file, line = (code.co_filename, code.co_firstlineno) if code is not None else ("", 0)
    return (f"{module}.{name}" if module else name), file, line


def _guard_failures() -> dict[Any, int]:
    """How many guard failures Dynamo has recorded so far, per code object."""
    from torch._dynamo.utils import guard_failures

    return {code: len(reasons) for code, reasons in guard_failures.items()}


def _new_guard_failures(before: dict[Any, int]) -> list[str]:
    """The guard-failure reasons Dynamo recorded since ``before``: each
    recompile of a frame says which guard failed ("size mismatch at index
    0 ..."), prefixed with the frame's function."""
    from torch._dynamo.utils import guard_failures

    out = []
    for code, reasons in list(guard_failures.items()):
        if code.co_name.startswith("torch_dynamo_resume_in"):
            continue  # the frame after a break recompiles for the same reason as its region
        for reason in reasons[before.get(code, 0):]:
            out.append(f"{code.co_name}: {' '.join(str(reason).split())}")
    return out


class CompileRecorder:
    """Records the torch.compile calls made while it is installed."""

    def __init__(self) -> None:
        self.sites: list[Site] = []
        self._phase = ""
        self._context: Callable[[], Any] | None = None
        self._real: Callable[..., Any] | None = None
        # Calls through a compiled function run the function itself (eagerly):
        # a framework whose backend cannot run here (Target.eager_phases).
        self.eager = False
        self._inside = False  # an eager call of a region is running

    def install(self, log: UndoLog) -> None:
        """Replace ``torch.compile`` until ``log`` is undone. Functions compiled
        meanwhile keep their wrapper afterwards; it then only calls through."""
        self._real = torch.compile
        log.setattr(torch, "compile", self._compile)

    @contextlib.contextmanager
    def phase(self, name: str, context: Callable[[], Any] | None = None) -> Iterator[None]:
        """Count the calls made inside as calls of phase ``name``. ``context``:
        a context-manager factory for what the calls run inside (the phase's
        state), entered again when a region first called here is traced."""
        before = self._phase, self._context
        self._phase, self._context = name, context
        try:
            yield
        finally:
            self._phase, self._context = before

    def entered(self) -> list[Site]:
        return [s for s in self.sites if s.entered]

    def _compile(self, model: Any = None, **options: Any) -> Any:
        if model is None:  # the decorator form: @torch.compile(dynamic=True)
            return lambda fn: self._compile(fn, **options)
        compiled = self._real(model, **options)
        name, file, line = _where(model)
        chosen = {k: options[k] for k in OPTION_NAMES if k in options}
        site = next((s for s in self.sites if s.same_region(name, file, line, chosen)), None)
        if site is None:
            site = Site(fn=model, options=chosen, name=name, file=file, line=line)
            self.sites.append(site)
        if isinstance(compiled, torch.nn.Module):
            def hook(_module: Any, args: tuple, kwargs: dict) -> None:
                if self._phase:
                    site.enter(self._phase, args, kwargs, self._context)

            compiled.register_forward_pre_hook(hook, with_kwargs=True)
            return compiled
        recorder = self

        @functools.wraps(model)
        def entered(*args: Any, **kwargs: Any) -> Any:
            # Inside another region Dynamo is tracing, the call is that
            # region's; only a call the phase itself makes is counted.
            if recorder.eager and not torch.compiler.is_compiling():
                # The framework's backend cannot run here: the function runs
                # itself, in a phase or not (its model's build calls some). A
                # call inside another region's eager call would be part of
                # that region's graph when compiled: not counted.
                if recorder._phase and not recorder._inside:
                    site.enter(recorder._phase, args, kwargs, recorder._context)
                outer, recorder._inside = recorder._inside, True
                try:
                    return model(*args, **kwargs)
                finally:
                    recorder._inside = outer
            if not recorder._phase or torch.compiler.is_compiling():
                return compiled(*args, **kwargs)
            phase = recorder._phase
            site.enter(phase, args, kwargs, recorder._context)
            before = _guard_failures()
            out = compiled(*args, **kwargs)
            reasons = _new_guard_failures(before)
            if reasons:
                site.recompiles.append({"phase": phase, "shapes": describe_args(args, kwargs), "reasons": reasons})
            return out

        return entered


__all__ = ["CompileRecorder", "OPTION_NAMES", "Site", "describe_args"]
