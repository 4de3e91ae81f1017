"""The call-graph picture of the HTML report, laid out in Python.

Input is the networkx graph that root-cause grouping builds from the breaks'
stacks (``frames.call_graph``): nodes are functions, edges are calls,
``sites`` marks the functions where Dynamo stopped. No graphviz or other
binary: edges that close a cycle are set aside, nodes are layered by call
depth (longest path from a traced entry point, so a callee is below its
callers), ordered inside a layer by the barycenter heuristic to keep edges
short, and drawn as plain SVG by the ``callgraph.svg.j2`` template.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from graphbreak_doctor.model import Frame

if TYPE_CHECKING:  # imported when a picture is drawn: the command line starts without it
    import networkx as nx

NODE_W, NODE_H = 210, 38
GAP_X, GAP_Y = 24, 34
MARGIN = 12
LABEL_CHARS = 30  # what fits in NODE_W at the template's 11px monospace


@dataclass
class Node:
    key: str
    x: int
    y: int
    label: str
    # The function's file, base name only (a node stands for every line of it
    # on the stacks), and how many breaks Dynamo reported in it.
    detail: str
    title: str
    # "site" (Dynamo stopped here), "cause" (a root cause), "code" (changeable), "infra" (stdlib/torch).
    kind: str
    href: str = ""
    breaks: int = 0


@dataclass
class Edge:
    path: str
    to_site: bool = False
    upward: bool = False


@dataclass
class Picture:
    width: int
    height: int
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)


def _fit(text: str, chars: int = LABEL_CHARS) -> str:
    return text if len(text) <= chars else "…" + text[-(chars - 1):]


def _detail(file: str, sites: int) -> str:
    count = f" · {sites} break{'s' if sites != 1 else ''}" if sites else ""
    return _fit(file.rsplit("/", 1)[-1], LABEL_CHARS - len(count)) + count


def _short_label(frame: Frame) -> str:
    name = frame.qualname or frame.function
    # `outer.<locals>.inner` reads as `outer.inner`; keep the innermost parts.
    parts = [p for p in name.split(".") if p != "<locals>"]
    return _fit(".".join(parts[-2:]))


def back_edges(graph: nx.DiGraph) -> set[tuple[str, str]]:
    """Edges that close a cycle, found by depth-first search from the entry points.

    Stacks share frames that forward calls (Dynamo's polyfill
    ``getattr_and_trace`` sits between caller and callee at several depths),
    so the merged call graph has cycles. Drawing those edges upwards leaves a
    DAG to layer (the cycle-removal step of a Sugiyama layout)."""
    back: set[tuple[str, str]] = set()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    starts = [n for n in graph if graph.in_degree(n) == 0] + list(graph)
    for start in starts:
        if start in state:
            continue
        state[start] = 1
        stack = [(start, iter(graph.successors(start)))]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
            elif state.get(child) == 1:
                back.add((node, child))
            elif child not in state:
                state[child] = 1
                stack.append((child, iter(graph.successors(child))))
    return back


def _layers(graph: nx.DiGraph, back: set[tuple[str, str]]) -> list[list[str]]:
    """Nodes by call depth: the longest call chain from an entry point, so a
    callee is always below all its callers (back edges aside)."""
    import networkx as nx

    dag = nx.DiGraph()
    dag.add_nodes_from(graph)
    dag.add_edges_from(e for e in graph.edges if e not in back)
    depth: dict[str, int] = {}
    for node in nx.topological_sort(dag):
        depth[node] = max((depth[p] + 1 for p in dag.predecessors(node)), default=0)
    layers: list[list[str]] = [[] for _ in range(max(depth.values()) + 1)]
    for node in graph:  # graph order = first seen on a stack: a stable start order
        layers[depth[node]].append(node)
    return layers


def _barycenter_sweeps(graph: nx.DiGraph, layers: list[list[str]], sweeps: int = 4) -> None:
    """Reorder each layer by the mean position of its neighbours in the layer
    above (down sweeps) or below (up sweeps); ties keep the current order."""
    for sweep in range(sweeps):
        down = sweep % 2 == 0
        sequence = range(1, len(layers)) if down else range(len(layers) - 2, -1, -1)
        for i in sequence:
            ref = layers[i - 1] if down else layers[i + 1]
            pos = {n: k for k, n in enumerate(ref)}
            current = {n: k for k, n in enumerate(layers[i])}

            def weight(n: str) -> float:
                near = graph.predecessors(n) if down else graph.successors(n)
                ks = [pos[m] for m in near if m in pos]
                return sum(ks) / len(ks) if ks else current[n]

            layers[i].sort(key=lambda n: (weight(n), current[n]))


def layout(
    graph: nx.DiGraph,
    *,
    causes: dict[str, str] | None = None,
    break_href: str = "#break-{id}",
) -> Picture:
    """Positions for every node and edge of ``graph``.

    ``causes`` maps node keys of root-cause functions to their anchors in the
    report; a site node links to the card of the first break it ends.
    """
    causes = causes or {}
    if graph.number_of_nodes() == 0:
        return Picture(width=0, height=0)
    back = back_edges(graph)
    layers = _layers(graph, back)
    _barycenter_sweeps(graph, layers)
    widest = max(len(layer) for layer in layers)
    row_width = widest * NODE_W + (widest - 1) * GAP_X
    # Room on the right for edges drawn back up the picture.
    width = 2 * MARGIN + row_width + (GAP_X + 24 if back else 0)
    height = 2 * MARGIN + len(layers) * NODE_H + (len(layers) - 1) * GAP_Y
    xy: dict[str, tuple[int, int]] = {}
    nodes = []
    for depth, layer in enumerate(layers):
        row = len(layer) * NODE_W + (len(layer) - 1) * GAP_X
        left = MARGIN + (row_width - row) // 2
        y = MARGIN + depth * (NODE_H + GAP_Y)
        for k, key in enumerate(layer):
            x = left + k * (NODE_W + GAP_X)
            xy[key] = (x, y)
            data = graph.nodes[key]
            frame: Frame = data["frame"]
            sites = sorted(data.get("sites", ()))
            if sites:
                kind, href = "site", break_href.format(id=sites[0])
            elif key in causes:
                kind, href = "cause", causes[key]
            else:
                kind, href = ("code" if data.get("changeable") else "infra"), ""
            if key in causes and kind == "site":
                kind = "site cause"
            n_breaks = len(data.get("breaks", ()))
            nodes.append(Node(
                key=key,
                x=x,
                y=y,
                label=_short_label(frame),
                detail=_detail(frame.file, len(sites)),
                title=(
                    f"{frame.qualname or frame.function}\n{frame.file}:{frame.line}"
                    f"\non the stack of {n_breaks} break{'s' if n_breaks != 1 else ''}"
                    + (f"; Dynamo stopped here for {len(sites)}" if sites else "")
                ),
                kind=kind,
                href=href,
                breaks=len(sites),
            ))
    edges = []
    for a, b in graph.edges:
        (xa, ya), (xb, yb) = xy[a], xy[b]
        x1, y1 = xa + NODE_W // 2, ya + NODE_H
        x2, y2 = xb + NODE_W // 2, yb
        upward = (a, b) in back or y2 <= y1
        if upward:  # a call back up the picture: round the right-hand side
            x1, y1, x2, y2 = xa + NODE_W, ya + NODE_H // 2, xb + NODE_W, yb + NODE_H // 2
            bend = MARGIN + row_width + GAP_X  # beyond every node
            path = f"M{x1},{y1} C{bend},{y1} {bend},{y2} {x2},{y2}"
        else:
            mid = (y1 + y2) // 2
            path = f"M{x1},{y1} C{x1},{mid} {x2},{mid} {x2},{y2}"
        edges.append(Edge(path=path, to_site=bool(graph.nodes[b].get("sites")), upward=upward))
    return Picture(width=width, height=height, nodes=nodes, edges=edges)

