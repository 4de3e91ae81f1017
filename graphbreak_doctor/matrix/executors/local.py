"""The local executor: every environment built (or found) on this machine
first, then every job in worker processes here, ``--jobs`` at a time. A Ray
node runs its share of a matrix through :func:`run_in_envs` too."""

from __future__ import annotations

from dataclasses import replace

from graphbreak_doctor.matrix.envs import Environments, Env, EnvError
from graphbreak_doctor.matrix.executors import Limits, Progress, Ran, Work


class Executor:
    name = "local"

    def __init__(self) -> None:
        self.log = ""  # nothing of its own to log: the workers' output is in their outcomes

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def describe(self) -> str:
        return ""  # the matrix says where it ran only when not here

    def run(self, work: list[Work], environments: Environments, limits: Limits, progress: Progress) -> list[Ran]:
        return run_in_envs(work, environments, limits, progress)


def run_in_envs(work: list[Work], environments: Environments, limits: Limits,
                progress: Progress = lambda _m: None) -> list[Ran]:
    """Each item's environment built or found (each once, in order), then the
    jobs of those that could be had, in worker processes of this machine."""
    envs: dict = {}
    for spec in dict.fromkeys(w.spec for w in work):
        progress(f"environment: {spec.label}")
        try:
            envs[spec] = environments.ensure(spec)
        except EnvError as e:
            envs[spec] = f"cannot install {spec.label}: {e}"
    todo = [(i, w) for i, w in enumerate(work) if isinstance(envs[w.spec], Env)]
    if todo:
        progress(f"tracing: {len(todo)} worker processes, {limits.jobs} at a time")
    outcomes = run_here([replace(w.job, python=envs[w.spec].python) for _i, w in todo], limits)
    ran = [Ran(None, unbuilt=envs[w.spec]) if isinstance(envs[w.spec], str) else None for w in work]
    for (i, w), outcome in zip(todo, outcomes):
        ran[i] = Ran(outcome, env=envs[w.spec])
    return ran


def run_here(jobs: list, limits: Limits) -> list:
    """The jobs' outcomes, each with what its traced code wrote (``log``):
    the workers' output never reaches the terminal."""
    from graphbreak_doctor.jobs import run_jobs
    from graphbreak_doctor.jobs.output import with_logs

    if not jobs:
        return []
    return with_logs(jobs, lambda logged: run_jobs(logged, timeout=limits.timeout, parallel=limits.jobs,
                                                   memory=limits.memory))
