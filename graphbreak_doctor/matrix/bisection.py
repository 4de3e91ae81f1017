"""Bisection over one axis of the matrix: the releases of a range, as the
package index and the local wheel folders list them, and the first of them
whose verdict differs from the range's first, probed O(log n) times (the
probes run as matrix cells: matrix/run.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from graphbreak_doctor.matrix.envs import EnvError, version_key
from graphbreak_doctor.model.matrix import Bisection, Cell
from graphbreak_doctor.text import one_line


def available_versions(package: str, low: str, high: str, find_links: list[str]) -> list[str]:
    """The releases of ``package`` from ``low`` to ``high`` (inclusive, no
    pre-releases), as the package index and the local wheel folders list them."""
    links = [a for link in find_links for a in ("--find-links", link)]
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package, *links], check=False,
                         capture_output=True, text=True, stdin=subprocess.DEVNULL)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("Available versions:")), None)
    if out.returncode != 0 or line is None:
        raise EnvError(f"cannot list the releases of {package}: {one_line(out.stderr) or 'pip index versions failed'}")
    lo, hi = version_key(low), version_key(high)
    found = {version_key(v.strip()): v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()}
    return [found[v] for v in sorted(found) if lo <= v <= hi and not v.is_prerelease and not v.is_devrelease]


def _probe_order(mid: int, lo: int, hi: int) -> list[int]:
    """Indices strictly between lo and hi, nearest to mid first."""
    order = []
    for step in range(hi - lo):
        for i in (mid + step, mid - step) if step else (mid,):
            if lo < i < hi and i not in order:
                order.append(i)
    return order


def bisect(versions: list[str], probe: Callable[[list[str]], dict[str, list[Cell]]], axis: str,
           width: int = 1) -> Bisection:
    """The first release in ``versions`` (ordered) whose verdict differs from
    the first one's, probing O(log n) of them. ``probe`` runs the cells of the
    releases it is given (one per layer each; the two ends at once, in
    parallel). A release without a verdict is stepped over: its nearest
    neighbours are probed next, ``width`` at once."""
    b = Bisection(axis, versions[0], versions[-1], candidates=len(versions))
    seen: dict[int, list[Cell]] = {}

    def probe_once(*indices: int) -> None:
        todo = [i for i in indices if i not in seen]
        if not todo:
            return
        found = probe([versions[i] for i in todo])
        for i in todo:
            seen[i] = found[versions[i]]
            b.probes.append((versions[i], _verdict(seen[i])))

    def decided(i: int) -> bool:
        probe_once(i)
        return all(c.decided for c in seen[i])

    probe_once(0, len(versions) - 1)
    for end in (0, len(versions) - 1):
        if not decided(end):
            cell = next(c for c in seen[end] if not c.decided)
            b.line = f"bisect {axis}: {versions[end]} (an end of the range) is {cell.status}: {cell.reason}"
            return b
    lo, hi = 0, len(versions) - 1
    if _verdict(seen[lo]) == _verdict(seen[hi]):
        b.line = (f"bisect {axis}: the verdict does not change from {versions[lo]} to {versions[hi]} "
                  f"({_verdict(seen[lo])}; {len(b.probes)} releases probed)")
        return b
    while hi - lo > 1:
        order = _probe_order((lo + hi) // 2, lo, hi)
        probe_at = None
        for n, i in enumerate(order):
            if n and i not in seen:  # the middle gave no verdict: its neighbours, several at once
                probe_once(*[j for j in order[n:] if j not in seen][:max(1, width)])
            if decided(i):
                probe_at = i
                break
        if probe_at is None:
            b.line = (f"bisect {axis}: the verdict changes after {versions[lo]}, by {versions[hi]} "
                      f"({_verdict(seen[lo])} -> {_verdict(seen[hi])}); the releases between did not run to a "
                      f"verdict here ({len(b.probes)} releases probed)")
            b.first = versions[hi]
            return b
        if _verdict(seen[probe_at]) == _verdict(seen[lo]):
            lo = probe_at
        else:
            hi = probe_at
    b.first = versions[hi]
    skipped = [v for i, v in enumerate(versions) if i in seen and not decided(i)]
    b.line = (f"bisect {axis}: {versions[hi]} is the first release where the verdict changes "
              f"({versions[lo]}: {_verdict(seen[lo])} -> {versions[hi]}: {_verdict(seen[hi])}); "
              f"{len(b.probes)} of {len(versions)} releases probed"
              + (f", stepped over {', '.join(skipped)} (no verdict)" if skipped else ""))
    return b


def _verdict(cells: list[Cell]) -> str:
    return ", ".join(f"{c.layer} {c.verdict()}" if len(cells) > 1 else c.verdict() for c in cells)
