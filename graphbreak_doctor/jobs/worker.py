"""The worker process: ``python -m graphbreak_doctor.jobs.worker JOB.json RESULT.json``.

Runs one job (jobs/local.py) and writes its outcome as JSON -- the findings
in their own JSON form -- to RESULT.json, whole or not at all. No result file
means the worker ended early (the target exited, aborted or was killed): the
parent says so from the exit status. SIGINT is ignored here (Ctrl-C at a
terminal reaches the whole process group; the parent decides what to stop),
and the target's output to stdout goes to stderr: the parent's stdout carries
the summary. With a log (Job.log), both go to that file (jobs/output.py).
"""

from __future__ import annotations

import json
import os
import signal
import sys


def _write(path: str, data: dict) -> None:
    tmp = f"{path}.partial"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    job_path, result_path = argv
    # First: die with the doctor, however it ends, and take along every
    # process the job starts (jobs/lifetime.py: this process stays behind as
    # the job's supervisor; what follows runs in the job's own process).
    from graphbreak_doctor.jobs.lifetime import PARENT_ENV, supervise

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.environ.pop(PARENT_ENV, "")
    supervise(int(parent) if parent.isdigit() else None)
    os.dup2(2, 1)  # C-level writes to stdout too
    with open(job_path, encoding="utf-8") as f:
        data = json.load(f)
    # The parent's import path (a checkout or test root on it), ahead of ours.
    for entry in reversed(data.pop("sys_path")):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    progress = bool(data.pop("progress", False))  # stderr is a pipe here: the parent says if it is a terminal
    memory = data.pop("memory", 0)
    if memory:  # the parent's limit on this worker's address space, in bytes
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
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
    outcome = run_in_process(job, Progress(progress), interrupts_are_ours=False, memory=memory)
    if job.debug:
        for text in outcome.details:
            terminal().write(text)
        terminal().flush()
    _write(result_path, {
        "status": outcome.status,
        "message": outcome.message,
        "usage": outcome.usage,
        "findings": outcome.findings.to_dict() if outcome.findings is not None else None,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
