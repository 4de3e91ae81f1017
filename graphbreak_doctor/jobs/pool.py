"""Running jobs in worker processes: in parallel, each with a time limit, in
folders of their own that are removed however the worker ends.

The jobs that run in the same interpreter (same ``Job.python``, ``Job.path``,
``Job.cwd``) share one process that imports torch once and forks each job's
worker from there (jobs/shared.py); each job still gets a process, a pipe
for its stderr, a folder, a TMPDIR and a time limit of its own."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import graphbreak_doctor
from graphbreak_doctor.model import CRASHED, TIMED_OUT, Findings
from graphbreak_doctor.jobs import lifetime
from graphbreak_doctor.jobs.job import Interrupted, Job, Outcome
from graphbreak_doctor.jobs.shared import Forked, Shared, preload_for
from graphbreak_doctor.patching import UndoLog

_POLL = 0.05  # seconds between looks at the running workers

# First lines of the native crash reports a dying worker prints: tvm-ffi's
# SIGSEGV handler (installed when FlashInfer loads it), Python's faulthandler,
# glog. What follows is dozens of lines of C stack; the summary already says
# how the worker ended, and --debug shows the report.
_CRASH_REPORTS = (b"!!!!!!! Segfault encountered", b"Fatal Python error:", b"*** SIGSEGV", b"*** SIGBUS",
                  b"*** SIGABRT", b"*** Aborted at")


# How an allocation that fails in C code (under --memory) can end a worker.
_MEMORY_SIGNALS = (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGKILL)


def is_crash_report(line: str | bytes) -> bool:
    """Whether ``line`` starts a native crash report (everything after it is
    the report)."""
    raw = line.encode("utf-8", "replace") if isinstance(line, str) else line
    return raw.lstrip().startswith(_CRASH_REPORTS)


def held_back(text: str) -> tuple[str, int]:
    """``text`` up to a native crash report, and how many lines of report
    follow (held back unless --debug)."""
    lines = text.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if is_crash_report(line)), len(lines))
    return "".join(lines[:at]), len(lines) - at


def crash_report_line(job: Job, held: int) -> str:
    return (f"graphbreak-doctor: {job.describe()}: the worker's native crash report ({held} lines) "
            "is not shown; --debug shows it")


@dataclass
class _Relay:
    """A worker's stderr, passed on line by line to the doctor's; a native
    crash report is held back (counted) unless --debug."""

    job: Job
    fd: int
    partial: bytes = b""
    held: int = 0

    def feed(self, data: bytes) -> None:
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            self._line(line + b"\n")

    def _line(self, line: bytes) -> None:
        if self.held or (not self.job.debug and is_crash_report(line)):
            self.held += 1
            return
        _write_stderr(line)

    def close(self) -> None:
        if self.partial:
            self._line(self.partial + b"\n")
            self.partial = b""
        if self.held:
            from graphbreak_doctor.text import escape_controls

            _write_stderr(escape_controls(crash_report_line(self.job, self.held)).encode() + b"\n")
            self.held = 0


def _write_stderr(data: bytes) -> None:
    buffer = getattr(sys.stderr, "buffer", None)
    if buffer is not None:
        buffer.write(data)
        buffer.flush()
    else:  # a replaced sys.stderr (pytest's capture)
        sys.stderr.write(data.decode("utf-8", "replace"))


@dataclass
class _Running:
    job: Job
    index: int
    folder: Path
    shared: Shared
    process: Forked  # the job's worker, forked by ``shared``
    deadline: float
    relay: _Relay | None = field(default=None)
    memory: int = 0  # the worker's address-space limit, bytes (0: none)


def _exit_status(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the worker was killed by {name}"
    return f"the worker exited with code {code}"


def _key(job: Job) -> tuple[str, str, str]:
    """Jobs with the same key share one shared worker."""
    return job.python, job.path, job.cwd


def _shared(job: Job, run_dir: Path, shared: dict[tuple[str, str, str], Shared]) -> Shared:
    """The shared worker of the job's interpreter, started on first use."""
    found = shared.get(_key(job))
    if found is not None and not found.ended:
        return found
    # The shared worker's TMPDIR (its folder's tmp) names it and every process
    # forked below it to the sweep of a later run (jobs/lifetime.py); each
    # job's worker then uses its own folder's.
    env = {**os.environ, lifetime.PARENT_ENV: str(os.getpid())}
    # The worker imports this very graphbreak_doctor (a checkout or an install),
    # whatever the current folder is. Another environment's interpreter (a
    # matrix cell's) imports the doctor installed there (matrix/envs.py): the
    # folder holding this one can be this interpreter's site-packages, whose
    # torch and FlashInfer would come before the environment's own.
    home = "" if job.python else str(Path(graphbreak_doctor.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([*filter(None, [job.path, home]),
                                         *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    if job.path:
        # A written patch's proof reads the folder it proves and writes
        # nothing there: no bytecode beside the patch's modules (the folder
        # holds what the doctor wrote, and nothing else).
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    folder = run_dir / f"shared-{len(list(run_dir.glob('shared-*')))}"
    config = {"sys_path": job.import_path(), "preload": preload_for(job.device)}
    shared[_key(job)] = started = Shared(job.python or sys.executable, folder, config, env,
                                         job.cwd or None)
    return started


def _start(job: Job, index: int, run_dir: Path, timeout: float, memory: int,
           selector: selectors.BaseSelector, shared: dict[tuple[str, str, str], Shared]) -> _Running:
    folder = run_dir / f"job-{index}"
    shutil.rmtree(folder, ignore_errors=True)  # a job started again (its shared worker was stopped)
    (folder / "tmp").mkdir(parents=True)
    data = {**job.to_dict(), "memory": memory, "progress": sys.stderr.isatty()}
    (folder / "job.json").write_text(json.dumps(data), encoding="utf-8")
    # Everything the target or the emulation puts in the temporary folder lands
    # in the worker's own folder, removed with it.
    worker = _shared(job, run_dir, shared)
    process = worker.fork(index, folder / "job.json", folder / "result.json", folder / "tmp")
    running = _Running(job, index, folder, worker, process, time.monotonic() + timeout, memory=memory)
    running.relay = _Relay(job, process.stderr)
    selector.register(process.stderr, selectors.EVENT_READ, running)
    return running


def _pump(selector: selectors.BaseSelector, timeout: float) -> None:
    """Pass on what the workers wrote to stderr, waiting at most ``timeout``."""
    if not selector.get_map():
        time.sleep(timeout)
        return
    for key, _ in selector.select(timeout):
        _read(selector, key.data)


def _read(selector: selectors.BaseSelector, running: _Running) -> None:
    """Read what is there now (never waits: a process the worker started may
    hold the pipe open after the worker ended)."""
    relay = running.relay
    if relay is None:
        return
    while True:
        try:
            data = os.read(relay.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            _close(selector, running)
            return
        relay.feed(data)


def _close(selector: selectors.BaseSelector, running: _Running) -> None:
    relay, running.relay = running.relay, None
    if relay is None:
        return
    try:
        selector.unregister(relay.fd)
    except (KeyError, ValueError):
        pass
    relay.close()
    os.close(relay.fd)


def _ended(selector: selectors.BaseSelector, running: _Running) -> None:
    """The worker has ended: pass on the rest of its stderr, then stop reading."""
    _read(selector, running)
    _close(selector, running)


def _kill(running: _Running) -> None:
    """End a worker and every process below it (jobs/lifetime.py); one not
    forked yet (its shared worker still imports torch) goes with its shared
    worker."""
    if running.process.pid is None:
        running.shared.kill()
        return
    lifetime.kill_tree(running.process.pid)
    running.shared.wait(running.process)


def _end_leftovers(running: _Running) -> None:
    """Kill what still runs with the ended worker's TMPDIR (its supervisor
    ended everything below it; this is for one killed from outside)."""
    for pid in lifetime.processes_in(running.folder):
        lifetime.kill_tree(pid)


def _finish(running: _Running) -> Outcome:
    result = running.folder / "result.json"
    code = running.process.returncode
    if not result.exists() and running.process.lost:
        if not running.shared.told:  # its own last words (a traceback), once
            running.shared.told = True
            relay = _Relay(running.job, -1)
            relay.feed(running.shared.stderr_text().encode())
            relay.close()
        return Outcome(running.job, status=CRASHED, message=(
            f"the worker process that imports torch for this run's jobs ended "
            f"({_exit_status(code).removeprefix('the worker ')}) before the trace finished"))
    if not result.exists():
        how = _exit_status(code)
        if code == 0:
            how = "the target ended the worker process (exit code 0, e.g. os._exit)"
        elif code > 0:
            how = f"the target ended the worker process (exit code {code})"
        elif running.memory and -code in _MEMORY_SIGNALS:  # how a failed allocation in C code can end
            how += f" (its address space was limited to {running.memory / (1 << 30):g} GiB: --memory)"
        return Outcome(running.job, status=CRASHED, message=f"{how} before the trace finished")
    data = json.loads(result.read_text(encoding="utf-8"))
    findings = Findings.from_dict(data["findings"]) if data["findings"] is not None else None
    return Outcome(running.job, findings=findings, status=data["status"], message=data["message"],
                   usage=data["usage"], refused=str(data.get("refused") or ""), inputs=data.get("inputs"))


def _signals(log: UndoLog) -> None:
    """SIGINT and SIGTERM stop the run (cleanly: workers killed, folders removed)."""
    def stop(signum, _frame):
        raise Interrupted(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.signal(signum, stop)
        log.call_on_undo(lambda signum=signum, previous=previous: signal.signal(signum, previous))


def run_jobs(jobs: list[Job], *, timeout: float, parallel: int, memory: int = 0) -> list[Outcome]:
    """Outcomes in the order of ``jobs``; ``memory``: each worker's address
    space limit in bytes (0: none)."""
    outcomes: list[Outcome | None] = [None] * len(jobs)
    pending = list(enumerate(jobs))
    running: list[_Running] = []
    shared: dict[tuple[str, str, str], Shared] = {}
    # What a killed run left (its folder, processes in it) goes first.
    lifetime.sweep_temp()
    with UndoLog() as log:
        run_dir = log.enter(lifetime.owned_folder("graphbreak-doctor-run-"))
        selector = selectors.DefaultSelector()
        log.call_on_undo(selector.close)
        log.call_on_undo(lambda: [s.close() for s in shared.values()])
        log.call_on_undo(lambda: [(_kill(r), _ended(selector, r)) for r in running])
        _signals(log)
        while pending or running:
            while pending and len(running) < max(1, parallel):
                index, job = pending.pop(0)
                running.append(_start(job, index, run_dir, timeout, memory, selector, shared))
            _pump(selector, _POLL)
            for s in shared.values():
                s.pump()
            for r in list(running):
                if r not in running:  # started again below
                    continue
                if r.process.poll() is not None:
                    _ended(selector, r)
                    outcomes[r.index] = _finish(r)
                elif time.monotonic() > r.deadline:
                    if r.process.pid is None:  # its shared worker goes: the jobs waiting on it start again
                        for other in [o for o in running if o is not r and o.shared is r.shared
                                      and o.process.pid is None]:
                            _ended(selector, other)
                            running.remove(other)
                            pending.insert(0, (other.index, other.job))
                    _kill(r)
                    _ended(selector, r)
                    outcomes[r.index] = Outcome(r.job, status=TIMED_OUT,
                                                message=f"after {timeout:g} s (--timeout); the worker was killed")
                else:
                    continue
                running.remove(r)
                r.shared.reap(r.process)
                _end_leftovers(r)
                shutil.rmtree(r.folder, ignore_errors=True)
                # A shared worker no job needs any more ends now.
                if not any(_key(j) == _key(r.job) for _, j in pending) and not any(
                        o.shared is r.shared for o in running):
                    r.shared.close()
    return [o for o in outcomes if o is not None]
