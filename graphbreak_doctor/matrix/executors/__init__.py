"""Where a matrix's cells run: the executors.

A matrix hands its executor a list of :class:`Work` -- one job (a cell's mode)
and the environment it runs in -- and gets back one :class:`Ran` per item, in
order: the job's outcome (jobs.Outcome) with the environment it ran in, or why
that environment could not be had. Each job runs in a worker process of the
doctor's own (jobs/), with the same time and memory limits whatever the
executor; the executor decides only where the environment is built and the
worker started.

- ``local``: environments built here first, then every job in worker
  processes of this machine, ``--jobs`` at a time (executors/local.py);
- ``ray``: each job a Ray task, placed by Ray on a node of a cluster, which
  builds or reuses the environment in its own cache folder and runs the worker
  there (executors/ray.py; Ray is an optional dependency).

An executor is one module with a class named ``Executor`` and one line in
:data:`EXECUTORS`.
"""

from __future__ import annotations

import importlib
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from graphbreak_doctor.jobs.job import Job, Outcome
    from graphbreak_doctor.matrix.envs import Environments, Env, EnvSpec

# name -> module holding its Executor (imported when chosen: Ray is optional).
EXECUTORS = {
    "local": "graphbreak_doctor.matrix.executors.local",
    "ray": "graphbreak_doctor.matrix.executors.ray",
}


class ExecutorError(Exception):
    """The executor cannot run here (one line; the command exits 2)."""


@dataclass(frozen=True)
class Limits:
    jobs: int  # worker processes at once, locally
    timeout: float  # seconds, per worker
    memory: int  # bytes of address space, per worker (0: none)


@dataclass(frozen=True)
class Work:
    """One job of a cell and the environment it runs in (the job's ``python``
    is filled in where that environment is)."""

    spec: EnvSpec
    job: Job


@dataclass
class Ran:
    """What running one :class:`Work` gave."""

    outcome: Outcome | None  # None: the environment could not be had (``unbuilt`` says why)
    env: Env | None = None
    unbuilt: str = ""
    host: str = field(default_factory=socket.gethostname)  # the machine the job ran on
    # Why an earlier attempt was lost ("Ray worker lost (...)"); "" when it ran once.
    retried: str = ""


def executor(name: str, **options: Any):
    """The executor called ``name``, made with ``options`` (ExecutorError if it cannot run here)."""
    if name not in EXECUTORS:
        raise ExecutorError(f"unknown executor {name!r} (choose from {', '.join(EXECUTORS)})")
    return importlib.import_module(EXECUTORS[name]).Executor(**options)


Progress = Callable[[str], None]
