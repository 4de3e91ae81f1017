"""Nothing the doctor starts outlives it, and what a killed doctor left behind
is removed by the next run.

Workers die with the doctor: each worker asks the kernel, first thing, for
SIGKILL when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``, through
ctypes). The process the doctor starts is a shared worker (jobs/shared.py),
which forks each job's worker; a forked worker's supervisor (below) asks for
SIGTERM when the shared worker dies, so the chain holds: doctor, shared
worker, supervisor, job. The kernel sends it however the doctor ends -- SIGKILL included --
and it needs nothing from the worker: a target stuck in C code holding the
GIL, or one that blocks or ignores signals, dies all the same. (A pipe the
worker watches would need a thread of the worker to run Python, and so the
GIL.) Other programs the doctor starts (uv, for the matrix's environments)
get the same request through a small exec trampoline (:func:`command`).

A killed doctor cannot clean up: its temporary folders
(``graphbreak-doctor-run-*``, ``graphbreak-doctor-env-*``,
``graphbreak-doctor-pin-*``, its log folder ``graphbreak-doctor-logs-*``)
stay, and so may processes the workers started. Each such folder holds ``.owner``, a file its creator keeps locked
(``flock``) while it lives; the kernel drops the lock when the owner dies.
:func:`sweep_temp` -- run by the worker pool, the log folder's maker
(jobs/output.py) and the matrix before they create their own -- removes
every such folder whose lock it can take, after killing the processes still
running in it (found by the ``TMPDIR`` each worker was given, which their children inherit; a process
forked below a shared worker, never exec'd, shows the shared worker's, also
inside the run's folder). A
half-built matrix environment (no manifest) whose build lock is free is
removed the same way (matrix/envs.py). A folder whose owner lives is never
touched.

What a worker's target starts ends with the worker's job, whatever it does to
escape: a child in a session of its own (``setsid``), one that ignores
SIGTERM, a double fork whose middle process exits. The worker process splits
in two first thing (:func:`supervise`): a small supervisor, which the kernel
makes a child subreaper (``PR_SET_CHILD_SUBREAPER``: every orphan below it
is re-parented to it, not to init), and the job, its child. When the job
ends -- written its result, exited, crashed -- the supervisor SIGKILLs
everything below it and reaps it, then ends as the job ended. The doctor
kills a worker it stops (``--timeout``, Ctrl-C) the same way, descendants
first (:func:`kill_tree`), and the supervisor's own parent-death signal is
SIGTERM, which it handles by ending everything below it: a doctor killed by
SIGKILL leaves nothing running either. ``--in-process`` makes the doctor
itself a subreaper while it runs the jobs (:func:`end_what_starts`), and
ends every process started meanwhile.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from graphbreak_doctor.patching import UndoLog

# A run's log folder (jobs/output.py): the traced code's output, per job.
LOGS_PREFIX = "graphbreak-doctor-logs-"
# The worker pool's, a matrix environment build's, the log folder, and where
# `matrix --torch release` downloads a release's wheel (matrix/pins.py).
PREFIXES = ("graphbreak-doctor-run-", "graphbreak-doctor-env-", LOGS_PREFIX, "graphbreak-doctor-pin-")
OWNER = ".owner"
# Where a worker learns its parent's pid: it must be that process's child.
PARENT_ENV = "GRAPHBREAK_DOCTOR_PARENT"

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37


def _prctl(option: int, value: int = 0) -> int | None:
    """``prctl(option, value)``'s result; None where there is no prctl (not
    Linux) or it failed."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if option == _PR_GET_CHILD_SUBREAPER:
            found = ctypes.c_int(0)
            return found.value if libc.prctl(option, ctypes.byref(found), 0, 0, 0) == 0 else None
        return 0 if libc.prctl(option, value, 0, 0, 0) == 0 else None
    except (OSError, AttributeError):
        return None


def die_with_parent(parent: int | None = None, signum: int = signal.SIGKILL) -> bool:
    """Ask the kernel for ``signum`` (SIGKILL) when this process's parent dies.
    If the parent ``parent`` is already gone (it died before this call), exit
    now. False where the kernel has no such request (not Linux)."""
    if _prctl(_PR_SET_PDEATHSIG, signum) is None:
        return False
    if parent is not None and os.getppid() != parent:
        os._exit(128 + signal.SIGKILL)
    return True


def descendants(root: int) -> list[int]:
    """Pids of the processes below ``root`` that still run (zombies left
    out), from every process's parent in /proc; [] where there is no /proc."""
    children: dict[int, list[int]] = {}
    dead = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) < 2:
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
        if fields[0] in (b"Z", b"X"):
            dead.add(int(name))
    found, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid not in dead:
            found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # gone, or reused by a process not ours
        pass


def kill_descendants(root: int, patience: float = 10.0) -> list[int]:
    """SIGKILL every process below ``root`` until none runs: one that forks
    meanwhile has its child found next round (below a subreaper ``root``,
    an orphan stays below it). Returns those still running after
    ``patience`` seconds (a process stuck in the kernel), [] as a rule."""
    deadline = time.monotonic() + patience
    while True:
        found = descendants(root)
        if not found or time.monotonic() > deadline:
            return found
        for pid in found:
            _kill(pid)
        time.sleep(0.005)


def kill_tree(pid: int) -> None:
    """End process ``pid`` and every process below it: those first, while
    ``pid`` (a worker's supervisor, a subreaper) still holds them, then
    ``pid`` and its process group."""
    kill_descendants(pid)
    _kill(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # no such group (left, or never its own)
        pass


class _Stop(BaseException):
    """SIGTERM reached a worker's supervisor."""


def supervise(parent: int | None) -> None:
    """Split this worker process in two: returns in the child, which runs the
    job (and dies with the supervisor); this process becomes its supervisor, a
    child subreaper, and never returns: it waits for the job, ends every
    process below it, and exits as the job did. ``parent``: the doctor's pid
    (the supervisor gets SIGTERM when it dies). Where there are no subreapers
    (not Linux) there is no split: the worker only dies with its parent."""
    if _prctl(_PR_SET_CHILD_SUBREAPER, 1) is None:
        die_with_parent(parent)
        return

    stopping = []

    def stop(_signum, _frame):
        if not stopping:  # once: a second SIGTERM must not cut the cleanup short
            stopping.append(True)
            raise _Stop

    # SIGTERM waits while the job is forked: the job starts with it unhandled.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    signal.signal(signal.SIGTERM, stop)
    die_with_parent(parent, signal.SIGTERM)
    supervisor = os.getpid()
    job = os.fork()
    if job == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        _prctl(_PR_SET_CHILD_SUBREAPER, 0)
        die_with_parent(supervisor)
        return
    status = None
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        while status is None:
            pid, found = os.waitpid(-1, 0)  # orphans re-parented here are reaped as they end
            if pid == job:
                status = found
    except _Stop:  # the doctor died, or someone stopped this worker: the job goes too
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _end_below(supervisor)
    _exit_as(status if status is not None else signal.SIGTERM)


def _end_below(supervisor: int) -> None:
    """Kill and reap every process below this one (a subreaper)."""
    while True:
        kill_descendants(supervisor)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _exit_as(status: int) -> None:
    """Exit with the wait status ``status``: the same code, or killed by the
    same signal (no core file: the job wrote its own)."""
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        import faulthandler
        import resource

        faulthandler.disable()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if -code != signal.SIGKILL:  # the one whose action cannot be set
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)


def end_what_starts(log: UndoLog) -> None:
    """Make this process a child subreaper until ``log`` is undone; then end
    every process started below it meanwhile (those below it before stay),
    setsid'd and double-forked ones too. For ``--in-process``."""
    me = os.getpid()
    before = {pid: _started(pid) for pid in [*descendants(me), *_zombie_children(me)]}
    previous = _prctl(_PR_GET_CHILD_SUBREAPER)
    if previous is None or _prctl(_PR_SET_CHILD_SUBREAPER, 1) is None:
        return

    def new() -> list[int]:
        return [pid for pid in descendants(me) if before.get(pid, -1) != _started(pid)]

    def end() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = new()
            for pid in found:
                _kill(pid)
            for pid in _zombie_children(me):
                if before.get(pid, -1) != _started(pid):
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(pid, 0)
            if not found:
                break
            time.sleep(0.005)
        _prctl(_PR_SET_CHILD_SUBREAPER, previous)

    log.call_on_undo(end)


def _started(pid: int) -> int:
    """When process ``pid`` started (clock ticks since boot; -2: gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return -2
    return int(stat[stat.rfind(b")") + 2:].split()[19])


def _zombie_children(parent: int) -> list[int]:
    """This process's children that ended and wait to be reaped."""
    found = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rpartition(b")")[2].split()
            except OSError:
                continue
            if len(fields) > 1 and fields[0] == b"Z" and int(fields[1]) == parent:
                found.append(int(name))
    return found


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
