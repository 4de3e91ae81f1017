"""The target options every tracing command shares: each provider's own
options (targets/registry.py), --mode, --device, how to run (workers or this
process); and turning them into selected targets and their findings."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass
from typing import Any

from graphbreak_doctor.cli.common import UsageError, int_at_least
from graphbreak_doctor.cli.outputs import OutputSet, write_file
from graphbreak_doctor.emulation.presets import DEFAULT_DEVICE, PRESETS
from graphbreak_doctor.model import CUDAGRAPH_MODE, MAP_MODE, MODE_CHOICES, SIZES_MODE, Findings, Rung, modes_for
from graphbreak_doctor.model.cache_facts import CacheFacts
from graphbreak_doctor.jobs import Job, Outcome, findings_cache, run_jobs
from graphbreak_doctor.jobs.job import CUDAGRAPH, FIX, MAP, SIZES, TRACE
from graphbreak_doctor.jobs.local import run_here
from graphbreak_doctor.jobs.output import lines, log_sections, with_logs
from graphbreak_doctor.jobs.pool import crash_report_line, held_back
from graphbreak_doctor.jobs.worker import memory_ceiling
from graphbreak_doctor.progress import Progress
from graphbreak_doctor.targets.provider import Option, Selection, TargetProvider
from graphbreak_doctor.targets.registry import PROVIDERS
from graphbreak_doctor.text import escape_controls

DEFAULT_TIMEOUT = 900
# Address space per worker, GiB (docs/tracing.md says how it was chosen). A
# real GPU (--device cuda) has none unless asked: a CUDA context reserves more
# address space than the machine has memory.
DEFAULT_MEMORY_GB = 16


def _argparse_type(option: Option):
    if option.type is None:
        return None

    def parse(text: str) -> Any:
        try:
            return option.type(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from e

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def add_option(group: Any, o: Option) -> None:
    """A provider's option on a parser (or one of its groups)."""
    if o.switch:
        group.add_argument(o.flag, dest=o.name, action="store_const", const=True, default=None, help=o.help_text)
    elif o.repeat:
        group.add_argument(o.flag, dest=o.name, metavar=o.metavar, action="append", help=o.help_text,
                           type=_argparse_type(o))
    else:
        group.add_argument(o.flag, dest=o.name, metavar=o.metavar, choices=o.choices, help=o.help_text,
                           type=_argparse_type(o))


def add_target_options(p: argparse.ArgumentParser, default_mode: str = "both") -> None:
    for provider in PROVIDERS:
        group = p.add_argument_group(provider.title)
        for o in provider.options:
            add_option(group, o)
    p.add_argument("--mode", choices=(*MODE_CHOICES, MAP_MODE), default=default_mode,
                   help="explain: every break; fullgraph: the first hard failure, as SGLang sees it; "
                        "both: explain + fullgraph; piecewise: fullgraph with the attention op as a split point; "
                        "map: only the compile map (--model: the torch.compile regions the launch enters) "
                        f"(default: {default_mode})")
    p.add_argument("--cold", action="store_true",
                   help="trace without the warm-up: by default each target runs eagerly once before it is traced, "
                        "as a server runs its forward before it compiles (SGLang's targets: SGLang's own "
                        "warm-up); its fullgraph verdict is traced cold too, and a first failure that differs is "
                        "reported")
    emulated = [name for name, preset in PRESETS.items() if preset.emulated]
    p.add_argument("--device", choices=tuple(PRESETS), default=DEFAULT_DEVICE,
                   help=f"emulated GPU preset ({', '.join(emulated)}; default {DEFAULT_DEVICE}), "
                        "cuda for a real GPU, cpu for plain CPU tensors")
    run = p.add_argument_group("how to run")
    run.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                     help=f"kill a trace that runs longer (default {DEFAULT_TIMEOUT}; exit 4)")
    run.add_argument("--jobs", type=int_at_least(1), default=None, metavar="N",
                     help="traces run at once, each (target, mode) in a worker process (default: the CPU count)")
    add_memory_option(run)
    run.add_argument("--in-process", action="store_true",
                     help="trace in this process, one after the other (for debugging; no --timeout or --memory, "
                          "and a target that exits or segfaults ends the doctor)")
    run.add_argument("--no-cache", action="store_true",
                     help="trace even when the findings cache holds this job's findings and nothing they were "
                          "traced from changed (docs/cache.md); the fresh findings replace the cached ones")
    run.add_argument("--verbose", action="store_true",
                     help="also show what the traced code wrote to stdout and stderr (always kept in a log file "
                          "beside the report)")
    p.add_argument("--debug", action="store_true", help="show tracebacks and whole error messages")


def _size_list(text: str) -> tuple[int | tuple[int, ...], ...]:
    """argparse type: ``--sizes 1,64,512`` or shapes ``4,4x4,4x4x4``."""
    from graphbreak_doctor.targets.provider import parse_size

    try:
        sizes = tuple(parse_size(t) for t in text.split(",") if t.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    if not sizes:
        raise argparse.ArgumentTypeError(f"expected comma-separated sizes, got {text!r}")
    return sizes


def add_sizes_option(p: argparse.ArgumentParser) -> None:
    """--sizes on trace and check: the run at the server's sizes."""
    p.add_argument("--sizes", metavar="N,N,...", type=_size_list,
                   help="also compile the target once and call it at each size in order, as a server does "
                        "(a --target factory takes size=N, or size=(A, B, ...) for a shape AxB; --layer and "
                        "--model: tokens in the batch): every recompile with Dynamo's reason, and a verdict when "
                        "the server would hit Dynamo's recompile limit (check fails then)")


def add_cudagraph_option(p: argparse.ArgumentParser) -> None:
    """--cudagraph on trace and check: the CUDA-graph map."""
    p.add_argument("--cudagraph", action="store_true",
                   help="also capture the target into CUDA graphs on the emulated GPU as a server captures it "
                        "(two eager warm-ups, then the capture; a framework's model: its own capture path), "
                        "and report the segments, their break points and every capture hazard inside them "
                        "(check fails on a hazard the baseline lacks)")


def torch_version(text: str) -> str:
    """argparse type: ``--torch VERSION``, a release's version (never '' or
    blank, which would quietly trace with this environment's torch)."""
    from packaging.version import InvalidVersion, Version

    try:
        Version(text)
    except InvalidVersion:
        raise argparse.ArgumentTypeError(f"expected a torch version (2.14.1), got {text!r}") from None
    return text.strip()


def add_torch_option(p: argparse.ArgumentParser) -> None:
    """--torch on trace: the trace in an environment holding that torch."""
    p.add_argument("--torch", metavar="VERSION", type=torch_version,
                   help="trace in an environment holding this torch release, with this environment's FlashInfer "
                        "(and SGLang, for its targets): built once by the matrix's machinery (pip installs the "
                        "torch from the wheel folders and indexes it is configured with) and kept in the cache")


def torch_python(args: argparse.Namespace, selected: list[Selection], progress: Progress) -> str:
    """--torch VERSION: the interpreter of the environment holding it ("" without --torch)."""
    version = getattr(args, "torch", None)
    if not version:
        return ""
    from graphbreak_doctor.matrix.envs import Environments, EnvError, EnvSpec, default_envs_dir, installed

    if args.in_process:
        raise UsageError("--torch traces in another environment's workers: --in-process runs none")
    from graphbreak_doctor.targets.frameworks import registry

    # The framework that builds the selections, at its release here (its targets import it).
    framework = next((f for f in (registry.of(s.options) for s in selected) if f is not None), None)
    spec = EnvSpec(framework.name if framework else "", framework.release() if framework else "",
                   installed("flashinfer-python"), version)
    try:
        environments = Environments(default_envs_dir())
        if not environments.ready(spec):
            progress(f"building an environment with {spec.label} (once; kept in the cache)")
        return environments.ensure(spec).python
    except EnvError as e:
        raise UsageError(f"--torch {version}: {e}") from e


def add_memory_option(group: Any) -> None:
    """--memory, for every command that runs targets in workers."""
    group.add_argument("--memory", type=_memory_gib, default=None, metavar="GB",
                       help=f"address-space limit per worker, GiB (default {DEFAULT_MEMORY_GB}; none for "
                            "--device cuda; 0: none); a target that allocates past it crashes (exit 3)")


def _memory_gib(text: str) -> int:
    """argparse type of --memory: GiB, from 0 to the largest limit a worker
    can be given here (refused before any worker starts)."""
    gib, most = int_at_least(0)(text), memory_ceiling() >> 30
    if gib > most:
        raise argparse.ArgumentTypeError(f"expected at most {most} GiB (the largest address-space limit a worker "
                                         f"can be given here), got {text!r}")
    return gib


def memory_limit(args: argparse.Namespace) -> int:
    """The address-space limit per worker that ``args`` ask for, in bytes (0: none)."""
    if args.memory is None:  # the default, within a limit this process already has
        return 0 if getattr(args, "device", None) == "cuda" else min(DEFAULT_MEMORY_GB << 30, memory_ceiling())
    return args.memory << 30


def values(args: argparse.Namespace, provider: TargetProvider) -> dict[str, Any]:
    return {o.name: getattr(args, o.name, None) for o in provider.options}


def chosen_provider(args: argparse.Namespace) -> TargetProvider:
    """The provider whose selecting option was given; its options only."""
    chosen = [p for p in PROVIDERS if p.selected(values(args, p))]
    flags = " or ".join(f for p in PROVIDERS for f in p.selecting_flags())
    if not chosen:
        raise UsageError(f"choose what to trace: {flags}")
    if len(chosen) > 1:
        given = ", ".join(f for p in chosen for f in p.selecting_flags())
        raise UsageError(f"choose one of {flags}, not several ({given})")
    provider = chosen[0]
    for other in PROVIDERS:
        if other is provider:
            continue
        for o in other.options:
            if not o.selects and getattr(args, o.name, None) is not None:
                raise UsageError(f"{o.flag} applies to {' / '.join(other.selecting_flags())} "
                                 f"({other.title}), not to {' / '.join(provider.selecting_flags())}")
    return provider


def selections(args: argparse.Namespace) -> list[Selection]:
    provider = chosen_provider(args)
    try:
        chosen = provider.select(values(args, provider))
    except ValueError as e:
        raise UsageError(str(e)) from e
    if getattr(args, "cold", False):  # every target's: its build and its trace read it from the selection
        chosen = [dataclasses.replace(s, options={**s.options, "cold": True}) for s in chosen]
    return chosen


def stem(selection: Selection, args: argparse.Namespace, what: str | None = None) -> str:
    """The file stem of a target's outputs: <target>-<device>-<mode or what>."""
    return f"{selection.name}-{args.device}-{what or args.mode}"


def run_jobs_as_asked(args: argparse.Namespace, jobs: list[Job], progress: Progress) -> list[Outcome]:
    """Every job's outcome, in order -- in workers, or in this process with
    --in-process -- with what its traced code wrote (``log``, kept out of the
    terminal); a target that is bad input is a UsageError."""
    if args.in_process and args.memory is not None:
        raise UsageError("--memory limits each worker's address space: --in-process runs no worker")

    def run_all(logged: list[Job]) -> list[Outcome]:
        if not args.in_process:  # the findings cache: its inputs are recorded in the workers
            return findings_cache.run(
                logged, lambda traced: run_jobs(traced, timeout=args.timeout, parallel=args.jobs or os.cpu_count() or 1,
                                                memory=memory_limit(args)),
                read=not args.no_cache, memory=memory_limit(args))
        done = run_here(logged, progress)
        for o in done:
            if o.findings is not None:
                o.findings.cache = CacheFacts()
        return done

    outcomes = with_logs(jobs, run_all)
    usage = next((o for o in outcomes if o.usage), None)
    if usage is not None:
        raise UsageError(usage.message)
    for o in outcomes:
        # A worker that failed: what its code wrote is the first thing to read
        # (up to a native crash report, which only --debug shows whole).
        if (o.findings is None or args.verbose) and o.log:
            shown, held = (o.log, 0) if args.debug else held_back(o.log)
            if shown.strip():
                sys.stderr.write(escape_controls(f"graphbreak-doctor: what {o.job.describe()} wrote:\n{lines(shown)}",
                                                 keep="\n\t"))
            if held:
                sys.stderr.write(escape_controls(crash_report_line(o.job, held)) + "\n")
    return outcomes


@dataclass
class Diagnoses:
    """Each selected target's findings, and what its traced code wrote (its log)."""

    findings: list[Findings]
    logs: list[str]


def run_diagnoses(args: argparse.Namespace, selected: list[Selection], progress: Progress, *,
                  saved_ladder: tuple[list[Rung], str] | None = None) -> Diagnoses:
    """One findings per selected target, its modes joined (and its compile
    map, for a target whose provider asks for one: traced first, so that an
    --in-process run records torch.compile before the target's code loads);
    ``saved_ladder``: the rungs of an earlier ``fix``, and where they come from."""
    from graphbreak_doctor.analysis.assemble import join

    modes = [] if args.mode == MAP_MODE else modes_for(args.mode)
    # --mode piecewise asks for one compile path (tc_piecewise), not for the launch's map.
    mapped = args.mode != "piecewise"
    unmapped = [s.name for s in selected if not s.options.get("compile_map")]
    if args.mode == MAP_MODE and unmapped:
        raise UsageError(f"--mode map: {', '.join(unmapped)} has no compile map (it is a model's: --model)")
    sizes = tuple(getattr(args, "sizes", None) or ())
    if sizes:
        _check_sizes(selected, sizes)
    python = torch_python(args, selected, progress)
    groups = [[Job(MAP, s, args.device, MAP_MODE, debug=args.debug, python=python)]
              * (mapped and bool(s.options.get("compile_map")))
              + [Job(TRACE, s, args.device, m, debug=args.debug, python=python) for m in modes]
              + [Job(SIZES, s, args.device, SIZES_MODE, debug=args.debug, sizes=sizes, python=python)] * bool(sizes)
              # A model's map captures its phases with the framework's own path already.
              + [Job(CUDAGRAPH, s, args.device, CUDAGRAPH_MODE, debug=args.debug, python=python)]
              * bool(getattr(args, "cudagraph", False) and not (mapped and s.options.get("compile_map")))
              for s in selected]
    outcomes = iter(run_jobs_as_asked(args, [job for group in groups for job in group], progress))
    per_target = [[next(outcomes) for _ in group] for group in groups]
    joined = [join([o.as_findings() for o in group], saved_ladder=saved_ladder) for group in per_target]
    for findings, group in zip(joined, per_target):
        findings.cache = CacheFacts.joined([o.findings.cache if o.findings is not None else None for o in group])
    return Diagnoses(joined, [log_sections(group) for group in per_target])


def _check_sizes(selected: list[Selection], sizes: tuple) -> None:
    """--sizes fits every selected target: it has a size to change, takes
    shapes where one is given, and can be built at several in one process."""
    from graphbreak_doctor.targets.registry import provider

    for s in selected:
        chosen = provider(s.provider)
        name = s.spec or s.name
        if chosen.at_size(s, 1) is None:
            raise UsageError(f"--sizes: {name} has no size to change")
        if not chosen.shaped_sizes and any(isinstance(n, tuple) for n in sizes):
            raise UsageError(f"--sizes: {name} takes whole numbers (tokens in the batch), not shapes")
        if len(sizes) > 1 and not chosen.builds_again_in_process(s):
            raise UsageError(f"--sizes: {name} is built once per process; it cannot be called at several sizes "
                             "in one (use --layer, whose decoder blocks build again)")


def run_fixes(args: argparse.Namespace, selected: list[Selection], progress: Progress) -> Diagnoses:
    jobs = [Job(FIX, s, args.device, args.mode, steps=args.steps, debug=args.debug,
                sizes=tuple(getattr(args, "sizes", None) or ())) for s in selected]
    outcomes = run_jobs_as_asked(args, jobs, progress)
    return Diagnoses([o.as_findings() for o in outcomes], [log_sections([o]) for o in outcomes])
