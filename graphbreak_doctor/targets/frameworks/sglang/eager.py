"""SGLang's forward run eagerly, as its server runs it before (or instead
of) compiling, and the batch state it runs with (forward.py); a failure is
one line that says where inside SGLang it stopped. Where one of SGLang's
own checks stopped it (an attention backend's device assertion), it is
SGLang's refusal of the launch on this device (``refusal``): its message
and the check's line, exit 2, as the server refuses it at start-up."""

from __future__ import annotations

from typing import Any, Callable

import torch

from graphbreak_doctor.emulation import flashinfer as flashinfer_emulation
from graphbreak_doctor.frames import raised_at
from graphbreak_doctor.targets import LaunchRefused, TargetError, refused_by_check
from graphbreak_doctor.targets.frameworks.sglang import forward, runtime
from graphbreak_doctor.text import one_line


def refusal(error: BaseException) -> LaunchRefused | None:
    """SGLang's refusal of the launch on the emulated device, where one of its
    own checks raised ``error``; None for any other failure."""
    return refused_by_check(error, "sglang", f"SGLang {runtime.version()}")


def forward_state(rt: runtime.Runtime, layers: int, phase: str, tokens: int) -> forward.ForwardState:
    """The ForwardState of a ``phase`` batch of ``tokens``; LaunchRefused
    where one of SGLang's checks refuses it, TargetError when SGLang's
    attention metadata cannot be built here."""
    try:
        return forward.make_state(rt, layers, phase, tokens)
    except Exception as e:
        refused = refusal(e)
        if refused is not None:
            raise refused from e
        raise TargetError(f"SGLang's attention metadata for {'an' if phase[0] in 'aeiou' else 'a'} {phase} batch "
                          "could not be built here: "
                          f"{type(e).__name__}: {one_line(str(e), 200)}{raised_at(e)}") from e


def run_eagerly(call: Callable[..., Any], args: tuple, phase: str, what: str) -> None:
    """Run SGLang's forward as its server does before (or instead of)
    compiling; LaunchRefused where one of SGLang's checks refuses it."""
    try:
        call(*args)
    except Exception as e:
        refused = refusal(e)
        if refused is not None:
            raise refused from e
        why = flashinfer_emulation.unanswered_planner(e)
        if why:
            raise TargetError(f"cannot run SGLang's {phase} forward on an emulated "
                              f"{torch.cuda.get_device_name()}: {why}") from e
        raise TargetError(f"SGLang's {what} failed: {type(e).__name__}: {one_line(str(e), 200)}{raised_at(e)}"
                          + (" (--cold skips it)" if what == "eager warm-up" else "")) from e
