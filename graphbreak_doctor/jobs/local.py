"""Running a job in this process (``--in-process``, the worker's own body,
and graphbreak_doctor.testing)."""

from __future__ import annotations

from typing import Callable

from graphbreak_doctor.model import CRASHED
from graphbreak_doctor.jobs.job import FIX, MAP, Interrupted, Job, Outcome
from graphbreak_doctor.targets import TargetError
from graphbreak_doctor.text import one_line


def describe_exit(e: BaseException) -> str:
    """One line for an exception that ends a trace but is not a graph break."""
    if isinstance(e, SystemExit):
        return f"the target called sys.exit({e.code!r})"
    text = one_line(str(e))
    return f"the target raised {type(e).__name__}" + (f": {text}" if text else "")


def sized_builds(job: Job) -> dict:
    """For the fix ladder: the sizes the server compiles the target at (the
    job's, else its provider's reading of the built target) and how to build
    it at each."""
    from graphbreak_doctor.diagnose import selection_builder
    from graphbreak_doctor.targets.registry import provider

    chosen = provider(job.selection.provider)

    def at_size(n: int):
        if not chosen.builds_again_in_process(job.selection):
            return None
        sized = chosen.at_size(job.selection, n)
        return selection_builder(sized, job.device) if sized is not None else None

    def sizes_of(info) -> list[int]:
        return list(job.sizes) or chosen.server_sizes(job.selection, info)[0]

    return {"sizes_of": sizes_of, "at_size": at_size}


def run_in_process(job: Job, progress: Callable[[str], None] = lambda _m: None, *,
                   interrupts_are_ours: bool = True) -> Outcome:
    """Run ``job`` here. A bad target is a usage outcome; anything the target
    raises that Dynamo does not handle (SystemExit, a BaseException of its own)
    is a crash outcome, and so is an error of the doctor's own (said so).
    Interrupted propagates, and so does KeyboardInterrupt unless
    ``interrupts_are_ours`` is False (a worker, which ignores SIGINT: there a
    KeyboardInterrupt can only come from the target)."""
    import traceback

    from graphbreak_doctor.diagnose import selection_builder, trace_mode

    build = selection_builder(job.selection, job.device)
    try:
        if job.kind == FIX:
            from graphbreak_doctor.fix.ladder import fix

            findings = fix(build, mode=job.mode, device=job.device, max_steps=job.steps, progress=progress,
                           **sized_builds(job))
        elif job.kind == MAP:
            from graphbreak_doctor.compile_map import PhasesStopped, map_regions

            try:
                findings = map_regions(build, device=job.device, progress=progress)
            except PhasesStopped as e:  # the map as far as it got, crashed with the error
                return Outcome(job, findings=e.findings, details=[traceback.format_exc()])
        else:
            findings = trace_mode(build, job.mode, device=job.device, progress=progress)
    except TargetError as e:
        return Outcome(job, usage=True, message=str(e), details=[traceback.format_exc()])
    except Interrupted:
        raise
    except KeyboardInterrupt as e:
        if interrupts_are_ours:
            raise
        return Outcome(job, status=CRASHED, message=describe_exit(e), details=[traceback.format_exc()])
    except Exception as e:  # escaped the capture: an error of the doctor's own
        return Outcome(job, status=CRASHED, message=f"internal error: {type(e).__name__}: {one_line(str(e))}",
                       details=[traceback.format_exc()])
    except BaseException as e:  # the target's own SystemExit or BaseException: not a graph break
        return Outcome(job, status=CRASHED, message=describe_exit(e), details=[traceback.format_exc()])
    return Outcome(job, findings=findings)
