"""Running a job in this process (``--in-process``, the worker's own body,
and graphbreak_doctor.testing)."""

from __future__ import annotations

import dis
import errno
import os
import re
import struct
from typing import Callable

from graphbreak_doctor.model import CRASHED
from graphbreak_doctor.jobs.job import CUDAGRAPH, FIX, MAP, PROGRAM, SIZES, Interrupted, Job, Outcome
from graphbreak_doctor.targets import LaunchRefused, TargetError
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
    """The crash message for ``e`` when the address-space limit ``memory``
    (bytes; 0: none) caused it, else "". Caused by the limit: an exception in
    its chain is a request for memory that failed (``_failed_request``) and
    that request did not fit under the limit (``_past_limit``). A
    ``MemoryError`` the target raises itself is its own failure, as any other
    exception it raises."""
    seen = 0
    cause: BaseException | None = e
    while cause is not None and seen < 16 and memory:
        asked = _failed_request(cause)
        if asked is not None and _past_limit(asked, memory):
            text = str(cause)
            what = f"{type(cause).__name__}: {one_line(text)}" if text else type(cause).__name__
            return (f"out of memory: the worker's address space is limited to {memory / (1 << 30):g} GiB "
                    f"(--memory) and the target asked for more ({what})")
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return ""


# How a request for memory that failed reads: ENOMEM's own words (the C
# library's), torch's CPU allocator (which says how much it asked for), C++.
_NO_MEMORY = ("Cannot allocate memory", "can't allocate memory", "std::bad_alloc")
_ASKED = re.compile(r"tried to allocate (\d+) bytes")
# The dynamic loader could not map a shared object (a module's or a library's).
_UNMAPPED = ": failed to map segment from shared object"


def _failed_request(e: BaseException) -> int | None:
    """The bytes asked for (0: unknown) when ``e`` is a request for memory
    that failed, raised where the memory was asked for -- in native code, the
    interpreter or the dynamic loader -- else None. An exception a
    ``raise`` statement made is Python code's own verdict, never a failed
    request (one it was raised from is in its chain)."""
    if isinstance(e, TargetError) or _raised_by_statement(e):
        return None
    text = str(e)
    if isinstance(e, ImportError) and _UNMAPPED in text:
        # Only a mapping that did not fit is the limit's (a file system
        # mounted noexec refuses it too): its size is that of the object that
        # failed (the module's, or a library it needs); unknown, none is known.
        return _mapped_size(text.split(_UNMAPPED)[0]) or None
    if isinstance(e, MemoryError) or getattr(e, "errno", None) == errno.ENOMEM or any(t in text for t in _NO_MEMORY):
        asked = _ASKED.search(text)
        return int(asked.group(1)) if asked else 0
    return None


def _raised_by_statement(e: BaseException) -> bool:
    """Whether ``e`` was raised by a ``raise`` statement: the innermost frame
    of its traceback stopped at a RAISE_VARARGS instruction (a failure in
    native code stops its caller's frame at the call)."""
    tb = e.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code.co_code
    return 0 <= tb.tb_lasti < len(code) and code[tb.tb_lasti] == dis.opmap["RAISE_VARARGS"]


def _mapped_size(path: str) -> int | None:
    """The address space a shared object's loadable segments span (ELF64,
    little-endian), or None where ``path`` is no such file."""
    head = _read(path, 64)
    if head[:6] != b"\x7fELF\x02\x01":
        return None
    (phoff,), (entry, count) = struct.unpack_from("<Q", head, 32), struct.unpack_from("<HH", head, 54)
    if entry < 56:  # an ELF64 program header's size
        return None
    table = _read(path, entry * count, phoff)
    spans = []
    for at in range(0, len(table) - entry + 1, entry):
        if struct.unpack_from("<I", table, at)[0] == 1:  # PT_LOAD: its address at 16, its size in memory at 40
            start, size = struct.unpack_from("<Q", table, at + 16)[0], struct.unpack_from("<Q", table, at + 40)[0]
            spans.append((start, start + size))
    return max(end for _, end in spans) - min(start for start, _ in spans) if spans else None


def _past_limit(size: int, memory: int) -> bool:
    """Whether a request for ``size`` bytes that failed did not fit under the
    address-space limit ``memory``: what the process maps now and the request
    exceed it. Where the size is unknown (0), a refusal can only be the limit's
    when the kernel has no other reason to refuse: the limit is within the
    machine's memory and swap (the kernel's own check refuses only a request
    larger than those), overcommit is not strict, and the process holds fewer
    mappings than the kernel allows. The files are read a page at a time: the
    process may be at its limit."""
    used = _numbers("/proc/self/statm")[:1]
    used_bytes = used[0] * os.sysconf("SC_PAGE_SIZE") if used else 0
    if size or used_bytes >= memory:
        return used_bytes + size > memory
    meminfo = _read("/proc/meminfo", 8192).split(b"\n")
    kib = sum(int(line.split()[1]) for line in meminfo if line.startswith((b"MemTotal:", b"SwapTotal:")))
    strict, most = _numbers("/proc/sys/vm/overcommit_memory") == [2], _numbers("/proc/sys/vm/max_map_count")
    return bool(kib and most) and memory <= kib << 10 and not strict and _lines("/proc/self/maps") < most[0]


def _read(path: str, most: int, at: int = 0) -> bytes:
    """Up to ``most`` bytes of ``path`` from offset ``at``; b"" where it
    cannot be read (not Linux: nothing known, so nothing is the limit's)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        return os.pread(fd, most, at)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _numbers(path: str) -> list[int]:
    return [int(word) for word in _read(path, 4096).split() if word.isdigit()]


def _lines(path: str) -> int:
    """How many lines ``path`` holds, read a page at a time."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return 0
    count = 0
    try:
        while chunk := os.read(fd, 4096):
            count += chunk.count(b"\n")
    finally:
        os.close(fd)
    return count


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
    a failure the worker's address-space limit ``memory`` (bytes; 0: none)
    caused, however it surfaces (``out_of_memory``).
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
                                  cold=bool(job.selection.options.get("cold")),
                                  fatal=lambda e: bool(out_of_memory(e, memory)))
    except TargetError as e:
        limit = out_of_memory(e, memory)
        if limit:
            return Outcome(job, status=CRASHED, message=limit, details=[traceback.format_exc()])
        return Outcome(job, usage=True, message=str(e), refused=e.said if isinstance(e, LaunchRefused) else "",
                       details=[traceback.format_exc()])
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
