"""The partitions a runtime makes when some nodes fall back from an accelerator to its CPU.

A TFLite delegate takes the connected groups of nodes it supports, one delegate kernel each, and
leaves the rest to the interpreter's CPU kernels (LiteRT ``implementing_delegate.md`` L56-L62);
MACE's ``cpu+gpu`` runtime and CoreML's compute units split the same way.  Every switch between
units copies the tensors crossing it, so the planner reports how many partitions there are, the
share of nodes and of multiply-accumulates left on the accelerator, and the crossing tensors —
and prefers plans with fewer partitions (:func:`absorb_small_islands`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

ACCEL, CPU = "accelerator", "cpu"
#: An accelerator island between CPU nodes is cheaper on the CPU than the two unit switches around
#: it when it has at most this many nodes and computes little per element it copies: at most
#: ISLAND_MACS_PER_COPIED_ELEMENT multiply-accumulates per element of the tensors crossing it
#: (an elementwise op does 0.5: one per output, over one input and one output copied).
ISLAND_MAX_NODES = 3
ISLAND_MACS_PER_COPIED_ELEMENT = 4


@dataclass
class Partitions:
    hw: str
    fallback: str
    accelerator_partitions: int
    cpu_partitions: int
    nodes_on_accelerator: int
    nodes: int
    macs_on_accelerator: int
    macs: int
    #: tensors produced on one unit and read on the other, in graph order
    boundary: list[str] = field(default_factory=list)

    @property
    def node_share(self) -> float:
        return self.nodes_on_accelerator / self.nodes if self.nodes else 1.0

    @property
    def mac_share(self) -> float:
        return self.macs_on_accelerator / self.macs if self.macs else self.node_share

    def summary(self) -> str:
        return (f"{self.accelerator_partitions} {self.hw} partition(s) and {self.cpu_partitions} on "
                f"{self.fallback}; {self.node_share:.0%} of nodes and {self.mac_share:.0%} of MACs on {self.hw}; "
                f"{len(self.boundary)} tensor(s) cross units")

    def to_json(self) -> dict:
        return {**asdict(self), "node_share": round(self.node_share, 4), "mac_share": round(self.mac_share, 4),
                "summary": self.summary()}


def node_macs(node) -> int:
    """Multiply-accumulates of one node from its tensor shapes (0 when they are unknown):
    convolutions and matrix products count their reductions, everything else one per output
    element."""
    out = node.outputs[0] if node.outputs else None
    if out is None or out.shape is None or not all(isinstance(d, int) for d in out.shape):
        return 0
    elements = int(np.prod(out.shape, dtype=np.int64)) if out.shape else 1
    if node.op in ("Conv", "ConvTranspose") and len(node.inputs) > 1 and node.inputs[1].shape is not None:
        w = node.inputs[1].shape
        if all(isinstance(d, int) for d in w):
            group = int(node.attrs.get("group", 1))
            reduce = int(np.prod(w[2:], dtype=np.int64)) * (w[1] if node.op == "Conv" else w[0] // max(group, 1))
            return elements * reduce
    if node.op in ("MatMul", "Gemm") and node.inputs[0].shape:
        k = node.inputs[0].shape[-1] if not (node.op == "Gemm" and node.attrs.get("transA")) else node.inputs[0].shape[0]
        return elements * k if isinstance(k, int) else 0
    return elements


def partition(graph, units: dict[str, str], hw: str, fallback: str) -> Partitions:
    """Partitions of ``graph``'s nodes given each node's unit (``units[node.name]``: ACCEL or
    CPU; nodes not listed — moved to post-processing — are left out)."""
    nodes = [n for n in graph.nodes if n.name in units]
    producer = {t.name: n for n in nodes for t in n.outputs}
    parent = {n.name: n.name for n in nodes}

    def root(name):
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    boundary: list[str] = []
    for n in nodes:
        for t in n.inputs:
            p = producer.get(t.name)
            if p is None:
                continue
            if units[p.name] == units[n.name]:
                parent[root(p.name)] = root(n.name)
            elif t.name not in boundary:
                boundary.append(t.name)
    groups = {root(n.name): units[n.name] for n in nodes}
    macs = {n.name: node_macs(n) for n in nodes}
    on_accel = [n for n in nodes if units[n.name] == ACCEL]
    return Partitions(hw, fallback, sum(u == ACCEL for u in groups.values()), sum(u == CPU for u in groups.values()),
                      len(on_accel), len(nodes), sum(macs[n.name] for n in on_accel), sum(macs.values()), boundary)


def absorb_small_islands(graph, units: dict[str, str], runs_on_fallback) -> set[str]:
    """Move accelerator islands that only sit between CPU nodes (every producer and reader
    outside the island on the CPU), are small and compute little per copied element (see
    :data:`ISLAND_MACS_PER_COPIED_ELEMENT`) to the CPU when the CPU runs all of them: the two
    unit switches cost more than they save.  Updates ``units``; returns the nodes moved."""
    nodes = [n for n in graph.nodes if n.name in units]
    readers: dict[str, list] = {}
    producer = {}
    for n in nodes:
        for t in n.inputs:
            readers.setdefault(t.name, []).append(n)
        for t in n.outputs:
            producer[t.name] = n
    graph_io = {t.name for t in list(graph.inputs) + list(graph.outputs)}
    seen: set[str] = set()
    moved: set[str] = set()
    for start in nodes:
        if units[start.name] != ACCEL or start.name in seen:
            continue
        island, todo, touches = [], [start], set()
        seen.add(start.name)
        while todo:
            n = todo.pop()
            island.append(n)
            linked = [producer.get(t.name) for t in n.inputs] + [r for t in n.outputs for r in readers.get(t.name, [])]
            touches |= {t.name for t in list(n.inputs) + list(n.outputs) if t.name in graph_io}
            for m in linked:
                if m is None:
                    continue
                if units[m.name] == ACCEL and m.name not in seen:
                    seen.add(m.name)
                    todo.append(m)
                elif units[m.name] == CPU:
                    touches.add("cpu")
        if touches != {"cpu"} or len(island) > ISLAND_MAX_NODES:
            continue  # touches a model input/output, or no CPU neighbour: no switch saved
        if sum(node_macs(n) for n in island) > ISLAND_MACS_PER_COPIED_ELEMENT * _crossing_elements(island):
            continue
        if all(runs_on_fallback(n) for n in island):
            for n in island:
                units[n.name] = CPU
                moved.add(n.name)
    return moved


def _crossing_elements(island) -> int:
    """Elements of the non-constant tensors entering or leaving ``island`` (0 when unknown)."""
    inside = {n.name for n in island}
    produced = {t.name for n in island for t in n.outputs}
    total = 0
    for n in island:
        for t in n.inputs:
            if t.name not in produced and not hasattr(t, "values"):
                total += _elements(t)
        for t in n.outputs:
            if any(r.name not in inside for r in t.outputs) or not t.outputs:
                total += _elements(t)
    return total


def _elements(t) -> int:
    shape = t.shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        return 0
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def compiler_may_leave_on_cpu(graph, supported: set[str], matrix, framework: str, hw: str) -> list[dict]:
    """Supported nodes the hardware's compiler may still leave on the CPU (the matrix's
    ``may_stay_on_cpu``: Coral's RESIZE_BILINEAR, mapped or not "depending on input/output size"),
    each with how many nodes follow it: a compiler that maps ops up to the first one it does not
    map leaves those to the CPU too.  Named so the plan shows the partition before a device does."""
    found = []
    for node in graph.nodes:
        if node.name not in supported or (spec := matrix.may_stay_on_cpu(framework, node.op, hw)) is None:
            continue
        shapes = [_shape_text(node.inputs[0]), _shape_text(node.outputs[0])]
        target = matrix.target_op(framework, node.op) or node.op
        if " / " in target:  # RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR: the one the mode picks
            target = target.split(" / ")[0 if node.attrs.get("mode") in ("linear", b"linear") else -1]
        found.append({"node": node.name, "op": node.op, "target": target,
                      "shapes": " -> ".join(shapes), "after": len(_downstream(node)),
                      "why": spec["why"], "source": spec["source"]})
    return found


def _shape_text(tensor) -> str:
    shape = getattr(tensor, "shape", None)
    return "x".join(str(d) for d in shape) if shape is not None else "?"


def _downstream(node) -> set[str]:
    """Names of the nodes that read, directly or not, what ``node`` writes."""
    seen: set[str] = set()
    todo = list(node.outputs)
    while todo:
        for reader in todo.pop().outputs:
            if reader.name not in seen:
                seen.add(reader.name)
                todo.extend(reader.outputs)
    return seen


def compiler_summary(entry: dict) -> str:
    """One line for the console and the report page."""
    after = f", and the {entry['after']} node(s) after it" if entry["after"] else ""
    return (f"{entry['node']} ({entry['op']} {entry['shapes']}): the compiler may leave it on the CPU{after} "
            f"(\"{entry['why']}\", {entry['source']})")
