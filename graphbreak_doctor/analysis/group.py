"""Root causes: group breaks under the deepest function they share that someone can change.

The call graph (frames.call_graph) is built from every break's stack (nodes
are functions, edges are calls). A break is filed under the deepest changeable
function on its stack that it shares with another break -- e.g. FlashInfer's
``get_fp4_quantization_module`` explains several breaks: fix one function,
remove N breaks. A break that shares nothing but the traced function itself
stands under its own actionable frame.

The causes are ranked by who can change them: the user's own code first,
then third-party libraries, then the standard library and torch, so the
first cause a reader sees is one they can act on (see :func:`owner_rank`).
"""

from __future__ import annotations

from graphbreak_doctor.frames import INFRASTRUCTURE, call_graph, node_id, package_of
from graphbreak_doctor.model import Break, Frame, RootCause


def root_causes(breaks: list[Break]) -> list[RootCause]:
    graph = call_graph(breaks)
    roots = {n for n in graph if graph.in_degree(n) == 0}
    groups: dict[str, list[Break]] = {}
    frames: dict[str, Frame] = {}
    for b in breaks:
        if b.caused_by:
            continue  # filed with the break it follows from
        chosen = None
        for frame in reversed(b.stack):
            node = node_id(frame)
            if not graph.nodes[node]["changeable"] or node in roots:
                continue
            if len(graph.nodes[node]["breaks"] - _follow_ups(breaks)) > 1:
                chosen = frame
                break
        if chosen is None:
            chosen = b.actionable_frame or (b.stack[-1] if b.stack else b.site)
        key = node_id(chosen)
        frames.setdefault(key, chosen)
        groups.setdefault(key, []).append(b)
    for b in breaks:
        if b.caused_by:
            for key, members in groups.items():
                if any(m.id == b.caused_by for m in members):
                    members.append(b)
                    break
    causes = [
        RootCause(
            frame=frames[key],
            package=package_of(frames[key].file),
            break_ids=[m.id for m in members],
            categories=sorted({m.category for m in members}),
        )
        for key, members in groups.items()
    ]
    # The user's own code first, then third-party libraries, then the standard
    # library and torch (a frame there is a cause only when no report of its
    # break kept a frame someone can change); in each, most breaks first;
    # ties keep first-seen order.
    own = _own_packages(breaks)
    return sorted(causes, key=lambda c: (owner_rank(c.package, own), -len(c.break_ids)))


USER, LIBRARY, INFRA = 0, 1, 2


def owner_rank(package: str, own: set[str]) -> int:
    """Who changes code of ``package``: USER (the traced code's own package),
    LIBRARY (a third-party package), INFRA (the standard library, torch)."""
    if package in INFRASTRUCTURE:
        return INFRA
    return USER if package in own else LIBRARY


def _own_packages(breaks: list[Break]) -> set[str]:
    """The traced code's packages: those of the outermost frames of the breaks."""
    return {p for b in breaks if b.stack for p in [package_of(b.stack[0].file)] if p not in INFRASTRUCTURE}


def _follow_ups(breaks: list[Break]) -> set[str]:
    return {b.id for b in breaks if b.caused_by}
