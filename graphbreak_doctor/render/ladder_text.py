"""The ladder as terminal text: numbered rungs, then the verdict."""

from __future__ import annotations

from graphbreak_doctor.model import Findings, FixOutcome
from graphbreak_doctor.model.cache_facts import cache_note, not_kept_note
from graphbreak_doctor.render.renderer import FINDINGS, Renderer
from graphbreak_doctor.render.terminal import describe_device, describe_target
from graphbreak_doctor.text import lines_of


def render(findings: Findings) -> str:
    env = findings.environment
    versions = ", ".join(f"{k} {v}" for k, v in env.items() if v and k != "python")
    lines = [f"target: {describe_target(findings)}", f"device: {describe_device(findings)}; {versions}"]
    if cache_note(findings.cache) or not_kept_note(findings.cache):
        lines.append(f"cache: {cache_note(findings.cache) or not_kept_note(findings.cache)}")
    fg = findings.fullgraph
    before = "OK" if fg.ok else f"FAILED -- {fg.error}"
    lines.append(f"fullgraph as it is: {before}")
    outcome = findings.fix or FixOutcome()
    lines.append(f"fix ladder ({', '.join(findings.modes) or 'fullgraph'}, at most {outcome.max_steps} steps):")
    if not findings.ladder:
        lines.append("  (no rung: nothing to fix)" if fg.ok else "  (no rung)")
    for rung in findings.ladder:
        lines.append(f"  {rung.step}. [{rung.category}] {rung.gb_type} at {rung.site}")
        lines.append(f"     recipe: {rung.recipe} -> {rung.result.upper()}")
        lines.append(f"     change: {rung.where}")
        # A gutter, so no line starts as a command of its own.
        for patch_line in lines_of(rung.patch):
            lines.append(f"       | {patch_line}")
        if rung.detail:
            lines.append(f"     {rung.detail}")
    kept = outcome.recipes
    if outcome.ok:
        how = f"after {len(kept)} change(s): {', '.join(kept)}" if kept else "with no change"
        lines.append(f"verdict: fullgraph OK {how}")
        if outcome.outputs_equal_eager is not None:
            lines.append("outputs: the fixed, compiled target gives the same outputs as eager"
                         if outcome.outputs_equal_eager else "outputs: DIFFER from eager -- do not trust these fixes")
    else:
        lines.append(f"verdict: fullgraph still FAILS -- {outcome.stopped}")
        if kept:
            lines.append(f"changes that helped on the way: {', '.join(kept)}")
    lines.append("(every change was made in this process only and undone afterwards; nothing on disk was modified)")
    if outcome.patch is not None:
        lines += written_patch(outcome)
    return "\n".join(lines) + "\n"


def written_patch(outcome: FixOutcome) -> list[str]:
    """What --write-patch wrote, and whether it held in a fresh process."""
    p = outcome.patch
    head = (f"patch written to {p.folder}: {p.diff}, graphbreak_doctor_patch/, sitecustomize.py, README.txt"
            if p.verified else f"patch not written to {p.folder}: it does not hold in a fresh process")
    lines = [head,
             f"  proven on {', '.join(f'{d} {v}' for d, v in sorted(p.versions.items())) or 'the files as they are'}",
             f"  {p.summary}"]
    if p.sizes:
        lines.append(f"  the server's sizes ({len(p.sizes)}, {p.sizes_from}): {', '.join(map(str, p.sizes))}")
    for c in outcome.changes:
        what = (f"torch._dynamo.config.{c.function}" + ("" if c.module == "torch._dynamo.config" else
                                                         f" (set where {c.module} is imported)")
                if c.kind == "config" else f"{c.module}.{c.function}")
        lines.append(f"  change {c.step} ({c.recipe}): " + (f"{what}; holds for {c.holds}"
                                                             if c.block else f"not written: {c.why_not}"))
    if p.verified:
        lines.append(f"  load it: PYTHONPATH={p.folder} <the server's command>")
    return lines


RENDERER = Renderer("ladder", FINDINGS, render, help="the fix ladder as terminal text")
