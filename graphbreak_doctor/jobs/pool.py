"""Running jobs in worker processes: in parallel, each with a time limit, in
folders of their own that are removed however the worker ends."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import graphbreak_doctor
from graphbreak_doctor.findings import CRASHED, TIMED_OUT, Findings
from graphbreak_doctor.jobs.job import Interrupted, Job, Outcome
from graphbreak_doctor.patching import UndoLog

_POLL = 0.05  # seconds between looks at the running workers


@dataclass
class _Running:
    job: Job
    index: int
    folder: Path
    process: subprocess.Popen
    deadline: float


def _exit_status(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the worker was killed by {name}"
    return f"the worker exited with code {code}"


def _start(job: Job, index: int, run_dir: Path, timeout: float, memory: int) -> _Running:
    folder = run_dir / f"job-{index}"
    (folder / "tmp").mkdir(parents=True)
    # Another environment's interpreter gets only this checkout (PYTHONPATH
    # below), never this interpreter's site-packages.
    data = {**job.to_dict(), "sys_path": [] if job.python else [p for p in sys.path if p], "memory": memory}
    (folder / "job.json").write_text(json.dumps(data), encoding="utf-8")
    # Everything the target or the emulation puts in the temporary folder lands
    # in the worker's own folder, removed with it.
    env = {**os.environ, "TMPDIR": str(folder / "tmp")}
    # The worker imports this very graphbreak_doctor (a checkout or an install),
    # whatever the current folder is.
    home = str(Path(graphbreak_doctor.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([home, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    process = subprocess.Popen(
        [job.python or sys.executable, "-m", "graphbreak_doctor.jobs.worker", str(folder / "job.json"),
         str(folder / "result.json")],
        env=env, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    return _Running(job, index, folder, process, time.monotonic() + timeout)


def _kill(running: _Running) -> None:
    try:
        os.killpg(running.process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # already gone
        pass
    running.process.wait()


def _finish(running: _Running) -> Outcome:
    result = running.folder / "result.json"
    code = running.process.returncode
    if not result.exists():
        how = _exit_status(code)
        if code == 0:
            how = "the target ended the worker process (exit code 0, e.g. os._exit)"
        elif code > 0:
            how = f"the target ended the worker process (exit code {code})"
        return Outcome(running.job, status=CRASHED, message=f"{how} before the trace finished")
    data = json.loads(result.read_text(encoding="utf-8"))
    findings = Findings.from_dict(data["findings"]) if data["findings"] is not None else None
    return Outcome(running.job, findings=findings, status=data["status"], message=data["message"],
                   usage=data["usage"])


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
    with UndoLog() as log:
        run_dir = Path(tempfile.mkdtemp(prefix="graphbreak-doctor-run-"))
        log.call_on_undo(lambda: shutil.rmtree(run_dir, ignore_errors=True))
        log.call_on_undo(lambda: [_kill(r) for r in running])
        _signals(log)
        while pending or running:
            while pending and len(running) < max(1, parallel):
                index, job = pending.pop(0)
                running.append(_start(job, index, run_dir, timeout, memory))
            time.sleep(_POLL)
            for r in list(running):
                if r.process.poll() is not None:
                    outcomes[r.index] = _finish(r)
                elif time.monotonic() > r.deadline:
                    _kill(r)
                    outcomes[r.index] = Outcome(r.job, status=TIMED_OUT,
                                                message=f"after {timeout:g} s (--timeout); the worker was killed")
                else:
                    continue
                running.remove(r)
                shutil.rmtree(r.folder, ignore_errors=True)
    return [o for o in outcomes if o is not None]

