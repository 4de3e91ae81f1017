"""The worker process: ``python -m graphbreak_doctor.jobs.worker SHARED.json FD``.

Started once per interpreter a run's jobs use (jobs/pool.py), it imports
torch and the doctor's modules a job needs before it builds its target
(jobs/shared.py: ``PRELOAD``), then forks one worker per job (``serve``).
Each forked worker runs one job (jobs/local.py) and writes its outcome as
JSON -- the findings in their own JSON form -- to the job's RESULT.json,
whole or not at all. No result file means the worker ended early (the target
exited, aborted or was killed): the parent says so from the exit status.
SIGINT is ignored here (Ctrl-C at a terminal reaches the whole process group;
the parent decides what to stop), and the target's output to stdout goes to
stderr: the parent's stdout carries the summary. With a log (Job.log), both
go to that file (jobs/output.py).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import sys

def _preload(groups: list[list[str]], stderr: str) -> str:
    """Import each group of modules (shared.py: ``preload_for``), until one fails;
    returns what this process printed meanwhile (each job's worker repeats
    it where its own output goes)."""
    for group in groups:
        before = set(sys.modules)
        try:
            for name in group:
                importlib.import_module(name)
        except Exception:
            # Not this process's to report: each job imports the same modules
            # again, from as clean a state as this, and fails there with an
            # outcome of its own, as a worker of its own would.
            for name in set(sys.modules) - before:
                del sys.modules[name]
            break
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        with open(stderr, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:  # gone: the run is being stopped
        return ""


def memory_ceiling() -> int:
    """The largest address-space limit, in bytes, a worker can be given here
    (``--memory``): what setrlimit takes (a C long), and no more than this
    process's own hard limit, which a worker inherits and cannot raise."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    most = (1 << 63) - 1
    return most if hard == resource.RLIM_INFINITY else min(most, hard)


def main(argv: list[str]) -> int:
    shared_path, control = argv
    from graphbreak_doctor.jobs import inputs  # first: what the job reads is recorded (findings cache)

    # The run's folder (the jobs' files and TMPDIRs, this process's own) is the run's, not an input.
    inputs.start_recording(skip=(os.path.dirname(os.path.dirname(os.path.abspath(shared_path))),))
    # What is imported here stays as it is in every job's process: no
    # collection moves it now, none in a job scans it (jobs/shared.py freezes
    # it before each fork), so the pages stay shared.
    gc.disable()
    # Die with the doctor, however it ends (jobs/lifetime.py).
    from graphbreak_doctor.jobs.lifetime import PARENT_ENV, die_with_parent, supervise
    from graphbreak_doctor.jobs.shared import PRELOAD, serve

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.environ.pop(PARENT_ENV, "")
    die_with_parent(int(parent) if parent.isdigit() else None)
    with open(shared_path, encoding="utf-8") as f:
        shared = json.load(f)
    # The parent's import path (a checkout or test root on it), ahead of ours.
    for entry in reversed(shared["sys_path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    request = serve(int(control), _preload(shared.get("preload", [PRELOAD]), shared["stderr"]))
    # From here on: one job's worker, forked for it. It splits in two: this
    # process stays behind as the job's supervisor, which dies with the shared
    # worker and takes along every process the job starts (jobs/lifetime.py);
    # what follows runs in the job's own process.
    job_path, result_path = request["job"], request["result"]
    supervise(request["zygote"])
    os.dup2(2, 1)  # C-level writes to stdout too
    with open(job_path, encoding="utf-8") as f:
        data = json.load(f)
    progress = bool(data.pop("progress", False))  # stderr is a pipe here: the parent says if it is a terminal
    memory = data.pop("memory", 0)
    if memory:  # the parent's limit on this worker's address space, in bytes
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    from graphbreak_doctor.jobs.atomic import replace_json
    from graphbreak_doctor.jobs.job import Job
    from graphbreak_doctor.jobs.local import run_in_process
    from graphbreak_doctor.jobs.output import to_log
    from graphbreak_doctor.patching import UndoLog
    from graphbreak_doctor.progress import Progress, terminal

    job = Job.from_dict(data)
    # Never undone: what the libraries print while the interpreter shuts down
    # goes to the log too.
    log = UndoLog()
    if job.log:
        to_log(job.log, log)
    if request["preload"]:  # where a worker of its own would have printed it
        sys.stderr.write(request["preload"])
        sys.stderr.flush()
    outcome = run_in_process(job, Progress(progress), interrupts_are_ours=False, memory=memory)
    if job.debug:
        for text in outcome.details:
            terminal().write(text)
        terminal().flush()
    replace_json(result_path, {
        "status": outcome.status,
        "message": outcome.message,
        "usage": outcome.usage,
        "refused": outcome.refused,
        "findings": outcome.findings.to_dict() if outcome.findings is not None else None,
        "inputs": inputs.recorded(job, outcome),
    })
    _end(0)
    return 0


def _end(code: int) -> None:
    """End the job's process as an interpreter ends -- its threads waited
    for, exit handlers run, output flushed -- but without tearing down every
    object: in a forked process that writes to (and so copies) each page it
    shares with the shared worker, about a second of CPU per job."""
    import atexit
    import threading

    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter's own exit runs first
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
