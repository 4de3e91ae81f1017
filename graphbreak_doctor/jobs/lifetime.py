"""Nothing the doctor starts outlives it, and what a killed doctor left behind
is removed by the next run.

Workers die with the doctor: each worker asks the kernel, first thing, for
SIGKILL when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``, through
ctypes). The kernel sends it however the doctor ends -- SIGKILL included --
and it needs nothing from the worker: a target stuck in C code holding the
GIL, or one that blocks or ignores signals, dies all the same. (A pipe the
worker watches would need a thread of the worker to run Python, and so the
GIL.) Other programs the doctor starts (uv, for the matrix's environments)
get the same request through a small exec trampoline (:func:`command`).

A killed doctor cannot clean up: its temporary folders
(``graphbreak-doctor-run-*``, ``graphbreak-doctor-env-*``) stay, and so may
processes the workers started. Each such folder holds ``.owner``, a file its
creator keeps locked (``flock``) while it lives; the kernel drops the lock
when the owner dies. :func:`sweep_temp` -- run by the worker pool and the
matrix before they create their own -- removes every such folder whose lock
it can take, after killing the processes still running in it (found by the
``TMPDIR`` each worker was given, which their children inherit). A
half-built matrix environment (no manifest) whose build lock is free is
removed the same way (matrix/envs.py). A folder whose owner lives is never
touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Iterator

PREFIXES = ("graphbreak-doctor-run-", "graphbreak-doctor-env-")
OWNER = ".owner"
# Where a worker learns its parent's pid: it must be that process's child.
PARENT_ENV = "GRAPHBREAK_DOCTOR_PARENT"

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None) -> bool:
    """Ask the kernel for SIGKILL when this process's parent dies. If the
    parent ``parent`` is already gone (it died before this call), exit now.
    False where the kernel has no such request (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if parent is not None and os.getppid() != parent:
        os._exit(128 + signal.SIGKILL)
    return True


# Runs a program with the parent-death request set: python -c TRAMPOLINE PID PROGRAM ARGS...
_TRAMPOLINE = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)\n"
    "except Exception:\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(137)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def command(argv: list[str]) -> list[str]:
    """``argv`` run so that it dies with this process (Linux; elsewhere as it is)."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-c", _TRAMPOLINE, str(os.getpid()), *argv]


@contextlib.contextmanager
def owned_folder(prefix: str, dir: str | os.PathLike | None = None) -> Iterator[Path]:
    """A new temporary folder that this process owns (``.owner`` locked) while
    the block runs; removed at its end, or by a later sweep if this process
    is killed."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=dir))
    # Locked before it has its name: a sweep never sees an owner file unlocked
    # while its owner lives.
    fd = os.open(folder / f"{OWNER}.new", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.rename(folder / f"{OWNER}.new", folder / OWNER)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)


def owner_is_dead(folder: Path) -> bool:
    """True when ``folder`` has an owner file nobody holds locked."""
    try:
        fd = os.open(folder / OWNER, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # no owner file: not ours to judge
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: the owner lives
    finally:
        os.close(fd)
    return True


def processes_in(folder: Path) -> list[int]:
    """Pids of processes whose TMPDIR is inside ``folder`` (workers, and what
    they started), from /proc; [] where there is no /proc."""
    marker = f"TMPDIR={os.path.realpath(folder)}".encode()
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if any(v == marker or v.startswith(marker + b"/") for v in environ.split(b"\0")):
            found.append(int(entry.name))
    return found


def sweep_temp(tmp: str | os.PathLike | None = None) -> list[Path]:
    """Remove the temporary folders killed runs left in ``tmp`` (default: the
    temporary folder), with the processes still running in them. Returns the
    folders removed."""
    root = Path(tmp or tempfile.gettempdir())
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for folder in entries:
        if not folder.name.startswith(PREFIXES) or folder.is_symlink() or not folder.is_dir():
            continue
        if not owner_is_dead(folder):
            continue
        for pid in processes_in(folder):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed
