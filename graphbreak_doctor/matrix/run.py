"""Running a matrix: environments first (built or found), then every cell's
traces in worker processes of those environments, in parallel; then the
diffs between neighbouring versions. And bisection over one axis.

A cell is (framework release, FlashInfer, device, layer) with the matrix's
launch arguments; each of its modes runs in a fresh worker process (jobs/)
with a time and an address-space limit. A cell whose environment cannot be
built, or whose release does not import here, is "not runnable" with the
reason; a release that refuses the launch arguments is "not available" with
the framework's own message; a crashed or timed-out one says so; the other
cells go on.

With ``--model`` a cell is the compile map of the framework's served model
forward (``trace --model --mode map``, or ``trace --<name>-args ... --mode
map``) in the cell's environment: how the release runs the prefill, the
regions each phase enters, its CUDA-graph map. Where the resolved launch
compiles the prefill forward on a path of its own
(``Framework.compiles_prefill_apart``: SGLang's tc_piecewise), a second
worker traces it as that path does (``--mode piecewise``) for its verdict.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import pairwise

from graphbreak_doctor.model import COMPLETE, FULLGRAPH_MODES, MAP_MODE
from graphbreak_doctor.jobs.job import MAP, TRACE, Job
from graphbreak_doctor.matrix.envs import Environments, EnvSpec
from graphbreak_doctor.matrix.executors import Limits, Work
from graphbreak_doctor.model.matrix import (
    CRASHED,
    FAILED,
    MODEL,
    NOT_AVAILABLE,
    NOT_RUNNABLE,
    OK,
    TARGET,
    TIMED_OUT,
    Cell,
    MatrixResult,
    NeighbourDiff,
)
from graphbreak_doctor.text import counted, one_line

# How large a matrix may be: each release an environment of its own (several
# GB, minutes to build), each cell a worker per mode. Past either bound the
# command is refused before any environment is built (docs/matrix.md).
MAX_RELEASES = 16  # per axis: a framework's (--sglang, --vllm, ...), --flashinfer, --torch
MAX_CELLS = 256  # environments x devices x targets


@dataclass(frozen=True)
class Plan:
    layer: str  # dense, moe or all; MODEL; TARGET (another provider's selections: chosen)
    impl: str  # reference or a framework's name; with TARGET, the provider's name
    framework: str  # the framework of the framework axis ("" for none: the reference layer)
    releases: tuple[str, ...]  # its releases (--<name> V1,...; () without a framework)
    flashinfer: tuple[str, ...]
    devices: tuple[str, ...]
    mode: str  # a trace mode; MAP_MODE with layer MODEL
    launch: tuple[str, ...] = ()  # the framework's launch arguments (--<name>-args), as its grammar split them
    # Another provider's selections (layer TARGET): what each cell traces.
    chosen: tuple = ()
    # The served model's config folder or packaged name (--model-path); None: GLM-5-NVFP4.
    config: str | None = None
    # torch releases (--torch): an axis of their own; () = this interpreter's torch in every cell.
    torch: tuple[str, ...] = ()
    # --torch release: (release, the torch it pins) -- each release's cells hold its own.
    pins: tuple[tuple[str, str], ...] = ()

    def specs(self) -> list[EnvSpec]:
        pinned = dict(self.pins)
        return [EnvSpec(self.framework if r else "", r, f, t) for r in (self.releases or ("",)) for f in self.flashinfer
                for t in ((pinned.get(r, ""),) if self.pins else self.torch or ("",))]

    def cell_count(self) -> int:
        return len(self.specs()) * len(self.devices) * len(self.selections())

    def kinds(self) -> list[str]:
        return ["dense", "moe"] if self.layer == "all" else [self.layer]

    def selections(self) -> list:
        from graphbreak_doctor.targets.serving import PROVIDER

        if self.chosen:
            return list(self.chosen)
        if self.layer == MODEL:
            return PROVIDER.matrix_model_selections(self.framework, self.config, self.launch)
        return PROVIDER.layer_selections(self.layer, self.impl, launch=self.launch)


def _refused(cell: Cell, usage) -> Cell:
    """A cell whose worker found bad input: the release refuses the launch
    arguments (the framework's own message, LaunchRefused), or it does not import or build here."""
    said = one_line(usage.refused)
    # Paths inside the cell's environment, from its site-packages on.
    cell.status, cell.reason = ((NOT_AVAILABLE, said) if said else
                                (NOT_RUNNABLE, re.sub(r"/\S*/site-packages/", "", one_line(usage.message))))
    return cell


def _first_failure(findings) -> tuple[str, str]:
    """(category, function) of the break fullgraph stopped at; a failure that
    names no break is the registry's fallback category (what no rule recognised)."""
    from graphbreak_doctor.analysis.categories import FALLBACK

    fg = findings.fullgraph
    first = next((b for b in findings.breaks if b.id == fg.break_id), None)
    frame = first.actionable_frame or first.site if first else fg.site
    return (first.category if first else FALLBACK), (frame.function if frame else "")


def _classify(cell: Cell, outcomes: list) -> Cell:
    """Fill ``cell`` from its modes' outcomes (jobs.Outcome, in mode order)."""
    from graphbreak_doctor.analysis.assemble import join

    usage = next((o for o in outcomes if o.usage), None)
    if usage is not None:
        return _refused(cell, usage)
    missing = next((o for o in outcomes if o.findings is None), None)
    if missing is not None:
        cell.status = TIMED_OUT if missing.status == TIMED_OUT else CRASHED
        cell.reason = one_line(missing.message)
        cell.findings = join([o.as_findings() for o in outcomes])
        return cell
    parts = [o.findings for o in outcomes]
    findings = join(parts)
    verdict = next((p for p in parts if set(p.modes) & set(FULLGRAPH_MODES)), None)
    stopped = next((p for p in parts if p is not verdict and (p.outcome != COMPLETE or p.fullgraph.crashed)), None)
    if stopped is not None and verdict is not None and verdict.outcome == COMPLETE and not verdict.fullgraph.crashed:
        # Dynamo crashed in another mode (explain) while fullgraph ran to its
        # verdict: the cell keeps the verdict and says what crashed.
        findings = dataclasses.replace(findings, fullgraph=dataclasses.replace(verdict.fullgraph))
        mode = "+".join(stopped.modes)
        error = one_line(stopped.fullgraph.error).removesuffix(f" (in {mode} mode)")
        cell.notes.append(f"{mode} mode crashed (the breaks before it are counted): {error}")
    cell.findings = findings
    cell.breaks = len(findings.breaks)
    fg = findings.fullgraph
    if fg.crashed:
        cell.status, cell.reason = CRASHED, one_line(fg.error)
    elif fg.ran and fg.ok:
        cell.status = OK
    elif fg.ran:
        cell.status = FAILED
        cell.category, cell.function = _first_failure(findings)
        cell.reason = one_line(fg.error)
    else:  # explain only: no fullgraph verdict; the breaks say it
        cell.status = OK if not findings.breaks else FAILED
        cell.category = findings.breaks[0].category if findings.breaks else ""
    return cell


def run_cells(plan: Plan, environments: Environments, limits: Limits, progress: Callable[[str], None],
              executor=None) -> MatrixResult:
    """Every cell of ``plan``, its jobs run by ``executor`` (executors/;
    default: the local one)."""
    from graphbreak_doctor.model import modes_for
    from graphbreak_doctor.jobs.output import log_sections
    from graphbreak_doctor.matrix.executors.local import Executor as Local
    from graphbreak_doctor.targets.registry import provider

    executor = executor or Local()
    held = (f"{', '.join(dict.fromkeys(t for _s, t in plan.pins))} (each release's own pin)" if plan.pins else
            ", ".join(plan.torch) if plan.torch else environments.torch)
    result = MatrixResult(layer=plan.layer, impl=plan.impl, mode=plan.mode, torch=held,
                          flashinfer=list(plan.flashinfer), devices=list(plan.devices), framework=plan.framework,
                          releases=list(plan.releases), launch=list(plan.launch))
    selections = plan.selections()
    if plan.layer == MODEL:
        served = selections[0].options.get("served")
        result.model = str(served.get("name", "")) if isinstance(served, dict) else ""
    modes = [MAP_MODE] if plan.layer == MODEL else modes_for(plan.mode)
    cells: list[Cell] = []
    work: list[Work] = []
    for spec in plan.specs():
        for device in plan.devices:
            for selection in selections:
                label = provider(selection.provider).cell_label(selection)
                cells.append(Cell(spec.flashinfer, device, label, status=OK, torch=spec.torch,
                                  framework=spec.framework, release=spec.release))
                work += [Work(spec, Job(MAP if m == MAP_MODE else TRACE, selection, device, m)) for m in modes]
    start = time.monotonic()
    ran = executor.run(work, environments, limits, progress)
    per_cell = [ran[i * len(modes):(i + 1) * len(modes)] for i in range(len(cells))]
    _tally_environments(result, ran)
    if plan.layer == MODEL:
        # The prefill forward where the resolved launch compiles it on a
        # path of its own: traced as that path compiles it (fullgraph).
        first = work[::len(modes)]
        compiled = [(found, Work(w.spec, replace(w.job, kind=TRACE, mode="piecewise")))
                    for found, w in zip(per_cell, first) if found[0].outcome and _prefill_compiled(found[0].outcome)]
        if compiled:
            progress(f"tracing the compiled prefill: {len(compiled)} worker processes")
        for (found, _w), prefill in zip(compiled, executor.run([w for _f, w in compiled], environments, limits, progress)):
            found.append(prefill)
    result.trace_seconds = max(0.0, time.monotonic() - start - result.setup_seconds)
    for cell, found in zip(cells, per_cell):
        env = found[0].env
        cell.setup_seconds, cell.environment = (env.seconds, env.notes) if env is not None else (0.0, [])
        cell.host = found[0].host
        cell.notes += [f"retried once: {r.retried}" for r in found if r.retried][:1]
        unbuilt = next((r.unbuilt for r in found if r.outcome is None), "")
        if unbuilt:
            cell.status, cell.reason = NOT_RUNNABLE, one_line(unbuilt)
            continue
        outcomes = [r.outcome for r in found]
        (_classify_map if plan.layer == MODEL else _classify)(cell, outcomes)
        cell.log = log_sections(outcomes)
    result.cells = cells
    result.executor = executor.describe()
    result.diffs = neighbour_diffs(result)
    return result


def _tally_environments(result: MatrixResult, ran: list) -> None:
    """Environments built and reused, and the time spent on them: one per
    (machine, release pair), counted as built where any job built it."""
    seen: dict = {}
    for r in ran:
        if r.env is not None:
            have = seen.get((r.host, r.env.spec))
            seen[(r.host, r.env.spec)] = r.env if have is None or r.env.built else have
    result.envs_built = sum(env.built for env in seen.values())
    result.envs_reused = len(seen) - result.envs_built
    result.setup_seconds = sum(env.seconds for env in seen.values())


def _launch(findings) -> dict:
    launch = findings.target.facts.get("launch") if findings is not None else None
    return launch if isinstance(launch, dict) else {}


def _prefill_compiled(outcome) -> bool:
    """Whether the launch the map resolved compiles the prefill forward
    (tc_piecewise), in a map that ran its phases (one that stopped before
    says the same of the prefill trace)."""
    from graphbreak_doctor.targets.frameworks import registry

    if outcome.findings is None or outcome.findings.fullgraph.crashed:
        return False
    launch = _launch(outcome.findings)
    framework = registry.of_launch(launch)
    return framework is not None and framework.compiles_prefill_apart(launch)


def _classify_map(cell: Cell, outcomes: list) -> Cell:
    """Fill a MODEL cell from its compile map's outcome, and the compiled
    prefill's trace where there is one."""
    from graphbreak_doctor.analysis.assemble import join
    from graphbreak_doctor.model import REGION_CRASHED, REGION_FAILS

    found, prefill = outcomes[0], (outcomes[1] if len(outcomes) > 1 else None)
    if found.usage:
        return _refused(cell, found)
    if found.findings is None:
        cell.status = TIMED_OUT if found.status == TIMED_OUT else CRASHED
        cell.reason = one_line(found.message)
        cell.findings = found.as_findings()
        return cell
    findings = found.findings
    from graphbreak_doctor.targets.frameworks import registry

    launch = _launch(findings)
    phases = launch.get("phases")
    framework = registry.of_launch(launch)
    # The prefill: the first phase the framework's server runs (SGLang's extend, vLLM's profile run).
    first = framework.phases[0] if framework is not None else ""
    cell.prefill = str(phases.get(first, "")) if isinstance(phases, dict) else ""
    # What the release said, as its framework says it.
    cell.said = [str(s) for s in framework.said_lines(launch)] if framework is not None else []
    if findings.fullgraph.crashed:  # the map stopped after the release resolved the launch
        cell.status, cell.reason, cell.findings = CRASHED, one_line(findings.fullgraph.error), findings
        return cell
    entered = [r for r in findings.regions if r.entered]
    cell.regions = [{"function": r.function, "phases": dict(r.calls), "options": dict(r.options),
                     "verdict": r.verdict} for r in entered]
    cell.registered = sum(not r.entered for r in findings.regions)
    cell.status = OK
    bad = next((r for r in entered if r.verdict in (REGION_FAILS, REGION_CRASHED)), None)
    if bad is not None:
        cell.status, cell.category = FAILED, f"region {bad.verdict}"
        cell.function, cell.reason = bad.function.rsplit(".", 1)[-1], one_line(bad.error)
    if prefill is not None:
        if prefill.usage:
            cell.prefill_fullgraph = f"not traced: {one_line(prefill.message)}"
        elif prefill.findings is None or prefill.findings.fullgraph.crashed:
            cell.prefill_fullgraph = f"{CRASHED}: {one_line(prefill.message or prefill.as_findings().fullgraph.error)}"
            cell.status, cell.reason = CRASHED, cell.prefill_fullgraph
        elif prefill.findings.fullgraph.ok:
            cell.prefill_fullgraph = OK
        else:
            cell.category, cell.function = _first_failure(prefill.findings)
            cell.prefill_fullgraph = f"fails: {cell.category}" + (f" ({cell.function})" if cell.function else "")
            cell.status, cell.reason = FAILED, one_line(prefill.findings.fullgraph.error)
        findings = join([findings, prefill.as_findings()])
    cell.findings = findings
    cell.breaks = len(findings.breaks)
    hazards = findings.cudagraphs.hazards() if findings.cudagraphs is not None else []
    if hazards and cell.status == OK:  # the server's CUDA-graph capture fails, or replays a frozen value
        first = hazards[0]
        cell.status, cell.category = FAILED, first.category
        cell.function = first.site.function if first.site else ""
        cell.reason = one_line(first.what)
    return cell


def _ops(cell: Cell) -> dict[str, str]:
    """The registered ops in the cell's graphs, with what each holds."""
    f = cell.findings
    names = {op for g in f.graphs for op in g.registered_ops}
    return {op: f.target.opaque_ops.get(op, "") for op in sorted(names)}


def _summary(a: Cell, b: Cell, d) -> str:
    parts = []
    if d.verdict:
        parts.append(f"fullgraph {d.verdict.a} -> {d.verdict.b}")
    # Which ops the graph calls is known only where a graph was captured (a
    # fullgraph-only trace that failed has none).
    both_captured = a.findings.graphs and b.findings.graphs
    ops_a, ops_b = (_ops(a), _ops(b)) if both_captured else ({}, {})
    for op in sorted(ops_b.keys() - ops_a.keys()):
        what = ops_b[op].split(":", 1)[0].split(" (", 1)[0]
        parts.append(f"{what + ' ' if what else ''}now behind {op}")
    for op in sorted(ops_a.keys() - ops_b.keys()):
        parts.append(f"{op} gone from the graph")
    if d.only_a or d.only_b or not parts:
        parts.append(f"{counted(len(d.only_a), 'break')} gone, {len(d.only_b)} new" if d.only_a or d.only_b else
                     f"no change (fullgraph {d.a.verdict}, {counted(len(d.both), 'break')} in both)")
    return "; ".join(parts)


def _map_summary(a: Cell, b: Cell) -> str:
    """Two compile maps: the prefill, the regions entered, their verdicts."""
    parts = []
    if (a.prefill, a.prefill_fullgraph) != (b.prefill, b.prefill_fullgraph):
        parts.append(f"prefill: {a.prefill or '?'}{' -> fullgraph ' + a.prefill_fullgraph if a.prefill_fullgraph else ''}"
                     f" => {b.prefill or '?'}{' -> fullgraph ' + b.prefill_fullgraph if b.prefill_fullgraph else ''}")
    if a.cudagraph_text() != b.cudagraph_text():
        parts.append(f"{a.cudagraph_text() or 'no CUDA-graph map'} => {b.cudagraph_text() or 'no CUDA-graph map'}")
    ra = {r["function"]: r["verdict"] for r in a.regions}
    rb = {r["function"]: r["verdict"] for r in b.regions}
    short = lambda name: name.rsplit(".", 1)[-1]  # noqa: E731
    new, gone = [f for f in rb if f not in ra], [f for f in ra if f not in rb]
    # A function that moved to another module (same name, one of each side).
    for f in list(new):
        (old, *more) = [g for g in gone if short(g) == short(f)] or [""]
        if not old or more or sum(short(n) == short(f) for n in new) > 1:
            continue
        shared = _shared_tail(old, f)
        change = f", {ra[old]} -> {rb[f]}" if ra[old] != rb[f] else ""
        parts.append(f"region {shared} moved ({old[:-len(shared) - 1]} -> {f[:-len(shared) - 1]}{change})")
        new.remove(f)
        gone.remove(old)
    parts += [f"region {short(f)} now entered ({rb[f] or 'not traced'})" for f in new]
    parts += [f"region {short(f)} no longer entered" for f in gone]
    parts += [f"region {short(f)}: {ra[f]} -> {rb[f]}" for f in ra if f in rb and ra[f] != rb[f]]
    return "; ".join(parts) or f"no change (the same prefill, {counted(len(ra), 'region')} entered, the same verdicts)"


def _shared_tail(a: str, b: str) -> str:
    """The dotted parts two qualified names end with ("Indexer._get_logits_head_gate")."""
    tail: list[str] = []
    for x, y in zip(reversed(a.split(".")), reversed(b.split("."))):
        if x != y:
            break
        tail.insert(0, x)
    return ".".join(tail)


def neighbour_diffs(result: MatrixResult) -> list[NeighbourDiff]:
    """The diff of every two cells next to each other on one axis (same
    device, layer and other axes), where both have findings."""
    from graphbreak_doctor.gate.diff import diff

    out = []
    torches = list(dict.fromkeys(c.torch for c in result.cells)) or [""]
    held = lambda torch: f", torch {torch}" if torch else ""  # noqa: E731
    framework, releases = result.framework, result.releases
    key = lambda release, flashinfer, torch: (  # noqa: E731  (Cell.row without its layer)
        framework if release else "", release, flashinfer, torch)
    pairs = []  # (axis, older, newer, the older cell's key, the newer's, what the others hold)
    for torch in torches:
        for older, newer in pairwise(releases):
            for flashinfer in result.flashinfer:
                pairs.append((framework, older, newer, key(older, flashinfer, torch), key(newer, flashinfer, torch),
                              f"flashinfer {flashinfer}" + held(torch)))
        for older, newer in pairwise(result.flashinfer):
            for release in releases or [""]:
                fixed = (f"{framework} {release}" if release else
                         "without a framework" if result.layer == TARGET else "reference")
                pairs.append(("flashinfer", older, newer, key(release, older, torch), key(release, newer, torch),
                              fixed + held(torch)))
    for older, newer in pairwise(t for t in torches if t):
        for release in releases or [""]:
            for flashinfer in result.flashinfer:
                fixed = (f"{framework} {release} + " if release else "") + f"flashinfer {flashinfer}"
                pairs.append(("torch", older, newer, key(release, flashinfer, older), key(release, flashinfer, newer),
                              fixed))
    for axis, older, newer, key_a, key_b, fixed in pairs:
        for device in result.devices:
            for layer in dict.fromkeys(c.layer for c in result.cells):
                a = result.at((*key_a[:3], layer, key_a[3]), device)
                b = result.at((*key_b[:3], layer, key_b[3]), device)
                if a is None or b is None or not (a.decided and b.decided):
                    continue
                d = diff(a.findings, b.findings, f"{axis} {older}", f"{axis} {newer}")
                summary = _map_summary(a, b) if layer == MODEL else _summary(a, b, d)
                out.append(NeighbourDiff(axis, older, newer, device, layer, fixed,
                                         f"{older} -> {newer}: {summary}", d.to_dict()))
    return out
