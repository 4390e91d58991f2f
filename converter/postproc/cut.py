"""Find where to cut a model so that its trailing unsupported nodes run as post-processing.

Definitions (what :func:`find_cut` computes):

* A node is *movable* when the code generators cover it (``program.lower_node``) and every
  node downstream of it is movable too: post-processing runs after the device finished, so
  nothing kept on the device may consume a moved value.  The movable nodes are the graph's
  "trailing region".
* The *moved set* S contains every ``must_move`` node, is closed under successors (a consumer
  of a moved value is moved) and lies inside the trailing region.  If a ``must_move`` node is
  not movable the cut is refused, naming either the node's own op or the first downstream node
  that cannot move (the node is then not "trailing").
* The *boundary* of S is the set of non-constant tensors the cut model must output: tensors
  computed on the device (or graph inputs) that a moved node reads, plus original outputs that
  are still computed on the device (passed through).  Constants read by moved nodes are
  embedded in the generated code and never cross the boundary.
* Among all valid S, the cut minimizes, in this order: the number of boundary tensors (many
  runtimes expose few outputs), then the total number of boundary elements (bytes copied out of
  the runtime), then the number of moved nodes (keep work on the accelerator).  So a cheap legal
  node is moved as well when that removes a boundary tensor, e.g. ``a -> Relu -> b``,
  ``a -> Sigmoid -> c`` feeding a moved ``Mul(b', c)``: moving Relu and Sigmoid leaves the one
  boundary tensor ``a`` instead of ``b`` and ``c``.

The minimization is an exact minimum s-t cut (project-selection formulation): node vertices on
the sink side are moved; each tensor gets a vertex whose incoming edge (capacity: its weight)
is cut exactly when its producer is kept and some consumer is moved; infinite edges from each
consumer back to its producer enforce closure under successors.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import onnx
import onnx_graphsurgeon as gs

from ..ir.graph import is_constant, to_graph
from .program import lower_node, node_label


@dataclass
class Cut:
    ok: bool
    reason: str = ""
    #: moved node names, in graph (topological) order
    moved_nodes: list[str] = field(default_factory=list)
    #: the cut model's outputs: boundary tensors in graph order
    boundary: list[str] = field(default_factory=list)
    #: the boundary tensors that are original outputs computed on the device
    passthrough: list[str] = field(default_factory=list)


def find_cut(model: onnx.ModelProto | gs.Graph, must_move: set[str], region=None) -> Cut:
    """``region``: :func:`trailing_region` of the same, unchanged graph, when the caller asks
    for several cuts of it (it does not depend on ``must_move``)."""
    graph = model if isinstance(model, gs.Graph) else to_graph(model)
    nodes = list(graph.nodes)
    by_name = {n.name: n for n in nodes}
    unknown = sorted(set(must_move) - set(by_name))
    if unknown:
        return Cut(False, f"no node named {', '.join(repr(u) for u in unknown)} in the model")

    movable, blocker = region or _trailing_region(graph)
    for node in nodes:
        if node.name not in must_move or node.name in movable:
            continue
        stop, why = blocker[node.name]
        if stop is node:
            return Cut(False, f"cannot move {why}")
        return Cut(False, f"{node_label(node)} is not trailing: its output reaches {node_label(stop)}, "
                          f"which cannot run in post-processing ({why.split(': ', 1)[-1]})")

    moved = _min_cut(graph, movable, set(must_move)) if must_move else set()
    return _describe(graph, moved)


def trailing_region(graph: gs.Graph) -> tuple[set[str], dict[str, tuple[gs.Node, str]]]:
    return _trailing_region(graph)


def _trailing_region(graph: gs.Graph) -> tuple[set[str], dict[str, tuple[gs.Node, str]]]:
    """Movable node names, and for the others the first node (itself or downstream) that blocks."""
    movable: set[str] = set()
    blocker: dict[str, tuple[gs.Node, str]] = {}
    for node in reversed(graph.nodes):  # consumers before producers (graph is toposorted)
        lowered = lower_node(node)
        if isinstance(lowered, str):
            blocker[node.name] = (node, lowered)
            continue
        blocked = None
        for out in node.outputs:
            for consumer in out.outputs:
                if consumer.name not in movable:
                    blocked = blocker.get(consumer.name)
                    break
            if blocked:
                break
        if blocked:
            blocker[node.name] = blocked
        else:
            movable.add(node.name)
    return movable, blocker


def _numel(tensor: gs.Tensor) -> int:
    count = 1
    for d in tensor.shape or ():
        count *= d if isinstance(d, int) and d > 0 else 1
    return count


def _min_cut(graph: gs.Graph, movable: set[str], must_move: set[str]) -> set[str]:
    source, sink = ("src",), ("snk",)
    outputs = {t.name for t in graph.outputs}
    tensors = []
    for tensor in graph.tensors().values():
        if is_constant(tensor):
            continue
        producer = tensor.inputs[0].name if tensor.inputs else None
        consumers = sorted({c.name for c in tensor.outputs if c.name in movable})
        if producer in movable or consumers:
            tensors.append((tensor.name, producer, consumers, _numel(tensor)))
    tensors.sort(key=lambda t: t[0])

    per_elem = len(movable) + 1
    per_tensor = (sum(t[3] for t in tensors) + 1) * per_elem
    finite = sum(per_tensor + n * per_elem for *_, n in tensors) + len(movable)
    inf = finite + 1

    flow = _FlowNetwork()
    for name, producer, consumers, n in tensors:
        t_vertex = ("t", name)
        p_vertex = ("n", producer) if producer in movable else source
        flow.add(p_vertex, t_vertex, per_tensor + n * per_elem)
        for consumer in consumers:
            flow.add(t_vertex, ("n", consumer), inf)
            if producer in movable:
                flow.add(("n", consumer), ("n", producer), inf)  # closure under successors
        if name in outputs:
            flow.add(t_vertex, sink, inf)
    for name in sorted(movable):
        flow.add(source, ("n", name), 1)  # moving a node costs a little
        if name in must_move:
            flow.add(("n", name), sink, inf)
    kept_side = flow.min_cut_source_side(source, sink)
    return {name for name in movable if ("n", name) not in kept_side}


class _FlowNetwork:
    """Edmonds-Karp max flow on integer capacities (the trailing region is small)."""

    def __init__(self):
        self.cap: dict = {}
        self.adj: dict = {}

    def add(self, u, v, c: int) -> None:
        self.cap[(u, v)] = self.cap.get((u, v), 0) + c
        self.cap.setdefault((v, u), 0)
        self.adj.setdefault(u, []).append(v)
        self.adj.setdefault(v, []).append(u)

    def _bfs(self, source, sink=None) -> dict:
        parent = {source: None}
        queue = deque([source])
        while queue:
            u = queue.popleft()
            for v in self.adj.get(u, ()):
                if v not in parent and self.cap[(u, v)] > 0:
                    parent[v] = u
                    if v == sink:
                        return parent
                    queue.append(v)
        return parent

    def min_cut_source_side(self, source, sink) -> set:
        while True:
            parent = self._bfs(source, sink)
            if sink not in parent:
                return set(parent)
            path, v = [], sink
            while parent[v] is not None:
                path.append((parent[v], v))
                v = parent[v]
            bottleneck = min(self.cap[e] for e in path)
            for u, v in path:
                self.cap[(u, v)] -= bottleneck
                self.cap[(v, u)] += bottleneck


def _describe(graph: gs.Graph, moved: set[str]) -> Cut:
    outputs = {t.name for t in graph.outputs}
    ordered: list[gs.Tensor] = list(graph.inputs)
    for node in graph.nodes:
        ordered.extend(t for t in node.outputs if t.name)
    boundary, passthrough, seen = [], [], set()
    for tensor in ordered:
        if tensor.name in seen or is_constant(tensor):
            continue
        seen.add(tensor.name)
        produced_on_device = not tensor.inputs or tensor.inputs[0].name not in moved
        read_by_moved = any(c.name in moved for c in tensor.outputs)
        if produced_on_device and (read_by_moved or tensor.name in outputs):
            boundary.append(tensor.name)
            if tensor.name in outputs:
                passthrough.append(tensor.name)
    moved_nodes = [n.name for n in graph.nodes if n.name in moved]
    return Cut(True, "", moved_nodes, boundary, passthrough)
