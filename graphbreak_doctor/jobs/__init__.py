"""Running traces: each (target, mode) in a worker process of its own, or in
this process.

A worker gives every trace a fresh process (FlashInfer keeps process-wide
state; forked from a process that imported torch once for the run's jobs:
jobs/shared.py), a time limit, and containment: a target that exits, aborts, segfaults
or hangs ends its worker, not the doctor, and what it leaves in the temporary
folder is removed with the worker's folder. The worker sends its findings back
as JSON; the parent joins the modes of a target, gates, renders and writes.
"""

from graphbreak_doctor.jobs.job import Interrupted, Job, Outcome
from graphbreak_doctor.jobs.local import run_in_process
from graphbreak_doctor.jobs.pool import run_jobs

__all__ = ["Interrupted", "Job", "Outcome", "run_in_process", "run_jobs"]
