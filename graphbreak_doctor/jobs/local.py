"""Running a job in this process (``--in-process``, the worker's own body,
and graphbreak_doctor.testing)."""

from __future__ import annotations

from typing import Callable

from graphbreak_doctor.model import CRASHED
from graphbreak_doctor.jobs.job import CUDAGRAPH, FIX, MAP, PROGRAM, SIZES, Interrupted, Job, Outcome
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


def sized_selections(job: Job) -> list[tuple[str, Callable]]:
    """(the size as given, how to build the target at it) for each of a
    SIZES job's sizes."""
    from graphbreak_doctor.diagnose import selection_builder
    from graphbreak_doctor.targets.provider import size_label
    from graphbreak_doctor.targets.registry import provider

    chosen = provider(job.selection.provider)
    if len(job.sizes) > 1 and not chosen.builds_again_in_process(job.selection):
        raise TargetError(f"--sizes: {job.selection.spec or job.selection.name} is built once per process; "
                          "it cannot be called at several sizes in one")
    out = []
    for n in job.sizes:
        sized = chosen.at_size(job.selection, n)
        if sized is None:
            raise TargetError(f"--sizes: {job.selection.spec or job.selection.name} has no size to change")
        out.append((size_label(n), selection_builder(sized, job.device)))
    return out


def out_of_memory(e: BaseException, memory: int) -> str:
    """The crash message for ``e`` when it says an allocation failed under the
    address-space limit ``memory`` (bytes; 0: none), else ""."""
    seen = 0
    cause: BaseException | None = e
    while cause is not None and seen < 16 and memory:
        text = str(cause)  # a TargetError says what its cause says: the cause is named
        if not isinstance(cause, TargetError) and (
                isinstance(cause, MemoryError) or "can't allocate memory" in text
                or "Cannot allocate memory" in text or "std::bad_alloc" in text):
            what = f"{type(cause).__name__}: {one_line(text)}" if text else type(cause).__name__
            return (f"out of memory: the worker's address space is limited to {memory / (1 << 30):g} GiB "
                    f"(--memory) and the target asked for more ({what})")
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return ""


def run_here(jobs: list[Job], progress: Callable[[str], None]) -> list[Outcome]:
    """``--in-process``: the jobs one after the other in this process, each
    writing to its log (Job.log); every process they start is ended with the
    run, however it ends (jobs/lifetime.py)."""
    from graphbreak_doctor.jobs.lifetime import end_what_starts
    from graphbreak_doctor.jobs.output import to_log
    from graphbreak_doctor.patching import UndoLog

    done = []
    with UndoLog() as started:
        end_what_starts(started)
        for job in jobs:
            with UndoLog() as log:
                to_log(job.log, log)
                done.append(run_in_process(job, progress))
    return done


def run_in_process(job: Job, progress: Callable[[str], None] = lambda _m: None, *,
                   interrupts_are_ours: bool = True, memory: int = 0) -> Outcome:
    """Run ``job`` here. A bad target is a usage outcome; anything the target
    raises that Dynamo does not handle (SystemExit, a BaseException of its own)
    is a crash outcome, and so is an error of the doctor's own (said so), and
    an allocation that fails under the worker's address-space limit
    ``memory`` (bytes; 0: none), however it surfaces.
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
                           cold=bool(job.selection.options.get("cold")), **sized_builds(job))
        elif job.kind == MAP:
            from graphbreak_doctor.compile_map import PhasesStopped, map_regions

            try:
                findings = map_regions(build, device=job.device, progress=progress)
            except PhasesStopped as e:  # the map as far as it got, crashed with the error
                return Outcome(job, findings=e.findings, details=[traceback.format_exc()])
        elif job.kind == SIZES:
            from graphbreak_doctor.diagnose import trace_sizes

            findings = trace_sizes(sized_selections(job), device=job.device, progress=progress)
        elif job.kind == CUDAGRAPH:
            from graphbreak_doctor.diagnose import trace_cudagraphs

            findings = trace_cudagraphs(build, device=job.device, progress=progress)
        elif job.kind == PROGRAM:
            from graphbreak_doctor.fix import user_run

            findings = user_run.run(build, device=job.device, progress=progress)
        else:
            findings = trace_mode(build, job.mode, device=job.device, progress=progress,
                                  cold=bool(job.selection.options.get("cold")))
    except TargetError as e:
        if out_of_memory(e, memory):
            return Outcome(job, status=CRASHED, message=out_of_memory(e, memory), details=[traceback.format_exc()])
        return Outcome(job, usage=True, message=str(e), details=[traceback.format_exc()])
    except Interrupted:
        raise
    except KeyboardInterrupt as e:
        if interrupts_are_ours:
            raise
        return Outcome(job, status=CRASHED, message=describe_exit(e), details=[traceback.format_exc()])
    except Exception as e:  # escaped the capture: an error of the doctor's own
        message = out_of_memory(e, memory) or f"internal error: {type(e).__name__}: {one_line(str(e))}"
        return Outcome(job, status=CRASHED, message=message, details=[traceback.format_exc()])
    except BaseException as e:  # the target's own SystemExit or BaseException: not a graph break
        return Outcome(job, status=CRASHED, message=describe_exit(e), details=[traceback.format_exc()])
    return Outcome(job, findings=findings)
