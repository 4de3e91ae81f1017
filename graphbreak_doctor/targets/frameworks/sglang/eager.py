"""SGLang's forward run eagerly, as its server runs it before (or instead
of) compiling, and the batch state it runs with (forward.py); a failure is
one line that says where inside SGLang it stopped."""

from __future__ import annotations

from typing import Any, Callable

import torch

from graphbreak_doctor.emulation import flashinfer as flashinfer_emulation
from graphbreak_doctor.frames import raised_at
from graphbreak_doctor.targets import TargetError
from graphbreak_doctor.targets.frameworks.sglang import forward, runtime
from graphbreak_doctor.text import one_line


def forward_state(rt: runtime.Runtime, layers: int, phase: str, tokens: int) -> forward.ForwardState:
    """The ForwardState of a ``phase`` batch of ``tokens``; TargetError when
    SGLang's attention metadata cannot be built here."""
    try:
        return forward.make_state(rt, layers, phase, tokens)
    except Exception as e:
        raise TargetError(f"SGLang's attention metadata for {'an' if phase[0] in 'aeiou' else 'a'} {phase} batch "
                          "could not be built here: "
                          f"{type(e).__name__}: {one_line(str(e), 200)}{raised_at(e)}") from e


def run_eagerly(call: Callable[..., Any], args: tuple, phase: str, what: str) -> None:
    """Run SGLang's forward as its server does before (or instead of) compiling."""
    try:
        call(*args)
    except Exception as e:
        why = flashinfer_emulation.unanswered_planner(e)
        if why:
            raise TargetError(f"cannot run SGLang's {phase} forward on an emulated "
                              f"{torch.cuda.get_device_name()}: {why}") from e
        raise TargetError(f"SGLang's {what} failed: {type(e).__name__}: {one_line(str(e), 200)}{raised_at(e)}"
                          + (" (--cold skips it)" if what == "eager warm-up" else "")) from e
