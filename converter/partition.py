"""The fallback remedy: which nodes an accelerator's runtime would leave to the CPU, and the
partitions that makes.

Some runtimes run a node their accelerator lacks on the CPU instead of refusing the model:

- TFLite's GPU and NNAPI delegates claim the nodes they support and leave the rest to the
  interpreter's CPU kernels (one delegate kernel per connected run of claimed nodes);
- MACE's deployment YAML can place ops on the CPU (a GPU/DSP/APU model with CPU ops);
- CoreML picks compute units per op itself (ML Programs on the GPU or the Neural Engine fall
  back to the CPU).

TNN's NPU networks (huawei_npu, rknpu, apple_npu) compile the whole model for the NPU and the
Edge TPU compiler maps one leading subgraph, so there a node cannot fall back: the remedy is
unavailable and :attr:`FallbackReport.reason` says why.

:func:`fallback_report` answers for one model on one framework x accelerator: the nodes that fall
back (the accelerator rejects them, the CPU runs them), the nodes neither runs, the partitions
(connected groups of nodes on one unit; every change of unit copies tensors across), the share
of nodes and of multiply-accumulates that stay on the accelerator, and the tensors crossing each
boundary.  Fewer partitions is better: each boundary is a synchronisation and a copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: framework -> accelerators whose runtime runs unsupported nodes on the CPU, and the CPU used.
FALLBACK_UNITS = {
    "tflite": {"gpu": "cpu", "nnapi": "cpu"},
    "mace": {"gpu": "cpu", "dsp": "cpu", "apu": "cpu"},
    "coreml": {"gpu": "cpu", "ane": "cpu"},
}
#: (framework, hw) -> why the remedy is unavailable there.
NO_FALLBACK = {
    ("tnn", "huawei_npu"): "TNN builds the whole network for the NPU (HiAI); a node it lacks cannot run elsewhere",
    ("tnn", "rknpu"): "TNN builds the whole network for the NPU (RKNN); a node it lacks cannot run elsewhere",
    ("tnn", "apple_npu"): "TNN builds the whole network for the NPU (CoreML); a node it lacks cannot run elsewhere",
    ("tflite", "edgetpu"): "the Edge TPU compiler maps one leading subgraph; a node it lacks in the middle "
                           "sends everything after it to the CPU, not that node alone",
}


@dataclass
class Partition:
    unit: str            # the accelerator's name or the fallback CPU's
    nodes: list[str]

    def to_dict(self) -> dict:
        return {"unit": self.unit, "nodes": len(self.nodes), "first": self.nodes[0], "last": self.nodes[-1]}


@dataclass
class FallbackReport:
    framework: str
    hw: str
    available: bool
    reason: str = ""
    fallback_unit: str = ""
    fallback_nodes: list[str] = field(default_factory=list)
    #: Nodes neither the accelerator nor the fallback CPU runs (they need another remedy).
    unplaced_nodes: list[str] = field(default_factory=list)
    partitions: list[Partition] = field(default_factory=list)
    node_share: float = 1.0   # of the nodes, on the accelerator
    mac_share: float = 1.0    # of the multiply-accumulates, on the accelerator
    #: tensor name -> (from unit, to unit, shape)
    boundary: dict[str, tuple[str, str, list]] = field(default_factory=dict)

    @property
    def needed(self) -> bool:
        return bool(self.fallback_nodes)

    def summary(self) -> str:
        if not self.available:
            return f"fallback to the CPU unavailable on {self.framework}/{self.hw}: {self.reason}"
        if not self.needed:
            return f"{self.framework}/{self.hw}: every placed node runs on the {self.hw}"
        return (f"{len(self.fallback_nodes)} node(s) fall back to the {self.fallback_unit}: "
                f"{len(self.partitions)} partition(s), {100 * self.node_share:.0f}% of nodes and "
                f"{100 * self.mac_share:.0f}% of MACs on the {self.hw}, {len(self.boundary)} boundary tensor(s)")

    def to_dict(self) -> dict:
        return {
            "available": self.available, "reason": self.reason, "fallback_unit": self.fallback_unit,
            "fallback_nodes": list(self.fallback_nodes), "unplaced_nodes": list(self.unplaced_nodes),
            "partitions": [p.to_dict() for p in self.partitions],
            "node_share": round(self.node_share, 4), "mac_share": round(self.mac_share, 4),
            "boundary": [{"tensor": t, "from": a, "to": b, "shape": s} for t, (a, b, s) in sorted(self.boundary.items())],
        }


def fallback_for_plan(model, plan, matrix=None) -> FallbackReport | None:
    """The fallback picture after planning: the nodes the plan makes run on the accelerator
    (supported, or rewritten / retrained into supported ops) stay there; the rest (custom,
    post-processing, unsupported) are the candidates to fall back to the CPU."""
    from .graph import to_graph  # noqa: PLC0415

    graph = to_graph(model)
    remedy = {e.node: e.remedy for e in plan.entries}
    stays = [_Placed(remedy.get(n.name, "supported") in ("supported", "rewrite", "retrain")) for n in graph.nodes]
    return fallback_report(model, plan.framework, plan.hw, matrix, graph=graph, verdicts=stays)


@dataclass(frozen=True)
class _Placed:
    supported: bool


def fallback_report(model, framework: str, hw: str, matrix=None, *, graph=None, verdicts=None) -> FallbackReport | None:
    """The fallback picture for ``model`` on ``framework`` x ``hw``; None on a CPU (nothing to fall
    back from).  ``verdicts``: per node, whether the accelerator runs it (anything with a
    ``supported`` attribute: the check's :class:`NodeVerdict`, or the plan's outcome)."""
    from .graph import to_graph  # noqa: PLC0415
    from .matrix import load_matrix  # noqa: PLC0415

    if (framework, hw) in NO_FALLBACK:
        return FallbackReport(framework, hw, available=False, reason=NO_FALLBACK[(framework, hw)])
    unit = FALLBACK_UNITS.get(framework, {}).get(hw)
    if unit is None:
        return None
    matrix = matrix or load_matrix()
    graph = graph if graph is not None else to_graph(model)
    nodes = list(graph.nodes)
    if verdicts is None:
        verdicts = [matrix.check_node(n, framework, hw) for n in nodes]
    place: dict[str, str] = {}
    report = FallbackReport(framework, hw, available=True, fallback_unit=unit)
    for node, verdict in zip(nodes, verdicts):
        if verdict.supported:
            place[node.name] = hw
        elif matrix.check_node(node, framework, unit).supported:
            place[node.name] = unit
            report.fallback_nodes.append(node.name)
        else:
            report.unplaced_nodes.append(node.name)
    placed = [n for n in nodes if n.name in place]
    report.partitions = _partitions(placed, place)
    macs = {n.name: node_macs(n) for n in placed}
    on_accel = [n for n in placed if place[n.name] == hw]
    report.node_share = len(on_accel) / len(placed) if placed else 1.0
    total = sum(macs.values())
    report.mac_share = sum(macs[n.name] for n in on_accel) / total if total else report.node_share
    producer = {t.name: n.name for n in placed for t in n.outputs}
    for n in placed:
        for t in n.inputs:
            src = producer.get(t.name)
            if src is not None and place[src] != place[n.name]:
                report.boundary[t.name] = (place[src], place[n.name], list(t.shape) if t.shape is not None else None)
    return report


def _partitions(nodes, place: dict[str, str]) -> list[Partition]:
    """Connected groups of same-unit nodes (a data edge between two nodes on one unit joins
    them), in graph order of their first node: what a delegate claims as one kernel."""
    parent = {n.name: n.name for n in nodes}

    def root(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    producer = {t.name: n.name for n in nodes for t in n.outputs}
    for n in nodes:
        for t in n.inputs:
            src = producer.get(t.name)
            if src is not None and place[src] == place[n.name]:
                parent[root(src)] = root(n.name)
    groups: dict[str, list[str]] = {}
    for n in nodes:
        groups.setdefault(root(n.name), []).append(n.name)
    return [Partition(place[members[0]], members) for members in groups.values()]


def node_macs(node) -> int:
    """Multiply-accumulates of one node: Conv/ConvTranspose, MatMul, Gemm; 0 for the rest (their
    cost is memory traffic, not arithmetic)."""
    def shape(t):
        return [int(d) for d in t.shape] if t.shape is not None and all(isinstance(d, (int, np.integer)) for d in t.shape) else None

    if node.op in ("Conv", "ConvTranspose") and len(node.inputs) > 1:
        # Conv: every output element sums Cin/group x kernel products (weight [Cout, Cin/g, k..]);
        # ConvTranspose: every input element scatters into Cout/group x kernel outputs
        # (weight [Cin, Cout/g, k..]).
        w = shape(node.inputs[1])
        side = shape(node.outputs[0] if node.op == "Conv" else node.inputs[0])
        if w is None or side is None:
            return 0
        return int(np.prod(side)) * int(np.prod(w[1:]))
    if node.op in ("MatMul", "Gemm"):
        a, out = shape(node.inputs[0]), shape(node.outputs[0])
        if a is None or out is None:
            return 0
        k = a[0] if node.op == "Gemm" and int(node.attrs.get("transA", 0)) else a[-1]
        return int(np.prod(out)) * k
    return 0
