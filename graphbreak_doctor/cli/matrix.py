"""`graphbreak-doctor matrix`: which framework x FlashInfer x GPU combinations
capture GLM-5's layers -- one isolated environment per version pair, one
worker process per cell and mode -- and `--bisect` for the first release
where the verdict changes. Each serving framework contributes its axis
(`--<name> V1,...`: `--sglang`, `--vllm`, a plugin's) and its launch
arguments (`--<name>-args`), read by each release itself; a matrix has one
framework axis. With `--model` each cell is the framework's compile map of
the served model forward (the first framework that builds layers, SGLang,
when none is named). Any other provider that offers itself to the
matrix (``TargetProvider.in_matrix``: ``--target M:F``, a plugin's) names
the targets each cell traces."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from graphbreak_doctor.cli.common import (
    EXIT_OK,
    UsageError,
    add_subcommand,
    int_at_least,
    names_list,
    show,
)
from graphbreak_doctor.cli.outputs import OutputSet, add_output_options, keep_logs, write_file
from graphbreak_doctor.emulation.presets import PRESETS
from graphbreak_doctor.model import DEFAULT_DEVICE, MAP_MODE, MODE_CHOICES
from graphbreak_doctor.matrix.executors import EXECUTORS
from graphbreak_doctor.render import MATRIX, get
from graphbreak_doctor.targets.frameworks import registry
from graphbreak_doctor.targets.models.packaged import listing as packaged_listing
from graphbreak_doctor.targets.registry import providers

NAME = "matrix"
DEFAULT_TIMEOUT = 900

HELP = """Each (framework release, FlashInfer) pair gets a virtual environment built with uv from
the pinned requirement files that ship with the doctor and the framework's own recipe (torch held at this
interpreter's version; kept and reused: --envs). A cell that cannot be built or does not import here is shown
as "not runnable on torch X: <reason>"; the matrix exits 0 whatever its cells say.
With --model a cell is the framework's compile map of the served model forward under
its launch arguments (--sglang-args, --vllm-args, read by each release itself): how the
release runs the prefill (and its fullgraph verdict where the launch compiles
it on a path of its own), what the framework said, the torch.compile regions entered, the
CUDA-graph map. A release that refuses an argument reads "not available in this release:
<the framework's message>". --model alone maps SGLang's; --model --vllm V1,... vLLM's.

"""


def _version_list(text: str) -> tuple[str, ...]:
    from packaging.version import InvalidVersion, Version

    from graphbreak_doctor.matrix.run import MAX_RELEASES

    values = names_list(text)
    if len(values) > MAX_RELEASES:
        raise argparse.ArgumentTypeError(f"at most {MAX_RELEASES} releases per axis, got {len(values)}")
    for v in values:
        try:
            Version(v)
        except InvalidVersion:
            raise argparse.ArgumentTypeError(f"not a version: {v!r}") from None
    return values


def _torch_list(text: str) -> tuple[str, ...]:
    """--torch: versions, or the word release."""
    return ("release",) if text.strip() == "release" else _version_list(text)


def _pins(args: argparse.Namespace, framework, releases: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """--torch release: (release, the torch it pins) per framework release; () otherwise."""
    if tuple(args.torch or ()) != ("release",):
        return ()
    if framework is not None and not framework.torch_release:
        raise UsageError(f"--torch release: {framework.title}'s environments hold the torch of the cell's axis, "
                         "not its release's pin: leave out --torch release")
    if framework is None or not releases or args.bisect:
        named = framework or _default_framework()
        raise UsageError(f"--torch release holds each {named.title} release's own torch: give --{named.name} "
                         "V1,... (not --bisect)")
    from graphbreak_doctor.matrix.envs import EnvError, release_torch

    try:
        return tuple((r, release_torch(framework.distribution or framework.name, r, list(args.find_links)))
                     for r in releases)
    except EnvError as e:
        raise UsageError(f"--torch release: {e}") from e


def _default_framework():
    """The framework of --model and --impl when none is named: the first that builds layers (serving.py)."""
    from graphbreak_doctor.targets.serving import LAYER_FRAMEWORKS

    return LAYER_FRAMEWORKS[0]


def _axis_dest(framework) -> str:
    """Where the parsed options keep a framework's releases (--<name>)."""
    return f"releases_{framework.name.replace('-', '_')}"


def _devices(text: str) -> tuple[str, ...]:
    values = names_list(text)
    emulated = [n for n, p in PRESETS.items() if p.emulated]
    for v in values:
        if v not in emulated:
            raise argparse.ArgumentTypeError(f"unknown emulated device {v!r} (choose from {', '.join(emulated)})")
    return values


def _served_option(name: str, help: str):
    """The served-model provider's own option (targets/serving.py: its flag,
    type, choices and metavar), with the matrix's words for what it does."""
    from graphbreak_doctor.targets.serving import PROVIDER

    option = next(o for o in PROVIDER.options if o.name == name)
    return dataclasses.replace(option, help=help)


def add_parser(sub: argparse._SubParsersAction) -> None:
    from graphbreak_doctor.cli.targets import add_memory_option, add_option

    p = add_subcommand(sub, NAME, "a compatibility matrix over framework x FlashInfer x GPU, with bisection",
                       epilog=HELP)
    what = p.add_mutually_exclusive_group(required=True)
    add_option(what, _served_option("layer", "GLM-5 decoder layer(s)"))
    add_option(what, _served_option(
        "model", "per cell, the framework's compile map of the served model forward (as `trace --model --mode map`; "
                 "SGLang's unless another framework's releases are given): how the release runs the prefill, the "
                 "torch.compile regions entered, the CUDA-graph map"))
    for provider in _matrix_providers():
        group = p.add_argument_group(f"{provider.title} (each cell traces it; its code must import in the "
                                     "cells' environments)")
        for o in provider.options:
            add_option(what if o.selects else group, o)
    add_option(p, _served_option("impl", "a framework's own layer (the default with its releases: --sglang); "
                                         "reference: the project's re-creation, no framework needed"))
    axes = p.add_argument_group("the framework axis (one per matrix; each framework contributes its own)")
    for framework in registry.FRAMEWORKS:
        layered = "" if "block" in framework.scopes else "with --model: "
        try:
            axes.add_argument(f"--{framework.name}", type=_version_list, metavar="V1,V2,...",
                              dest=_axis_dest(framework),
                              help=f"{layered}{framework.title} releases, each in an environment of its own "
                                   "(default: the installed one)")
        except argparse.ArgumentError:  # a plugin's framework named as one of the matrix's own options
            print(f"graphbreak-doctor: plugin framework {framework.name}: --{framework.name} is one of the matrix's "
                  "own options; its axis is left out of the matrix", file=sys.stderr)
            continue
        add_option(axes, dataclasses.replace(
            framework.launch_option(), help=f"the server's launch arguments, read by each cell's {framework.title} "
                                            f"release itself; needs --{framework.name}"))
    p.add_argument("--flashinfer", type=_version_list, metavar="V1,V2,...",
                   help="FlashInfer releases (default: the installed one)")
    p.add_argument("--torch", type=_torch_list, metavar="V1,V2,...|release",
                   help="torch releases, an axis of their own (default: every cell holds this interpreter's "
                        "torch); release: each framework release's cells hold the torch it pins (SGLang's: read from its "
                        "wheel); another torch is installed into the cell's environment by pip, from the wheel "
                        "folders and indexes pip is configured with")
    p.add_argument("--device", type=_devices, default=(DEFAULT_DEVICE,), metavar="D1,D2,...",
                   help="emulated GPUs, the table's columns (default sm120)")
    add_option(p, _served_option(
        "model_path", f"with --model: the served model's config folder, or a packaged model: {packaged_listing()}; "
                      "every cell's framework builds it (the folder must be readable where the cells run)"))
    p.add_argument("--mode", choices=(*MODE_CHOICES, MAP_MODE), default=None,
                   help="as for trace (default both: the fullgraph verdict and every break; with --model: map, "
                        "the only mode it takes)")
    p.add_argument("--bisect", nargs=2, metavar=("AXIS", "LOW..HIGH"),
                   help="a framework's axis (sglang) or flashinfer: the first release in the range whose verdict "
                        "differs from LOW's, on the first device, the other axis at one version")
    how = p.add_argument_group("how to run")
    how.add_argument("--executor", choices=tuple(EXECUTORS), default="local",
                     help="where the cells run: local (worker processes here) or ray (each job a Ray task on a "
                          "running Ray cluster, which builds or reuses the environment on its node; pip install "
                          "'graphbreak-doctor[ray]'; docs/matrix.md)")
    how.add_argument("--address", metavar="ADDR",
                     help="with --executor ray: the cluster (host:port; default RAY_ADDRESS, then the cluster "
                          "running on this machine)")
    how.add_argument("--jobs", type=int_at_least(1), default=None, metavar="N",
                     help="worker processes at once, locally (default: the CPU count; Ray runs as many as the "
                          "cluster has CPUs)")
    how.add_argument("--timeout", type=int_at_least(1), default=DEFAULT_TIMEOUT, metavar="SECONDS",
                     help=f"per worker (default {DEFAULT_TIMEOUT}); a cell past it is 'timed out'")
    add_memory_option(how)
    how.add_argument("--envs", metavar="DIR",
                     help="where the environments are kept (default ~/.cache/graphbreak-doctor/matrix-envs)")
    how.add_argument("--find-links", action="append", default=[], metavar="DIR",
                     help="a folder of wheels to install from besides the package index (repeatable; "
                          "pip's configured find-links are read too)")
    add_output_options(p, MATRIX, default_on=("matrix-json", "matrix-html"), stem="matrix-<layer or model>-",
                       what="<impl>")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    p.set_defaults(func=run)


def _matrix_providers() -> list:
    return [p for p in providers() if p.in_matrix]


def _chosen_selections(args: argparse.Namespace) -> tuple:
    """The selections of the matrix provider whose selecting option was given; () for GLM-5's own options."""
    from graphbreak_doctor.cli.targets import values

    chosen = [p for p in _matrix_providers() if p.selected(values(args, p))]
    if not chosen:
        return ()
    provider = chosen[0]
    if args.impl or registry.given(vars(args)) or args.mode == MAP_MODE:
        raise UsageError(f"{' / '.join(provider.selecting_flags())}: --impl, a framework's launch arguments and "
                         "--mode map are for GLM-5's layers and model")
    try:
        return tuple(provider.select(values(args, provider)))
    except ValueError as e:
        raise UsageError(str(e)) from e


def _framework(args: argparse.Namespace):
    """The framework of the matrix's framework axis: the one whose releases,
    launch arguments, --impl or bisection the command line names (at most
    one); None where none is named."""
    named: dict = {}
    for framework in registry.FRAMEWORKS:
        flags = [flag for flag, given in ((f"--{framework.name}", getattr(args, _axis_dest(framework), None)),
                                          (framework.option, getattr(args, framework.option_name, None) is not None),
                                          (f"--impl {args.impl}", args.impl == framework.name),
                                          (f"--bisect {framework.name}", bool(args.bisect)
                                           and args.bisect[0] == framework.name)) if given]
        if flags:
            named[framework] = flags[0]
    if len(named) > 1:
        (a, flag_a), (b, flag_b) = list(named.items())[:2]
        raise UsageError(f"{flag_a} and {flag_b} name two frameworks, and a matrix has one framework axis: "
                         f"leave out {flag_a} or {flag_b}")
    return next(iter(named), None)


def _plan(args: argparse.Namespace):
    from graphbreak_doctor.matrix.envs import installed
    from graphbreak_doctor.model.matrix import MODEL, TARGET
    from graphbreak_doctor.matrix.run import Plan
    from graphbreak_doctor.targets.serving import PROVIDER, REFERENCE

    framework = _framework(args)
    releases = tuple(getattr(args, _axis_dest(framework), None) or ()) if framework else ()
    bisecting = framework is not None and bool(args.bisect) and args.bisect[0] == framework.name
    flashinfer = args.flashinfer or (installed("flashinfer-python"),)
    chosen = _chosen_selections(args)
    if chosen:
        if not flashinfer[0]:
            raise UsageError("give --flashinfer V1,... (FlashInfer is not installed here)")
        return Plan(TARGET, chosen[0].provider, framework.name if framework else "", releases, tuple(flashinfer),
                    tuple(args.device), args.mode or "both", chosen=chosen, torch=tuple(args.torch or ()),
                    pins=_pins(args, framework, releases))
    if args.model:
        if args.impl == REFERENCE:
            raise UsageError("--model maps a framework's own model forward: leave out --impl reference")
        if args.mode not in (None, MAP_MODE):
            raise UsageError(f"--model runs the compile map (--mode map), not --mode {args.mode}")
        if args.bisect:
            raise UsageError("--bisect compares layer verdicts: give --layer, not --model")
    elif args.mode == MAP_MODE:
        raise UsageError("--mode map is the compile map of the model forward: give --model, not --layer")
    launched = framework is not None and getattr(args, framework.option_name) is not None
    if launched and not (releases or bisecting):
        raise UsageError(f"{framework.option} needs --{framework.name} V1,...: each release reads the launch "
                         "arguments itself")
    if framework is None and args.model:
        framework = _default_framework()
    impl = framework.name if args.model else args.impl or (framework.name if framework else REFERENCE)
    if impl == REFERENCE and framework is not None:
        raise UsageError(f"--impl reference traces without {framework.title}: leave out --{framework.name}")
    if framework is not None and not args.model and "block" not in framework.scopes:
        raise UsageError(f"--{framework.name} maps {framework.title}'s model forward only: give --model and "
                         "leave out --layer")
    try:
        launch, config = (framework.split_launch(getattr(args, framework.option_name), None)
                          if launched else ((), None))
    except ValueError as e:
        raise UsageError(str(e)) from e
    if config is not None and args.model_path is not None:
        raise UsageError(f"--model-path names the model, and {framework.option}' model another: give one")
    config = args.model_path if args.model_path is not None else config
    if config is not None and not args.model:
        raise UsageError("--model-path is the model whose forward --model maps: give --model, not --layer")
    if args.model:  # the model's folder read now: a bad one is one line before any environment is built
        try:
            PROVIDER.matrix_model_selections(framework, config, launch)
        except ValueError as e:
            raise UsageError(str(e)) from e
    if framework is not None and not releases and not bisecting:
        releases = (framework.release(),)
        if not releases[0]:
            raise UsageError(f"{'--model' if args.model else f'--impl {impl}'}: give --{framework.name} V1,... "
                             f"({framework.title} is not installed here)")
    if not flashinfer[0]:
        raise UsageError("give --flashinfer V1,... (FlashInfer is not installed here)")
    return Plan(MODEL if args.model else args.layer, impl, framework.name if framework else "", releases,
                tuple(flashinfer), tuple(args.device), MAP_MODE if args.model else args.mode or "both", launch,
                config=config, torch=tuple(args.torch or ()), pins=_pins(args, framework, releases))


def _check_size(plan) -> None:
    """Refused before any environment is built: a matrix past MAX_CELLS."""
    from graphbreak_doctor.matrix.run import MAX_CELLS

    cells = plan.cell_count()
    if cells > MAX_CELLS:
        raise UsageError(f"the matrix would have {cells} cells, at most {MAX_CELLS}: give fewer releases, "
                         "devices or targets (or run it in parts)")


def _bisect_range(args: argparse.Namespace, plan) -> tuple[str, str, str]:
    from packaging.version import InvalidVersion, Version

    axis, text = args.bisect
    axes = [*(f.name for f in registry.FRAMEWORKS if "block" in f.scopes), "flashinfer"]
    if axis not in axes:
        raise UsageError(f"--bisect: the axis is {' or '.join(axes)}, not {axis!r}")
    low, sep, high = text.partition("..")
    try:
        ok = sep and Version(low) < Version(high)
    except InvalidVersion:
        ok = False
    if not ok:
        raise UsageError(f"--bisect {axis}: expected LOW..HIGH with LOW older than HIGH, got {text!r}")
    framework_axis = axis != "flashinfer"
    if plan.releases if framework_axis else args.flashinfer:
        raise UsageError(f"--bisect {axis} chooses the {axis} releases: leave out --{axis}")
    other = plan.flashinfer if framework_axis else plan.releases
    if len(other) > 1:
        raise UsageError(f"--bisect {axis}: give one version of the other axis, not {len(other)}")
    return axis, low, high


def run(args: argparse.Namespace) -> int:
    from graphbreak_doctor.cli.targets import memory_limit
    from graphbreak_doctor.matrix.envs import Environments, EnvError, default_envs_dir
    from graphbreak_doctor.matrix.executors import ExecutorError, Limits, executor
    from graphbreak_doctor.model.matrix import NOT_AVAILABLE
    from graphbreak_doctor.progress import Progress

    plan = _plan(args)
    _check_size(plan)
    bisecting = _bisect_range(args, plan) if args.bisect else None
    if args.executor != "ray" and args.address:
        raise UsageError("--address names a Ray cluster: give --executor ray")
    if args.executor == "ray" and args.jobs:
        raise UsageError("--jobs is for --executor local: Ray runs as many jobs at once as the cluster has CPUs")
    stem = f"matrix-{plan.layer}-{plan.impl}" + (f"-bisect-{bisecting[0]}" if bisecting else "")
    outputs = OutputSet.plan(args, (MATRIX,), [stem])
    progress = Progress()
    limits = Limits(jobs=args.jobs or os.cpu_count() or 1, timeout=args.timeout, memory=memory_limit(args))
    options = {"address": args.address, "envs": args.envs, "find_links": tuple(args.find_links)} \
        if args.executor == "ray" else {}
    try:
        environments = Environments(Path(args.envs) if args.envs else default_envs_dir(), args.find_links)
        with executor(args.executor, **options) as runner:
            progress(f"cells run on {runner.describe() or 'this machine'}")
            result = _run(args, plan, bisecting, environments, limits, progress, runner)
        result.log = runner.log
    except (EnvError, ExecutorError) as e:
        raise UsageError(str(e)) from e
    refused = [c for c in result.cells if c.status == NOT_AVAILABLE]
    if refused and len(refused) == len(result.cells):  # an argument no release takes: bad input
        framework = registry.of({"framework": refused[0].framework})
        raise UsageError(f"no release in the matrix takes the launch arguments: "
                         f"{framework.title if framework else refused[0].framework} {refused[0].release}: "
                         f"{refused[0].reason}")
    show(get("matrix").render(result))
    html = next((p.path for p in outputs.planned if p.renderer.name == "matrix-html"), None)
    if html is not None:
        result.reports_dir = f"{html.stem}-cells"
        _write_cell_reports(result, html.parent / result.reports_dir)
    outputs.write({stem: result})
    keep_logs(outputs, [stem], [result.log_text()], unkept="--json or --html keeps it")
    return EXIT_OK


def _run(args: argparse.Namespace, plan, bisecting, environments, limits, progress, runner):
    """The matrix, or the bisection's probes joined into one."""
    from dataclasses import replace

    from graphbreak_doctor.matrix.bisection import available_versions, bisect
    from graphbreak_doctor.matrix.run import run_cells

    if bisecting:
        axis, low, high = bisecting
        framework_axis = axis != "flashinfer"
        package = registry.get(axis).distribution or axis if framework_axis else "flashinfer-python"
        field, cell_field = ("releases", "release") if framework_axis else ("flashinfer", "flashinfer")
        versions = available_versions(package, low, high, environments.find_links)
        if len(versions) < 2 or versions[0] != low or versions[-1] != high:
            raise UsageError(f"--bisect {axis}: {low} and {high} must both be releases "
                             f"(found {', '.join(versions) or 'none'} in the range)")
        probed = []

        def probe(chosen: list[str]) -> dict:
            some = replace(plan, devices=plan.devices[:1], **{field: tuple(chosen)})
            result = run_cells(some, environments, limits, progress, runner)
            probed.append(result)
            return {v: [c for c in result.cells if getattr(c, cell_field) == v] for v in chosen}

        found = bisect(versions, probe, axis, width=limits.jobs)
        result = _joined(plan, probed, field, cell_field)
        result.bisection = found
        return result
    return run_cells(plan, environments, limits, progress, runner)


def _joined(plan, parts: list, field: str, cell_field: str):
    """One matrix of the bisection's probes, in version order (``field``:
    the bisected axis in the matrix, ``cell_field`` in a cell)."""
    from packaging.version import Version

    from graphbreak_doctor.matrix.run import neighbour_diffs

    first = parts[0]
    first.cells = sorted((c for r in parts for c in r.cells), key=lambda c: Version(getattr(c, cell_field)))
    setattr(first, field, sorted({getattr(c, cell_field) for c in first.cells}, key=Version))
    first.setup_seconds = sum(r.setup_seconds for r in parts)
    first.trace_seconds = sum(r.trace_seconds for r in parts)
    first.envs_built = sum(r.envs_built for r in parts)
    first.envs_reused = sum(r.envs_reused for r in parts)
    first.devices = list(plan.devices[:1])
    first.diffs = neighbour_diffs(first)
    return first


def _write_cell_reports(result, folder: Path) -> None:
    """Each cell's own report (the trace command's HTML), beside the page."""
    report = get("html")
    cells = [c for c in result.cells if c.findings is not None]
    if cells:
        folder.mkdir(parents=True, exist_ok=True)
    for c in cells:
        write_file(folder / f"{c.slug}.html", report.render(c.findings))
