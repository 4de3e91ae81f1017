"""The gate's checks: which breaks count, and which criteria they fail.

Each target is checked once per traced mode (a JUnit testcase each). Checks
are independent of each other, over the breaks that *count*: those whose
actionable frame belongs to a selected package (``--only-packages`` /
``--ignore-packages``); breaks with no actionable frame belong to ``torch``.

- require-fullgraph: the fullgraph (or piecewise) capture must succeed;
- max-breaks N: at most N distinct breaks seen in the mode;
- fail-on CATS: no break of these categories;
- baseline: no break whose key is missing from the baseline (keys have no
  line numbers); entries that were not seen any more are reported, not failed.

A target captured into CUDA graphs (``--cudagraph``) has one more check:
it fails when the capture did not finish, or on a capture hazard (a
``cudagraph-*`` finding) whose key -- category, package, function, what ran
-- the baseline lacks; without a baseline every hazard fails it.

A target run at the server's sizes (``--sizes``) has one more check: the run
fails when a call hits Dynamo's recompile limit (or the run did not finish).

A target traced with its compile map (``--model``) has one more check per
torch.compile region its phases entered, each traced with the options its
code gave it: a region whose trace crashed, or that asks for
``fullgraph=True`` and fails, fails; its breaks count like a mode's
(max-breaks, fail-on). Against a baseline that lists the target's regions, a
region it does not list (new) fails, and so does one whose verdict is worse
than the accepted one (ok < graph breaks < fails < crashed) or that breaks
more often.

With no criterion at all the gate is ``max-breaks 0``: the target has no
graph break.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphbreak_doctor.analysis.categories import CATEGORIES
from graphbreak_doctor.model import (CUDAGRAPH_MODE, FULLGRAPH_MODES, MAP_MODE, REGION_CRASHED, REGION_FAILS,
                                     SIZES_MODE, Break, CaseResult, CheckFailure, Findings, Region, TargetResult)
from graphbreak_doctor.frames import at
from graphbreak_doctor.gate.baseline import REGION_ORDER, TargetBaseline, hazard_key
from graphbreak_doctor.gate.located import locate
from graphbreak_doctor.model.cudagraph import CudaGraphMap
from graphbreak_doctor.model.located import RECOMPILE_LIMIT
from graphbreak_doctor.text import counted as _n



@dataclass
class Policy:
    require_fullgraph: bool = False
    max_breaks: int | None = None
    fail_on: tuple[str, ...] = ()
    only_packages: tuple[str, ...] = ()
    ignore_packages: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [c for c in self.fail_on if c not in CATEGORIES]
        if unknown:
            raise ValueError(f"unknown break categor{'y' if len(unknown) == 1 else 'ies'} "
                             f"{', '.join(map(repr, unknown))} (choose from {', '.join(CATEGORIES)})")
        if self.max_breaks is not None and self.max_breaks < 0:
            raise ValueError(f"max breaks must be 0 or more, got {self.max_breaks}")
        if self.only_packages and self.ignore_packages:
            overlap = set(self.only_packages) & set(self.ignore_packages)
            if overlap:
                raise ValueError(f"package(s) {', '.join(sorted(overlap))} both selected and ignored")

    def counts_package(self, package: str) -> bool:
        if self.only_packages and package not in self.only_packages:
            return False
        return package not in self.ignore_packages

    def counts(self, b: Break) -> bool:
        return self.counts_package(b.package)

    def effective_max_breaks(self, has_baseline: bool) -> int | None:
        if self.max_breaks is None and not (self.require_fullgraph or self.fail_on or has_baseline):
            return 0
        return self.max_breaks


def evaluate(name: str, findings: Findings, policy: Policy, baseline: TargetBaseline | None = None) -> TargetResult:
    counted = [b for b in findings.breaks if policy.counts(b)]
    result = TargetResult(name=name, findings=findings, cases=[], counted=counted, baseline_used=baseline is not None)
    known = baseline.keys() if baseline else set()
    if baseline is not None:
        result.new = [b for b in counted if b.key() not in known]
        seen = {b.key() for b in counted}
        traced = set(findings.modes)
        result.disappeared = [
            e for e in baseline.entries
            if e.key() not in seen and policy.counts_package(e.package) and (not e.modes or traced & set(e.modes))
        ]
    max_breaks = policy.effective_max_breaks(baseline is not None)
    crash = findings.incomplete()
    for region in findings.regions:
        if region.verdict:
            result.cases.append(_region_case(name, region, policy, max_breaks, baseline))
    if findings.sized is not None:  # --sizes: the server's recompile limit is a failure, whatever else is asked
        case = CaseResult(target=name, mode=SIZES_MODE, counted=[])
        if findings.sized.verdict:
            case.failures.append(CheckFailure(RECOMPILE_LIMIT, findings.sized.verdict))
        result.cases.append(case)
    if findings.cudagraphs is not None:
        result.cases.append(_cudagraph_case(name, findings.cudagraphs, known if baseline is not None else set()))
    for mode in findings.modes:
        if mode == CUDAGRAPH_MODE:
            continue
        if mode == MAP_MODE:  # the map's checks are its regions', and a map that stopped fails
            if crash:
                result.cases.append(CaseResult(target=name, mode=mode, counted=[], crashed=crash))
            continue
        in_mode = [b for b in counted if mode in b.modes]
        case = CaseResult(target=name, mode=mode, counted=in_mode, crashed=crash)
        if policy.require_fullgraph and mode in FULLGRAPH_MODES and not findings.fullgraph.ok and not crash:
            first = findings.break_by_id(findings.fullgraph.break_id)
            case.failures.append(CheckFailure(
                "require-fullgraph", f"fullgraph capture failed: {findings.fullgraph.error or 'no verdict'}",
                [first] if first else [],
            ))
        if max_breaks is not None and len(in_mode) > max_breaks:
            case.failures.append(CheckFailure(
                "max-breaks", f"{_n(len(in_mode), 'break')} counted, at most {max_breaks} allowed", in_mode,
            ))
        if policy.fail_on:
            hit = [b for b in in_mode if b.category in policy.fail_on]
            if hit:
                cats = ", ".join(sorted({b.category for b in hit}))
                case.failures.append(CheckFailure("fail-on", f"{_n(len(hit), 'break')} in forbidden categories: {cats}", hit))
        if baseline is not None:
            new = [b for b in in_mode if b.key() not in known]
            if new:
                case.failures.append(CheckFailure("baseline", f"{_n(len(new), 'break')} not in the baseline", new))
        result.cases.append(case)
    result.located = locate(result)
    return result


def _cudagraph_case(name: str, found: CudaGraphMap, known: set) -> CaseResult:
    """The CUDA-graph map's check: it fails when the capture did not finish,
    or on a capture hazard the baseline does not hold (every hazard, without
    a baseline)."""
    case = CaseResult(target=name, mode=CUDAGRAPH_MODE, counted=[])
    stopped = [f"{p.phase} at size {c.size}: {c.error}" for p in found.phases for c in p.captures if c.error]
    if found.error or stopped:
        case.failures.append(CheckFailure("cudagraph", found.error or f"the capture did not finish: {stopped[0]}"))
    new = [h for h in found.hazards() if hazard_key(h) not in known]
    if new:
        first = new[0]
        where = f" at {at(first.site, portable=True)}" if first.site else ""
        case.failures.append(CheckFailure(
            "cudagraph-hazard", f"{_n(len(new), 'capture hazard')} not in the baseline; first: {first.category}"
                                f"{where}: {first.what}", hazards=new))
    return case


def _region_case(name: str, region: Region, policy: Policy, max_breaks: int | None,
                 baseline: TargetBaseline | None) -> CaseResult:
    """A compile-map region's check (a JUnit testcase: ``region <function>``)."""
    counted = [b for b in region.breaks if policy.counts(b)]
    case = CaseResult(target=name, mode=f"region {region.function}", counted=counted)
    if region.verdict == REGION_CRASHED:
        case.failures.append(CheckFailure("region", f"the region's trace crashed: {region.error or 'no reason'}"))
    elif region.verdict == REGION_FAILS:
        case.failures.append(CheckFailure(
            "region", f"fullgraph=True region fails (the server's compile stops here): {region.error or '?'}",
            counted[:1]))
    accepted = baseline.region(region.function) if baseline is not None and baseline.regions else None
    if baseline is not None and baseline.regions:
        if accepted is None:
            case.failures.append(CheckFailure("baseline", "a region the baseline does not list", counted))
        elif _rank(region.verdict) > _rank(accepted.verdict):
            case.failures.append(CheckFailure(
                "baseline", f"verdict {region.verdict!r}, worse than the baseline's {accepted.verdict!r}", counted))
        elif len(region.breaks) > accepted.breaks:
            case.failures.append(CheckFailure(
                "baseline", f"{_n(len(region.breaks), 'break')}, the baseline accepts {accepted.breaks}", counted))
        return case
    if max_breaks is not None and len(counted) > max_breaks:
        case.failures.append(CheckFailure(
            "max-breaks", f"{_n(len(counted), 'break')} counted, at most {max_breaks} allowed", counted))
    if policy.fail_on:
        hit = [b for b in counted if b.category in policy.fail_on]
        if hit:
            cats = ", ".join(sorted({b.category for b in hit}))
            case.failures.append(CheckFailure("fail-on", f"{_n(len(hit), 'break')} in forbidden categories: {cats}", hit))
    return case


def _rank(verdict: str) -> int:
    """How bad a region verdict is; one this version does not know is the worst."""
    return REGION_ORDER.index(verdict) if verdict in REGION_ORDER else len(REGION_ORDER)
