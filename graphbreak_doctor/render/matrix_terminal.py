"""The terminal form of a compatibility matrix: rows are versions, columns
devices; each cell says fullgraph OK, or the first failure's category, and
the number of breaks (a --model cell: its compile map in one line). Then the
diffs between neighbouring versions."""

from __future__ import annotations

from graphbreak_doctor.model.matrix import MODEL, TARGET, MatrixResult
from graphbreak_doctor.render.renderer import MATRIX, Renderer


def table(m: MatrixResult) -> list[list[str]]:
    """Header row, then one row per (versions, layer)."""
    layers = len({c.layer for c in m.cells}) > 1
    rows = [["versions" + (" / layer" if layers else ""), *m.devices]]
    for row in m.rows():
        first = next(c for c in m.cells if c.row == row)
        label = first.versions + (f" / {first.layer}" if layers else "")
        cells = [m.at(row, d) for d in m.devices]
        rows.append([label, *[c.text(c.torch or m.torch) if c else "-" for c in cells]])
    return rows


def title(m: MatrixResult) -> str:
    """What the matrix traced, in one line (the terminal's first, the page's lede)."""
    from graphbreak_doctor.targets.frameworks import registry

    launch = f"launch arguments: {' '.join(m.launch)}" if m.launch else "default launch arguments"
    if m.layer == MODEL:
        framework = registry.of({"framework": m.framework})
        return (f"{m.model or 'GLM-5'} model forward, {framework.title if framework else m.framework}'s compile map "
                f"({launch}), torch {m.torch}")
    if m.layer == TARGET:
        targets = ", ".join(dict.fromkeys(c.layer for c in m.cells))
        return f"{targets} ({m.impl}), mode {m.mode}, torch {m.torch}"
    framework = registry.of({"framework": m.impl})  # a matrix's impl: a framework's name, or the reference
    impl = f"{framework.title}'s own layer" if framework else "the reference layer (FlashInfer called directly)"
    return f"GLM-5 {m.layer} layer, {impl}, mode {m.mode}" + (f", {launch}" if m.launch else "") + f", torch {m.torch}"


def render(m: MatrixResult) -> str:
    lines = [f"matrix: {title(m)}"]
    rows = table(m)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for n, r in enumerate(rows):
        lines.append("  ".join(text.ljust(w) for text, w in zip(r, widths)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    if m.diffs:
        lines.append("between neighbouring versions:")
        lines.extend(f"  {d.summary} [{d.fixed}, {d.device}, {d.layer}]" for d in m.diffs)
    lines.append(f"set-up: {m.setup_seconds:.1f} s ({m.envs_built} environments built, {m.envs_reused} reused); "
                 f"traces: {m.trace_seconds:.1f} s" + (f" on {m.executor}" if m.executor else ""))
    if m.bisection is not None:
        lines.append(m.bisection.line)
    return "\n".join(lines) + "\n"


RENDERER = Renderer("matrix", MATRIX, render, help="the matrix as a terminal table")
