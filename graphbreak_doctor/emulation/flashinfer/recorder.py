"""What FlashInfer's JIT asked for while emulated: builds, loads and downloads.

A build is seen when FlashInfer's `run_ninja` starts ninja (a
`subprocess.Popen` audit event), a download when FlashInfer copies a file
out of the emulation's artifact repository (a `shutil.copyfile` audit
event, artifact_mirror.py), a load when the dry loader runs (loader.py).
Each is reported synchronously to the innermost active emulation's
recorder, while the call that caused it is executing.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import threading
from typing import Callable, Iterator

from graphbreak_doctor.emulation.flashinfer import artifact_mirror
from graphbreak_doctor.patching import UndoLog


@dataclasses.dataclass(frozen=True)
class JitRecord:
    """One JIT step FlashInfer asked for while emulated: a build or a load."""

    seq: int  # global order, across devices and sessions
    name: str  # the JitSpec name, e.g. "fp4_quantization_120f"
    action: str  # "build" or "load"
    device: str  # preset name
    path: str  # build directory or library path FlashInfer used
    exports: tuple[str, ...] = ()  # kernel names the dry module offers (loads)

    def to_dict(self) -> dict:
        return {
            "seq": self.seq,
            "name": self.name,
            "action": self.action,
            "device": self.device,
            "path": self.path,
            "exports": list(self.exports),
        }


@dataclasses.dataclass
class RecorderState:
    """The recorders of active emulations, for the life of the process. The
    audit hook cannot be removed, so it is added once and stays inert while
    no recorder is active; recorders are added and removed through the
    emulation's undo log."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    seq: Iterator[int] = dataclasses.field(default_factory=lambda: itertools.count(1))
    # Active recorders, innermost last; each is a callable(action, name, path, exports).
    sinks: list[Callable[..., JitRecord]] = dataclasses.field(default_factory=list)
    audit_installed: bool = False


STATE = RecorderState()


def next_seq() -> int:
    """The next number in the order of JIT steps, across devices and sessions."""
    with STATE.lock:
        return next(STATE.seq)


def report(action: str, name: str, path: str, exports: tuple[str, ...] = ()) -> None:
    """Hand one JIT step to the innermost active recorder, if any."""
    if STATE.sinks:
        STATE.sinks[-1](action, name, path, exports)


def _audit(event: str, args: tuple) -> None:
    # Installed once per process (audit hooks cannot be removed); inert unless
    # an emulation is active. Frames of this package are in Dynamo's skip list
    # (see emulation/__init__.py), so Dynamo never traces this hook.
    if not STATE.sinks:
        return
    if event == "shutil.copyfile" and artifact_mirror.STATE.mirrors:
        # flashinfer/jit/cubin_loader.py download_file: a repository that is a
        # local directory is "downloaded from" with shutil.copy.
        name = artifact_mirror.mirrored_name(str(args[0]))
        if name is not None:
            STATE.sinks[-1]("download", name, str(args[1]), ())
        return
    if event != "subprocess.Popen":
        return
    try:
        argv = list(args[1]) if args[1] is not None else [args[0]]
    except TypeError:
        return
    if not argv or os.path.basename(str(argv[0])) != "ninja" or "-C" not in argv:
        return
    build_dir = str(argv[argv.index("-C") + 1])
    STATE.sinks[-1]("build", os.path.basename(build_dir.rstrip("/")), build_dir, ())


def install_audit_hook() -> None:
    with STATE.lock:
        if not STATE.audit_installed:
            sys.addaudithook(_audit)
            STATE.audit_installed = True


def add_sink(sink: Callable[..., JitRecord], log: UndoLog) -> None:
    """Make `sink` the innermost recorder until `log` is undone."""
    STATE.sinks.append(sink)
    log.call_on_undo(lambda: STATE.sinks.remove(sink))
