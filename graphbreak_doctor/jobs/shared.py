"""One process per interpreter that imports torch once and forks a process per
job: the **shared worker** (``python -m graphbreak_doctor.jobs.worker
SHARED.json FD``).

The pool (jobs/pool.py) starts one shared worker for the jobs of a run that
run in the same interpreter (same ``Job.python``, ``Job.path``, ``Job.cwd``).
It imports torch and the doctor's own modules a worker imports anyway before
it builds a target (``PRELOAD``; for jobs on a GPU, emulated or real,
Inductor's CUDA-graph trees too: ``GPU_PRELOAD``), nothing of any target,
and then waits on a Unix socket (its end is FD). For each job the pool sends a request
-- the job's files and folder -- with the write end of a pipe of the job's
own; the shared worker forks, and the child becomes that job's worker as a
fresh worker process would have been, from the state it was forked in: its
own session, that pipe as stderr, the job's TMPDIR (``tempfile`` forgets the
folder it had found), random generators seeded afresh; worker.py then splits
it into supervisor and job (jobs/lifetime.py) and sets the job's ``--memory``
limit there. The pool reads each job's pipe on its own, so stderr stays per
job. (What a fork cannot reset: the string hash seed is the shared worker's,
and a module the preload imported is not imported again.)

Messages, one per packet (``SOCK_SEQPACKET``), JSON:
  pool -> shared  ``{"op": "fork", "index", "job", "result", "tmp"}`` + a pipe's write end
                  ``{"op": "reap", "pid"}``: the pool is done with that job's process
  shared -> pool  ``{"op": "started", "index", "pid"}``
                  ``{"op": "ended", "pid", "code"}``: the job's process ended
                  (``code`` as ``Popen.returncode``: negative for a signal)
A job's process is reaped only when the pool says so: until then its pid
cannot be reused, and the pool may kill it (``--timeout``) without a race.

Lifetime: the shared worker gets SIGKILL when the doctor dies; each job's
supervisor gets SIGTERM when the shared worker dies and ends everything below
it. When the pool closes its end of the socket the shared worker ends what
still runs below it and exits.
"""

from __future__ import annotations

import gc
import json
import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_POLL = 0.05  # seconds between looks at the forked jobs
_MAX_MESSAGE = 1 << 16


# What every job's worker imports anyway before it builds its target: torch,
# Dynamo (through the capture) and the doctor's own modules. Nothing of a
# target, and not FlashInfer or SGLang: the emulated device must be in place
# before they are imported, and FlashInfer keeps process-wide state.
PRELOAD = ("torch", "graphbreak_doctor.jobs.local", "graphbreak_doctor.diagnose", "graphbreak_doctor.capture.trace",
           "graphbreak_doctor.emulation.device", "graphbreak_doctor.jobs.output", "graphbreak_doctor.progress")
# What a job on a GPU (emulated or real) imports too: Dynamo's reset, which
# the capture runs before each mode, imports Inductor's CUDA-graph trees
# whenever CUDA is available (about 600 modules, a second of CPU). Imported
# outside the device all the same: while they import, those modules ask
# torch only whether it was built with CUDA, which the emulation does not
# change.
GPU_PRELOAD = ("torch._inductor.cudagraph_trees",)


def preload_for(device: str) -> list[tuple[str, ...]]:
    """The groups of modules a shared worker imports for jobs on ``device``
    (``cpu``: no GPU, emulated or real)."""
    return [PRELOAD, GPU_PRELOAD] if device != "cpu" else [PRELOAD]


# ---------------------------------------------------------------- the pool's side


@dataclass
class Forked:
    """A job's process in a shared worker, as the pool sees it: ``pid`` once
    it is forked, ``returncode`` once it ended (as ``Popen.returncode``)."""

    index: int
    stderr: int  # the read end of the job's stderr pipe
    pid: int | None = None
    returncode: int | None = None
    reaped: bool = False
    lost: bool = False  # it ended with the shared worker (``returncode`` is the shared worker's)

    def poll(self) -> int | None:
        return self.returncode


class Shared:
    """A shared worker the pool started, and the jobs it forked."""

    def __init__(self, python: str, folder: Path, config: dict[str, Any], env: dict[str, str],
                 cwd: str | None) -> None:
        (folder / "tmp").mkdir(parents=True)
        self.folder = folder
        config = {**config, "stderr": str(folder / "stderr")}
        (folder / "shared.json").write_text(json.dumps(config), encoding="utf-8")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # What the shared worker writes itself (torch's import-time warnings,
        # its own errors): each forked job repeats the first part where its
        # own output goes, as a fresh worker would have printed it.
        with open(folder / "stderr", "wb") as log:
            try:
                self.process = subprocess.Popen(
                    [python, "-m", "graphbreak_doctor.jobs.worker", str(folder / "shared.json"),
                     str(theirs.fileno())],
                    env={**env, "TMPDIR": str(folder / "tmp")}, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    pass_fds=(theirs.fileno(),), start_new_session=True, cwd=cwd)
            finally:
                theirs.close()
        self.socket = ours  # blocking: a request is never dropped; reads never wait (MSG_DONTWAIT)
        self.jobs: dict[int, Forked] = {}  # by job index
        self.ended = False  # the shared worker itself ended (or was killed)
        self.told = False  # what it wrote to stderr was passed on (the pool does, once, when it died)

    def fork(self, index: int, job: Path, result: Path, tmp: Path) -> Forked:
        """Ask for a job's process; its stderr is the returned handle's pipe."""
        read, write = os.pipe()
        try:
            request = {"op": "fork", "index": index, "job": str(job), "result": str(result), "tmp": str(tmp)}
            if not self.ended:
                try:
                    socket.send_fds(self.socket, [json.dumps(request).encode()], [write])
                except OSError:  # it ended meanwhile: pump() says so
                    pass
        finally:
            os.close(write)
        os.set_blocking(read, False)
        self.jobs[index] = handle = Forked(index, read)
        if self.ended:
            handle.returncode, handle.lost = self.process.returncode, True
        return handle

    def pump(self) -> None:
        """Take in what the shared worker said (never waits)."""
        while not self.ended:
            try:
                data = self.socket.recv(_MAX_MESSAGE, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._gone()
                return
            message = json.loads(data)
            if message["op"] == "started":
                self.jobs[message["index"]].pid = message["pid"]
            elif message["op"] == "ended":
                for handle in self.jobs.values():
                    if handle.pid == message["pid"] and handle.returncode is None:
                        handle.returncode = message["code"]

    def _gone(self) -> None:
        """The shared worker ended: every job it had not seen end ended with
        it (their supervisors got SIGTERM and ended what ran below them)."""
        self.ended = True
        self.socket.close()
        try:
            code = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.process.returncode
        for handle in self.jobs.values():
            if handle.returncode is None:
                handle.returncode, handle.lost = code, True
            handle.reaped = True
        self._end_leftovers()

    def wait(self, handle: Forked, patience: float = 30.0) -> None:
        """Wait until the job's process is seen to end (after a kill)."""
        deadline = time.monotonic() + patience
        while handle.returncode is None and not self.ended and time.monotonic() < deadline:
            self.pump()
            if handle.returncode is None:
                time.sleep(0.01)
        if handle.returncode is None:  # it did not say: take it down with all it runs
            self.kill()

    def reap(self, handle: Forked) -> None:
        """The pool is done with the job's process: the shared worker reaps it."""
        if handle.reaped or handle.pid is None:
            return
        handle.reaped = True
        if not self.ended:
            try:
                self.socket.send(json.dumps({"op": "reap", "pid": handle.pid}).encode())
            except OSError:  # it ended meanwhile: pump() says so
                pass

    def kill(self) -> None:
        """End the shared worker and everything below it (every job it forked)."""
        from graphbreak_doctor.jobs import lifetime

        lifetime.kill_tree(self.process.pid)
        self.process.wait()
        if not self.ended:
            self._gone()
        self._end_leftovers()

    def close(self) -> None:
        """No more jobs: the shared worker ends (what still runs below it too)."""
        if not self.ended:
            self.socket.close()
            self.ended = True
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if self.process.poll() is None:
            self.kill()
        self._end_leftovers()

    def _end_leftovers(self) -> None:
        """Kill what still runs with this shared worker's TMPDIR: a process
        forked below it (never exec'd) keeps the environment it was started
        with, whatever TMPDIR its job set later."""
        from graphbreak_doctor.jobs import lifetime

        for pid in lifetime.processes_in(self.folder):
            lifetime.kill_tree(pid)

    def stderr_text(self) -> str:
        try:
            return (self.folder / "stderr").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""


# ---------------------------------------------------------------- the shared worker's side


def serve(fd: int, preload: str) -> dict[str, Any]:
    """Fork a job's process per request until the pool closes the socket
    ``fd``. Returns in each forked process: its request, with ``zygote`` (the
    shared worker's pid) and ``preload`` (what the shared worker printed
    while it imported). In the shared worker it ends the process."""
    sock = socket.socket(fileno=fd)
    children: dict[int, bool] = {}  # pid -> its end was reported
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    while True:
        if selector.select(_POLL):
            try:
                data, fds, _flags, _address = socket.recv_fds(sock, _MAX_MESSAGE, 1)
            except OSError:
                data, fds = b"", []
            if not data:  # the pool is done (or died): nothing may stay behind
                _end_children(children)
                sys.exit(0)
            request = json.loads(data)
            if request["op"] == "fork":
                sys.stdout.flush()
                sys.stderr.flush()
                gc.freeze()  # what is here now is never scanned in the job (copy-on-write pages stay shared)
                # Read before the fork: a child asking for its parent after it
                # would read init's pid if this process were killed meanwhile,
                # and then outlive it (jobs/lifetime.py checks the parent).
                zygote = os.getpid()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    sock.close()
                    return _become_job(request, fds[0], preload, zygote)
                os.close(fds[0])
                children[pid] = False
                _send(sock, {"op": "started", "index": request["index"], "pid": pid})
            elif request["op"] == "reap" and request["pid"] in children:
                os.waitpid(request["pid"], 0)
                del children[request["pid"]]
        for pid, reported in list(children.items()):
            if not reported:
                # WNOWAIT: the process stays a zombie (its pid taken) until the pool says reap.
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                if info is not None:
                    children[pid] = True
                    code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
                    _send(sock, {"op": "ended", "pid": pid, "code": code})


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:  # the pool's end is closed: the next read says so and ends this process
        pass


def _end_children(children: dict[int, bool]) -> None:
    from graphbreak_doctor.jobs import lifetime

    for pid in children:
        lifetime.kill_tree(pid)
        os.waitpid(pid, 0)


def _become_job(request: dict[str, Any], stderr: int, preload: str, zygote: int) -> dict[str, Any]:
    """In the forked process: reset what a fork inherits and a fresh worker
    would not have. ``zygote``: the shared worker's pid, read before the
    fork."""
    os.setsid()  # its own session and process group, as the pool starts a worker
    os.dup2(stderr, 2)
    os.close(stderr)
    for signum in (signal.SIGTERM, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    gc.enable()  # disabled in the shared worker while it imported (worker.py)
    # Everything the job puts in the temporary folder lands in its own folder.
    os.environ["TMPDIR"] = request["tmp"]
    tempfile.tempdir = None
    random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()
    sys.argv = [sys.argv[0], request["job"], request["result"]]
    return {**request, "zygote": zygote, "preload": preload}
