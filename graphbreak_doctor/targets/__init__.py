"""What to trace: a callable with its arguments, plus a description of it.

Targets come from target providers (provider.py; registered in registry.py):
``--target pkg.module:factory`` (factory.py), the GLM-5 decoder layers
(glm5/: the project's re-creation, or SGLang's own modules), a function
handed to graphbreak_doctor.testing. A provider turns
its command-line options into :class:`Selection` records (plain data, so a
worker process can rebuild the target) and builds each into a
:class:`Target` inside the selected device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from graphbreak_doctor.model import TargetInfo


@dataclass
class Target:
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    # What was traced, as the findings record it.
    info: TargetInfo = field(default_factory=TargetInfo)
    # Called with the mode and the build's undo log after the build, before
    # the trace: puts the target's code in the state it is compiled in for
    # that mode (a serving framework's capture state, its eager warm-up).
    prepare: Callable[[str, Any], None] | None = None
    # Called with the build's undo log and a phase marker (a context manager
    # factory, ``phase(name)``): runs each phase the target's framework runs
    # (a server's prefill and decode forwards), each inside its marker, so
    # the torch.compile regions each phase enters are found
    # (graphbreak_doctor.capture.regions). None: the target has no phases.
    discover: Callable[[Any, Callable[[str], Any]], None] | None = None
    # The target's ``prepare`` runs its framework's own warm-up where the
    # framework runs it (or leaves it out under --cold): the doctor adds none.
    own_warm_up: bool = False
    # The target's framework captures it into CUDA graphs itself: called with
    # the build's undo log and the CUDA-graph recorder's session, it runs the
    # framework's own capture path per phase (graphbreak_doctor.cudagraph).
    # None: the target is captured as one call (cudagraph/capture.py).
    cudagraphs: Callable[[Any, Any], list] | None = None
    # The target's framework compiles with a backend that cannot run here
    # (Inductor for the device): while its phases run, the regions they enter
    # run eagerly, and each is traced afterwards as compiled (compile_map.py).
    eager_phases: bool = False
    # The framework's own split of a captured graph at its split ops
    # (``info.split_ops``): (pieces, the op each splitting piece is cut at).
    # None: the doctor counts the pieces itself (capture/trace.py).
    splitter: Callable[[Any], tuple[int, list[str]]] | None = None

    @property
    def spec(self) -> str:
        return self.info.spec

    @property
    def split_ops(self) -> tuple[str, ...]:
        """Registered ops piecewise mode splits the graph at."""
        return tuple(self.info.split_ops)


class TargetError(Exception):
    """A target that cannot be loaded or called: bad input, reported in one line."""


class LaunchRefused(TargetError):
    """A serving framework refuses the launch arguments: one line for the
    user, and ``said``, the framework's own message (what a matrix cell
    shows), carried as it is rather than read back from the line."""

    def __init__(self, message: str, said: str) -> None:
        super().__init__(message)
        self.said = said


def refused_by_check(error: BaseException, package: str, who: str) -> LaunchRefused | None:
    """A serving framework's refusal of the launch on the emulated device,
    where one of its own checks raised ``error`` (frames.own_check: the
    statement that raised, never the exception's type alone): its message
    and the check's line, as the server refuses the launch at start-up.
    ``package`` is the framework's top-level package, ``who`` how the line
    names it ("SGLang 0.5.23"). None for any other failure."""
    import torch

    from graphbreak_doctor.frames import own_check, short_path
    from graphbreak_doctor.text import one_line

    check = own_check(error, package)
    if check is None:
        return None
    # An assertion without a message says what it asserts.
    said = one_line(str(error), 300) or f"{type(error).__name__}: {one_line(check.code, 300)}"
    return LaunchRefused(f"{who} refuses this launch on the emulated {torch.cuda.get_device_name()}: {said} "
                         f"(its check at {short_path(check.file)}:{check.line} in {check.function})", said=said)


class PhaseNotRun(Exception):
    """A target's phase cannot run here (its framework needs what the
    emulation does not answer): not bad input. The compile map stops there,
    crashed with this message, and keeps what the target recorded before."""


__all__ = ["LaunchRefused", "PhaseNotRun", "Target", "TargetError", "TargetInfo", "refused_by_check"]
