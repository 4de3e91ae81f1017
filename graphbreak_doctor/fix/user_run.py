"""The user's own program, as a written patch's proof runs it.

``fix --write-patch DIR`` proves the patch twice in fresh processes started
with ``PYTHONPATH=DIR`` (its sitecustomize.py loads the patch before anything
else is imported): the doctor's own fullgraph trace (cli/patch.py), and this
-- no capture, no listener, nothing of the doctor's between the target and
Dynamo, only what a user writes::

    expected = fn(*args)                            # eager, as a server's warm-up runs it
    got = torch.compile(fn, fullgraph=True)(*args)  # == expected
    torch._dynamo.reset()                           # as a test suite or a server that compiles again does
    again = torch.compile(fn, fullgraph=True)(*args)  # == expected

The target is built as the doctor builds it (inside the selected device:
fake CUDA tensors on an emulated GPU). Both compiled outputs are compared
with eager: value for value on real tensors, shape, dtype and device on fake
ones (they have no values). Eager runs first, before anything has warmed
a written hoist up (its warm-up joins Dynamo's compile start): a hoisted
answer that changes from call to call shows as outputs that differ. The
doctor's own trace, the other proof, compiles cold. Dynamo's backend-free
path (``eager``) runs the graph: what is proven is that Dynamo captures the
whole function, not what Inductor makes of it.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable

import torch

from graphbreak_doctor.diagnose import Build, build_target, environment, inside_device
from graphbreak_doctor.fix.outputs import same, same_shapes
from graphbreak_doctor.analysis.assemble import program_run
from graphbreak_doctor.model import Findings
from graphbreak_doctor.recipes.common import has_fake_tensor
from graphbreak_doctor.text import one_line

# What the program's result says, word for word (cli/patch.py shows it).
HELD = "eager, then a plain torch.compile(fullgraph=True), and again after torch._dynamo.reset(): ok"


def run(build: Build, *, device: str, progress: Callable[[str], None] = lambda _m: None) -> Findings:
    """Build the target and run the program above on it. The findings say
    how it went: ``fullgraph.ok`` (both compiles held and their outputs equal
    eager's), ``fullgraph.error`` (what failed, in one line), and
    ``fix.outputs_equal_eager`` (None where values could not be compared)."""
    with inside_device(device) as (dev, log):
        target = build_target(build, log, "fullgraph", progress)
        fake = has_fake_tensor((target.args, target.kwargs))
        error, equal = "", None
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the summary
            try:
                error, equal = _program(target.fn, target.args, target.kwargs, fake, progress)
            finally:
                torch._dynamo.reset()
        told = HELD + ("; outputs equal eager" if equal else
                       "; outputs' shapes, dtypes and devices equal eager (fake tensors have no values)")
        return program_run(target.info, environment(), dev.describe(), error, told, equal)


def _program(fn: Any, args: tuple, kwargs: dict, fake: bool,
             progress: Callable[[str], None]) -> tuple[str, bool | None]:
    """(what failed, "" when nothing did; whether the outputs' values equal
    eager's, None on fake tensors)."""
    torch._dynamo.reset()  # nothing of the build's left in Dynamo's caches
    progress("the user's program: eager")
    try:
        expected = fn(*args, **kwargs)
    except Exception as e:
        return f"eager call: {type(e).__name__}: {_first_line(e)}", None
    check = same_shapes if fake else same
    for attempt in ("compile", "compile after torch._dynamo.reset()"):
        if attempt != "compile":
            torch._dynamo.reset()
        progress(f"the user's program: {attempt}")
        try:
            got = torch.compile(fn, fullgraph=True, backend="eager")(*args, **kwargs)
        except Exception as e:
            return f"{attempt}: {type(e).__name__}: {_first_line(e)}", None
        if not check(got, expected):
            what = "shapes, dtypes or devices" if fake else "values"
            return f"{attempt}: the compiled outputs' {what} differ from eager's", None if fake else False
    return "", None if fake else True


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return one_line(text.splitlines()[0] if text else "", 200)
