"""The fix ladder: trace, fix the first hard failure, re-trace, repeat.

Each rung takes the break fullgraph mode stops at, picks the first recipe of
its category's ladder (analysis/categories) that fits, makes the change in
this process (a PatchSet), and traces again with real Dynamo. A change that
does not remove its break is undone and recorded as rejected; so is one
that moves the first failure without progress (Progress.worse_than: new
breaks, no fewer breaks, less of the work in the graphs, or other outputs),
and every demonstration recipe (``torch.compiler.disable``), which is only
tried to show that fullgraph forbids what it does. The ladder ends when
fullgraph succeeds, no recipe applies, or the step limit is reached; every
patch is undone when the session exits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from graphbreak_doctor import recipes
from graphbreak_doctor.analysis import categories
from graphbreak_doctor.analysis.assemble import assemble, region_breaks, stopped_at
from graphbreak_doctor.capture import trace as capture
from graphbreak_doctor.fix import emit
from graphbreak_doctor.fix.outputs import same
from graphbreak_doctor.model import DEFAULT_FIX_STEPS as DEFAULT_STEPS
from graphbreak_doctor.model import (
    DEFAULT_DEVICE,
    FULLGRAPH_MODES,
    Break,
    Findings,
    FixOutcome,
    PatchChange,
    Rung,
    RungResult,
)
from graphbreak_doctor.patching import PatchSet, UndoLog
from graphbreak_doctor.recipes.common import break_site, has_fake_tensor
from graphbreak_doctor.targets import Target, TargetError



@dataclass
class LadderOutcome:
    ok: bool = False
    stopped: str = ""
    rungs: list[Rung] = field(default_factory=list)
    # Every fullgraph trace, in order (the first is the unpatched target).
    traces: list[capture.ModeResult] = field(default_factory=list)
    # Real tensors only: do the fixed, compiled outputs equal eager outputs?
    outputs_equal: bool | None = None
    # The break the ladder stopped at ("" when fullgraph succeeded or the re-trace crashed).
    stopped_break: str = ""
    # Each rung's change as data (None: a change the doctor cannot write), by step.
    changes: dict[int, recipes.Change | None] = field(default_factory=dict)

    @property
    def recipes(self) -> list[str]:
        """Recipes of the rungs that stayed applied, in order."""
        return [r.recipe for r in self.rungs if r.result != RungResult.REJECTED]


def _key(brk: Break) -> str:
    """A break as the rule compares states: its kind and the line Dynamo
    stopped at. Not its id, which names its callers too: Dynamo reports a
    second break at a line it already broke at as a repeat of the first
    (with the first one's callers), so a break behind another one at the
    same library line gets its own id only once the first is fixed."""
    return f"{brk.gb_type} at {break_site(brk)}"


@dataclass(frozen=True)
class Progress:
    """What a rung is judged by: the breaks an explain trace finds, as
    {kind and line: hits} (torch._dynamo.explain counts hits), and the
    operators the compiled graphs hold of those a plain call runs
    (capture/held_ops.py). ``breaks`` is None where the explain trace
    crashed (``why`` says what stopped it); held and total are None where
    the operators were not counted."""

    breaks: dict[str, int] | None
    held: int | None = None
    total: int | None = None
    why: str = ""
    # Real tensors: the compiled call gave eager's outputs (None: not compared).
    equal: bool | None = None

    @classmethod
    def of(cls, result: capture.ModeResult) -> "Progress":
        if result.crashed:
            return cls(None, why=result.error or "the explain trace crashed")
        # An explain trace Dynamo stopped (a failure breaks cannot get past)
        # still counts its breaks, the failure among them.
        breaks: dict[str, int] = {}
        for b in region_breaks(result):
            breaks[_key(b)] = breaks.get(_key(b), 0) + max(1, b.count)
        why = result.ops_error if result.ok else f"the explain trace stopped at {result.error}"
        return cls(breaks, result.ops_held, result.ops_total, why)

    @classmethod
    def captured(cls) -> "Progress":
        """A fullgraph capture: no break, and every operator in its graph."""
        return cls({}, 1, 1)

    def hits(self) -> int:
        return sum(self.breaks.values()) if self.breaks is not None else 0

    def share(self, digits: int = 0) -> str:
        if self.held is None or not self.total:
            return f"not counted ({self.why})" if self.why else "not counted"
        return f"{min(100.0, 100 * self.held / self.total):.{digits}f}%"

    def worse_than(self, before: "Progress", fixed: Break) -> str:
        """Why this state is no progress over ``before``, whose first failure
        was the break ``fixed`` ("" when it is): the compiled call gives
        eager's outputs (where compared), the breaks explain counts strictly
        fall, none is at a new line, and the graphs' share of the operators
        does not fall (code moved out of the graphs -- behind a disable, or
        left to Dynamo's eager fallback -- loses breaks without being fixed).
        Where either explain trace crashed, the first failure having moved is
        all there is to judge the breaks by."""
        if self.equal is False:
            return "the compiled outputs differ from eager outputs"
        if self.breaks is None or before.breaks is None:
            return ""
        # The fullgraph failure counts as a break before, even where the
        # explain trace does not reach it.
        old = dict(before.breaks)
        old.setdefault(_key(fixed), 1)
        new = [k for k in self.breaks if k not in old]
        if new:
            return f"it brings {len(new)} new break{'s' * (len(new) > 1)} ({'; '.join(new[:3])})"
        if self.hits() >= sum(old.values()):
            return f"the breaks an explain trace counts did not fall ({sum(old.values())} before, {self.hits()} after)"
        if (None not in (self.held, self.total, before.held, before.total) and self.total and before.total
                and self.held * before.total < before.held * self.total):
            # As many digits as show the fall (99.6% -> 99.5%, not 100% -> 100%).
            digits = next((d for d in range(4) if before.share(d) != self.share(d)), 4)
            return (f"the compiled graphs hold a smaller share of the operators ({before.share(digits)} -> "
                    f"{self.share(digits)})")
        return ""

    def since(self, before: "Progress") -> str:
        """How this state compares with ``before``, in words."""
        def count(p: Progress) -> str:
            return "?" if p.breaks is None else str(p.hits())

        return f"Breaks (explain) {count(before)} -> {count(self)}; operators in graphs {before.share()} -> {self.share()}"


class FixSession:
    """Climb the ladder for ``target``; patches stay applied until exit.

        with FixSession(target) as session:
            outcome = session.climb()
            compiled = torch.compile(target.fn, fullgraph=True)   # sees the fixes
        # every patch undone here
    """

    def __init__(self, target: Target, *, mode: str = "fullgraph", max_steps: int = DEFAULT_STEPS,
                 progress: Callable[[str], None] = lambda _m: None, sizes: list[int] | None = None,
                 at_size: Callable[[int], Target] | None = None) -> None:
        if mode not in FULLGRAPH_MODES:
            raise ValueError(f"the fix ladder climbs fullgraph failures; mode must be fullgraph or piecewise, got {mode!r}")
        self.target = target
        self.mode = mode
        self.max_steps = max_steps
        self.progress = progress
        self.kept: list[PatchSet] = []
        # The target's breaks and held operators with the kept changes (None
        # until the first change that is not a demonstration is tried), and
        # how the last kept change moved them.
        self._state: Progress | None = None
        self._said = ""
        # Real tensors: eager's outputs, which each measured state's compiled
        # call must give.
        self._real = False
        self._expected: Any = None
        self._at_size = at_size
        self._sized: dict[int, Target] = {}
        self.ctx = recipes.FixContext(warm_up=self._warm_up, trace=self._trace, sizes=list(sizes or ()),
                                      warm_up_at=self._warm_up_at if at_size is not None else None)

    # -------------------------------------------------------------- plumbing

    @staticmethod
    def _run(target: Target) -> None:
        with contextlib.redirect_stdout(sys.stderr):
            target.fn(*target.args, **target.kwargs)

    def _warm_up(self) -> None:
        self._run(self.target)

    def _warm_up_at(self, size: int) -> None:
        """The target once, eagerly, at one of the server's sizes (built at
        that size on first use, in this device)."""
        if size not in self._sized:
            self.progress(f"building the target at size {size} (a warm-up at one of the server's sizes)")
            self._sized[size] = self._at_size(size)
        self._run(self._sized[size])

    def _trace(self, mode: str | None = None) -> tuple[capture.ModeResult, Break | None]:
        mode = mode or self.mode
        with contextlib.redirect_stdout(sys.stderr):
            result = capture.trace(self.target, mode, decompile=False)
        if mode == "explain":
            return result, None
        return result, stopped_at(result)

    def _choose(self, brk: Break, tried: set) -> tuple[recipes.Recipe | None, recipes.Plan | None, list[str], str]:
        """The first recipe of the break's ladder that fits -- unless its change
        does not hold at every size the server uses and a later one's does
        (an opaque op with a fake over a warm-up keyed on the size). Returns
        (recipe, plan, why others did not fit, why it was preferred or "")."""
        reasons: list[str] = []
        names = list(categories.get(brk.category).ladder)
        for i, name in enumerate(names):
            found = self._plan(brk, name, tried, reasons)
            if found is None:
                continue
            recipe, plan = found
            if plan.change is not None and plan.change.every_size is False:
                for later in names[i + 1:]:
                    if recipes.get(later).demonstration:
                        continue
                    other = self._plan(brk, later, tried, reasons)
                    if other is not None and other[1].change is not None and other[1].change.every_size:
                        return other[0], other[1], reasons, f"preferred over {name} ({plan.change.holds})"
            return recipe, plan, reasons, ""
        return None, None, reasons, ""

    def _plan(self, brk: Break, name: str, tried: set, reasons: list[str]) -> tuple[recipes.Recipe, recipes.Plan] | None:
        recipe = recipes.get(name)
        if (brk.id, name) in tried or recipe.plan is None:
            return None
        try:
            return recipe, recipe.plan(brk, self.ctx)
        except recipes.NotApplicable as e:
            tried.add((brk.id, name))
            reasons.append(f"{name}: {e}")
            return None

    def _measure(self) -> Progress:
        """The breaks and held operators of the target as it is now, and --
        real tensors only -- whether the compiled call gave eager's outputs."""
        self.progress("counting breaks and held operators (explain)")
        equal: list[bool] = []
        # Counted as the fullgraph capture the ladder climbs towards captures:
        # it keeps scalar outputs and data-dependent sizes in the graph,
        # whatever these options say (docs/design.md), where explain mode
        # breaks at them. A change that leaves an op whose output size is
        # unbacked (a data-dependent custom op) brings no break there.
        with contextlib.redirect_stdout(sys.stderr), UndoLog() as options:
            options.set_option(torch._dynamo.config, "capture_scalar_outputs", True)
            options.set_option(torch._dynamo.config, "capture_dynamic_output_shape_ops", True)
            result = capture.trace(self.target, "explain", decompile=False, count_ops=True,
                                   on_output=(lambda got: equal.append(same(got, self._expected)))
                                   if self._real else None)
        return dataclasses.replace(Progress.of(result), equal=equal[0] if equal else None)

    def _regressed(self, brk: Break) -> str:
        """Why the change just made is no progress ("" when it is), measured
        against the state before it (Progress.worse_than). A change kept here
        becomes the state the next one is measured against."""
        after = self._measure()
        worse = after.worse_than(self._state, brk)
        if not worse:
            self._said = after.since(self._state)
            self._state = after
        return worse

    # ---------------------------------------------------------------- ladder

    def climb(self) -> LadderOutcome:
        out = LadderOutcome()
        self._real = not has_fake_tensor((self.target.args, self.target.kwargs))
        if self._real:
            with contextlib.redirect_stdout(sys.stderr):
                self._expected = self.target.fn(*self.target.args, **self.target.kwargs)
        self.progress("tracing (fullgraph)")
        result, brk = self._trace()
        out.traces.append(result)
        tried: set = set()
        # Recipes whose change could not be made here, and why, by break.
        not_applied: dict[str, list[str]] = {}
        while True:
            if result.ok:
                out.ok, out.stopped = True, "fullgraph ok"
                break
            if brk is None or result.crashed:
                out.stopped = f"the trace crashed (not a graph break): {result.error}"
                break
            if len(out.rungs) >= self.max_steps:
                out.stopped = f"step limit ({self.max_steps}) reached at the [{brk.category}] break"
                break
            recipe, plan, reasons, preferred = self._choose(brk, tried)
            if recipe is None or plan is None:
                reasons = not_applied.get(brk.id, []) + reasons
                why = "; ".join(reasons) if reasons else f"no recipe for the {brk.category} category"
                out.stopped = f"no recipe applies to the [{brk.category}] break at {break_site(brk)}: {why}"
                break
            if self._state is None and not recipe.demonstration:
                self._state = self._measure()
            patches = PatchSet(plan.recipe)
            # A patch is undone on every way out of this rung that does not keep it,
            # an unexpected exception (or Ctrl-C) included.
            try:
                try:
                    applied = plan.apply(patches)
                except recipes.NotApplicable as e:  # said when the ladder stops at this break
                    patches.undo()
                    tried.add((brk.id, plan.recipe))
                    not_applied.setdefault(brk.id, []).append(f"{plan.recipe}: {e}")
                    continue
                step = len(out.rungs) + 1
                self.progress(f"rung {step}: {plan.recipe} for the [{brk.category}] break; re-tracing")
                if preferred:
                    applied += f"; {preferred}"
                rung = Rung(step=step, break_id=brk.id, category=brk.category, gb_type=brk.gb_type, site=break_site(brk),
                            recipe=plan.recipe, patch=plan.patch, where=plan.where, result="", detail=applied,
                            culprit=plan.culprit, frame=brk.site)
                out.rungs.append(rung)
                out.changes[step] = plan.change
                try:
                    new, new_brk = self._trace()
                except TargetError as e:  # the patched target no longer runs eagerly
                    patches.undo()
                    tried.add((brk.id, plan.recipe))
                    rung.result, rung.detail = RungResult.REJECTED, f"{applied}. The patched target fails eagerly: {e}"
                    continue
                out.traces.append(new)
                if recipe.demonstration:
                    rung.result = RungResult.REJECTED
                    why = plan.judge(new, new_brk) if plan.judge else "A demonstration only; change undone."
                    rung.detail = f"{applied}. {why}"
                    patches.undo()
                    self.ctx.trap_done = f"rung {step}"
                    tried.add((brk.id, plan.recipe))
                    continue
                if new.ok:
                    # Compared here, not only at the end: a change whose
                    # capture gives other outputs is no fix, and is undone.
                    out.outputs_equal = self._check_outputs() if self._real else None
                    if out.outputs_equal is False:
                        out.outputs_equal = None
                        rung.result = RungResult.REJECTED
                        rung.detail = (f"{applied}. Fullgraph captures it, but the compiled outputs differ from "
                                       "eager outputs; change undone.")
                        patches.undo()
                        tried.add((brk.id, plan.recipe))
                        continue
                    rung.result = RungResult.FULLGRAPH_OK
                    rung.detail += f". {Progress.captured().since(self._state)}"
                    self.kept.append(patches)
                    result, brk = new, None
                    continue
                if new_brk is not None and new_brk.id == brk.id:
                    rung.result = RungResult.REJECTED
                    rung.detail = f"{applied}. The same break is still the first failure; change undone."
                    patches.undo()
                    tried.add((brk.id, plan.recipe))
                    continue
                if new_brk is not None and not new.crashed and (worse := self._regressed(brk)):
                    rung.result = RungResult.REJECTED
                    rung.detail = f"{applied}. The first failure moved, but {worse}; change undone."
                    patches.undo()
                    tried.add((brk.id, plan.recipe))
                    continue
                self.kept.append(patches)
                if new.crashed or new_brk is None:
                    rung.result = RungResult.REMOVED
                    rung.detail = f"{applied}. The break is gone, but the re-trace crashed: {new.error}"
                    result, brk = new, new_brk
                    continue
                rung.result = RungResult.NEXT_FAILURE
                rung.detail = (f"{applied}. {self._said}. "
                               f"Next: [{new_brk.category}] {new_brk.gb_type} at {break_site(new_brk)}")
                result, brk = new, new_brk
            except BaseException:
                if patches not in self.kept:
                    patches.undo()
                raise
        if not out.ok and brk is not None and not result.crashed:
            out.stopped_break = brk.id
        if out.ok and self._real:
            if not out.rungs:  # captured as it is: compared here
                out.outputs_equal = self._check_outputs()
            else:
                last = out.rungs[-1]
                last.detail += {True: "; compiled outputs equal eager outputs",
                                False: "; compiled outputs DIFFER from eager outputs",
                                None: "; the compiled run failed, outputs not compared"}[out.outputs_equal]
        return out

    def _check_outputs(self) -> bool | None:
        """Compiled outputs == eager outputs; None when the compiled run fails."""
        compiled = torch.compile(self.target.fn, fullgraph=True, backend="eager")
        try:
            with contextlib.redirect_stdout(sys.stderr):
                got = compiled(*self.target.args, **self.target.kwargs)
        except Exception as e:
            self.progress(f"the fixed target fails when compiled for real: {type(e).__name__}: {e}")
            return None
        finally:
            torch._dynamo.reset()
        return same(got, self._expected)

    # ------------------------------------------------------------- lifecycle

    def undo(self) -> None:
        errors = []
        while self.kept:
            try:
                self.kept.pop().undo()
            except BaseException as e:  # keep undoing; report the first failure
                errors.append(e)
        torch._dynamo.reset()
        if errors:
            raise errors[0]

    def __enter__(self) -> "FixSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.undo()


def written_changes(outcome: LadderOutcome) -> list[PatchChange]:
    """The changes the ladder kept, as source a written patch appends to each
    function's module (fix/emit.py); a change that cannot be written says why."""
    out = []
    for rung in outcome.rungs:
        if rung.result == RungResult.REJECTED:
            continue
        change = outcome.changes.get(rung.step)
        entry = PatchChange(step=rung.step, recipe=rung.recipe)
        if change is None:
            entry.why_not = f"{rung.recipe} is a change only a person can make here"
            out.append(entry)
            continue
        entry.kind, entry.module, entry.file, entry.holds, entry.every_size = (
            change.kind, change.module, change.file, change.holds, change.every_size)
        entry.function = f"{change.owner}.{change.function}" if change.owner else change.function
        try:
            entry.block = emit.block(change, rung.step, rung.recipe, f"the [{rung.category}] {rung.gb_type} at {rung.site}")
        except emit.NotWritable as e:
            entry.why_not = str(e)
        out.append(entry)
    return out


def fix(build: Callable[[UndoLog], Target], *, mode: str = "fullgraph", device: str = DEFAULT_DEVICE,
        max_steps: int = DEFAULT_STEPS, progress: Callable[[str], None] = lambda _m: None,
        sizes_of: Callable[[Any], list[int]] | None = None,
        at_size: Callable[[int], Callable[[UndoLog], Target] | None] | None = None,
        cold: bool = False) -> Findings:
    """Climb the fix ladder for the target ``build()`` returns (called inside the device).

    ``sizes_of(target.info)``: the sizes the server compiles the target at;
    ``at_size(n)``: how to build the target at size n (None: it has no size).
    Warm-ups then cover those sizes (recipes/hoist.py). The target is warmed
    up first as a trace warms it up (diagnose.warm_up), unless ``cold``.

    The findings' ``fullgraph`` verdict and ``breaks`` describe the target as
    it is (the unpatched first trace, plus every break met on the ladder);
    ``ladder`` holds the rungs and ``fix`` the outcome."""
    from graphbreak_doctor.diagnose import build_target, environment, inside_device, warm_up

    with inside_device(device) as (dev, log):
        target = build_target(build, log, mode, progress)
        warm = warm_up(target, dev, cold=cold, progress=progress)
        sizes = sizes_of(target.info) if sizes_of is not None else []

        builders = {n: at_size(n) for n in sizes} if at_size is not None else {}
        rebuilds = bool(builders) and all(b is not None for b in builders.values())

        def sized(n: int) -> Target:
            return build_target(builders[n], log, mode, lambda _m: None)

        with FixSession(target, mode=mode, max_steps=max_steps, progress=progress, sizes=sizes,
                        at_size=sized if rebuilds else None) as session:
            outcome = session.climb()
        # Every patch is undone here: the analysis sees the libraries as they are.
        progress("analysing")
        fixed = FixOutcome(ok=outcome.ok, stopped=outcome.stopped, recipes=outcome.recipes,
                           steps=len(outcome.rungs), max_steps=max_steps, outputs_equal_eager=outcome.outputs_equal,
                           changes=written_changes(outcome), stopped_break=outcome.stopped_break)
        findings = assemble(outcome.traces, target=target.info, environment=environment(), device=dev.describe(),
                            ladder=(outcome.rungs, fixed), excerpts=True)
        findings.warm_up = warm
        return findings
