"""The rule object, the registry, and the small toolkit a rule uses to emit its replacement.

A rule rewrites one node ``op`` into other ops.  It declares what it emits (``emits``) so the
planner can tell, without touching the graph, whether the result is legal on a target, and
its class:

* ``exact``       - the same function; only float rounding differs,
* ``approximate`` - a different function within ``error_bound`` (max abs error, documented),
* ``retrain``     - the architecture changes; weights are transferred as well as possible and
  must then be fitted (see :mod:`converter.legalize.rewrites.retrain`).

A rule is written as a function decorated with :func:`rule`; the function's docstring shows
the before/after graph, its body builds the replacement with a :class:`Rewrite`.  The last
node a rule emits writes into the original output tensors, so graph output names (and every
consumer) are preserved.

Locality (the contract that keeps planning and legalizing linear in the graph size).  The
planner tries a rule on a copy of the node's neighbourhood, not of the whole graph
(:mod:`converter.legalize.neighbourhood`), and reuses the outcome for every node whose neighbourhood
looks the same; the legalizer re-infers shapes only for the nodes a rewrite emits.  So a rule's
condition (``when``) and its rewrite may read only:

* the node: op, domain, attributes, its input and output tensors (shape, dtype, constant value,
  readers, producer), ``graph.opset`` and whether a tensor is a graph input or output;
* nodes at most ``CONTEXT_RADIUS`` tensor links away, and the reader lists of tensors of nodes
  at most ``CONTEXT_RADIUS - 1`` links away (a constant links nothing: a shared weight does not
  make its readers neighbours);
* constant values; but a large constant (see :func:`small_constant`: a weight, a bias, a
  per-channel scale) only through its shape and dtype: its values may flow into what the rule
  emits, but must not change which ops, attributes, shapes or small constants it emits.  (The
  legalizer checks every emitted node on the real graph anyway; a rule that broke this would
  get a worse chain or an unresolved node, never a wrong model.)

Nothing else: no scan of ``graph.nodes``, no names.  ``rw.emit`` leaves shapes to inference;
after a rewrite the emitted nodes' output shapes are inferred before anything checks them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...ir import light_model
from ...ir.graph import NameAllocator, constant_value, dtype_name, provenance_of

EXACT, APPROXIMATE, RETRAIN = "exact", "approximate", "retrain"
KINDS = (EXACT, APPROXIMATE, RETRAIN)
#: How far (tensor links) a rule or a matrix check may look from its node; see "Locality" above.
#: 3: the matrix's gelu_erf pattern reads the Erf's third neighbour (the final Mul).
CONTEXT_RADIUS = 3
#: Constants a rule may read by value (see "Locality" above): integer ones (shapes, pads, axes,
#: starts/ends) up to this many elements ...
SMALL_INT_CONSTANT = 64
#: ... and floating-point ones (scalars, scales, clip bounds) up to this many; larger float
#: constants (weights, biases, per-channel parameters) are told apart by shape and dtype only.
SMALL_FLOAT_CONSTANT = 8


def small_constant(dtype, size: int) -> bool:
    """Is a constant of this dtype and element count one a rule may read by value?"""
    limit = SMALL_FLOAT_CONSTANT if np.issubdtype(np.dtype(dtype), np.inexact) else SMALL_INT_CONSTANT
    return size <= limit


@dataclass(frozen=True)
class Rule:
    name: str
    op: str
    emits: tuple[str, ...]
    kind: str
    doc: str
    rewrite: Callable[[Rewrite, gs.Node], None] = field(repr=False)
    #: Extra condition on the node (beyond ``node.op == op``); returns None when the rule
    #: applies, else the reason why not (shown by the planner).
    when: Callable[[gs.Node, gs.Graph], str | None] | None = field(default=None, repr=False)
    cost: int = 1
    error_bound: float | None = None
    #: The existing nodes the rule rewrites along with ``node`` (a rank lowering rewrites the
    #: whole component of rank-5 tensors), None: ``node`` alone.  The legalizer never lets a rule
    #: rewrite a node planned for post-processing, a custom layer or the fallback unit.
    scope: Callable[[gs.Node, gs.Graph], Sequence[gs.Node]] | None = field(default=None, repr=False)

    def touches(self, node: gs.Node, graph: gs.Graph) -> list[gs.Node]:
        """``node`` and every other existing node applying the rule to it rewrites."""
        return [node] if self.scope is None else list(self.scope(node, graph))

    def why_not(self, node: gs.Node, graph: gs.Graph) -> str | None:
        if node.op != self.op:
            return f"matches {self.op}, not {node.op}"
        return None if self.when is None else self.when(node, graph)

    def matches(self, node: gs.Node, graph: gs.Graph) -> bool:
        return self.why_not(node, graph) is None

    @property
    def summary(self) -> str:
        return (self.doc or "").strip().splitlines()[0] if self.doc else self.name


REGISTRY: dict[str, Rule] = {}


def rule(op: str, emits: Sequence[str], kind: str = EXACT, *, when=None, cost: int | None = None,
         error_bound: float | None = None, name: str | None = None, scope=None):
    """Register the decorated ``fn(rw, node)`` as a rule; returns the :class:`Rule`."""
    if kind not in KINDS:
        raise ValueError(f"rule kind must be one of {KINDS}")
    if kind == APPROXIMATE and error_bound is None:
        raise ValueError("an approximate rule must state its error bound")

    def register(fn: Callable[[Rewrite, gs.Node], None]) -> Rule:
        # Cost: one per emitted node; retraining is a last resort, approximation nearly so.
        base = len(emits) if cost is None else cost
        penalty = {EXACT: 0, APPROXIMATE: 20, RETRAIN: 100}[kind]
        r = Rule(name or fn.__name__, op, tuple(emits), kind, fn.__doc__ or "", fn, when,
                 base + penalty, error_bound, scope)
        if r.name in REGISTRY:
            raise ValueError(f"duplicate rule name {r.name}")
        REGISTRY[r.name] = r
        return r

    return register


def rules_for(op: str) -> list[Rule]:
    return sorted((r for r in REGISTRY.values() if r.op == op), key=lambda r: (r.cost, r.name))


# ----------------------------------------------------------------------------------------------
# Conditions shared by several rules


def opset_of(graph: gs.Graph) -> int:
    return int(graph.opset or 17)


def const_input(node: gs.Node, i: int) -> np.ndarray | None:
    if i >= len(node.inputs) or node.inputs[i] is None or _is_empty(node.inputs[i]):
        return None
    return constant_value(node.inputs[i])


def _is_empty(t: gs.Tensor) -> bool:
    return isinstance(t, gs.Variable) and t.name == ""


def present(node: gs.Node, i: int) -> bool:
    """Input ``i`` is given (ONNX marks an omitted optional input with an empty name)."""
    return i < len(node.inputs) and not _is_empty(node.inputs[i])


def is_float(t: gs.Tensor) -> bool:
    name = dtype_name(t)
    return name in ("float32", "float16", "float64", "bfloat16")


def float_dtype(t: gs.Tensor) -> np.dtype:
    name = dtype_name(t)
    return np.dtype(name) if name in ("float32", "float16", "float64") else np.dtype(np.float32)


def used_outputs(node: gs.Node, graph: gs.Graph) -> list[int]:
    outs = set(map(id, graph.outputs))
    return [i for i, t in enumerate(node.outputs) if t.outputs or id(t) in outs]


def only_first_output_used(node: gs.Node, graph: gs.Graph) -> str | None:
    extra = [i for i in used_outputs(node, graph) if i > 0]
    return None if not extra else f"output {extra[0]} of {node.op} is used"


def all_of(*conds):
    def check(node, graph):
        for cond in conds:
            why = cond(node, graph)
            if why:
                return why
        return None

    return check


def float_input(node: gs.Node, graph: gs.Graph) -> str | None:
    return None if is_float(node.inputs[0]) else "input is not a float tensor"


def can_bypass(node: gs.Node, graph: gs.Graph) -> str | None:
    """A node whose output can be replaced by its input without renaming a graph output."""
    out = node.outputs[0]
    src = node.inputs[0]
    if any(t is out for t in graph.outputs):
        if not src.inputs or any(t is src for t in graph.outputs) or any(t is src for t in graph.inputs):
            return "output is a graph output fed directly by a graph input/output"
    return None


# ----------------------------------------------------------------------------------------------
# Building a replacement


class Rewrite:
    """One application of a rule to one node: makes constants and nodes, records provenance.

    ``outputs`` are the original node's output tensors; the rule's last node writes into them.
    """

    def __init__(self, graph: gs.Graph, node: gs.Node, rule_name: str, names: NameAllocator):
        self.graph, self.node, self.by, self.names = graph, node, rule_name, names
        self.outputs: list[gs.Tensor] = list(node.outputs)
        self.opset = opset_of(graph)
        self.dtype = float_dtype(node.inputs[0]) if node.inputs else np.dtype(np.float32)
        self.new_nodes: list[gs.Node] = []
        self._prov = provenance_of(graph)
        self._stem = node.name or node.op

    # -- tensors
    def const(self, base: str, value, dtype=None) -> gs.Constant:
        arr = np.asarray(value, dtype=self.dtype if dtype is None else dtype)
        return gs.Constant(self.names(f"{self._stem}/{base}"), np.ascontiguousarray(arr))

    def ints(self, base: str, values: Iterable[int]) -> gs.Constant:
        return self.const(base, np.asarray(list(values), dtype=np.int64), dtype=np.int64)

    def scalar(self, value) -> gs.Constant:
        return self.const("c", np.asarray(value))

    # -- nodes
    def emit(self, op: str, inputs: Sequence[gs.Tensor], attrs: dict | None = None,
             outputs: Sequence[gs.Tensor] | None = None, n_out: int = 1, dtype=None):
        """Add an ``op`` node; returns its output Variable (or list when ``n_out`` > 1)."""
        if outputs is None:
            outputs = [gs.Variable(self.names(f"{self._stem}/{op.lower()}"),
                                   dtype=self.dtype if dtype is None else dtype)
                       for _ in range(n_out)]
        node = gs.Node(op, name=self.names(f"{self._stem}/{self.by}/{op}"),
                       attrs={k: as_stored(v) for k, v in (attrs or {}).items()},
                       inputs=list(inputs), outputs=list(outputs))
        self.graph.nodes.append(node)
        self.new_nodes.append(node)
        self._prov.record_node(node.name, self.node.name, self.by)
        return outputs[0] if len(outputs) == 1 else list(outputs)

    def out(self, op: str, inputs: Sequence[gs.Tensor], attrs: dict | None = None):
        """The final node: writes into the original output tensor(s)."""
        return self.emit(op, inputs, attrs, outputs=self.outputs[:1])

    # -- opset-aware helpers (the attribute-vs-input switches between opsets)
    def reduce(self, op: str, x: gs.Tensor, axes: Sequence[int], keepdims: int = 1,
               outputs=None) -> gs.Tensor:
        axes_as_input = self.opset >= (13 if op == "ReduceSum" else 18)
        if axes_as_input:
            return self.emit(op, [x, self.ints("axes", axes)], {"keepdims": keepdims}, outputs=outputs)
        return self.emit(op, [x], {"axes": list(axes), "keepdims": keepdims}, outputs=outputs)

    def clip(self, x: gs.Tensor, lo: float | None, hi: float | None, outputs=None) -> gs.Tensor:
        if self.opset >= 11:
            ins = [x, self.scalar(lo) if lo is not None else gs.Variable.empty(),
                   self.scalar(hi) if hi is not None else gs.Variable.empty()]
            while ins and isinstance(ins[-1], gs.Variable) and ins[-1].name == "":
                ins.pop()
            return self.emit("Clip", ins, outputs=outputs)
        attrs = {}
        if lo is not None:
            attrs["min"] = float(lo)
        if hi is not None:
            attrs["max"] = float(hi)
        return self.emit("Clip", [x], attrs, outputs=outputs)

    def slice(self, x, starts, ends, axes, outputs=None):
        return self.emit("Slice", [x, self.ints("starts", starts), self.ints("ends", ends),
                                   self.ints("axes", axes)], outputs=outputs)

    def reshape(self, x, shape, outputs=None):
        return self.emit("Reshape", [x, self.ints("shape", shape)], outputs=outputs)

    # -- rewiring
    def bypass(self, replacement: gs.Tensor) -> None:
        """Make every reader of the node's output read ``replacement`` instead.

        If the output is a graph output, its name must survive: the producer of
        ``replacement`` is made to write the output tensor directly (see :func:`can_bypass`).
        """
        out = self.outputs[0]
        if any(t is out for t in self.graph.outputs):
            producer = replacement.inputs[0]
            idx = next(i for i, t in enumerate(producer.outputs) if t is replacement)
            for consumer in list(replacement.outputs):
                _swap_input(consumer, replacement, out)
            producer.outputs[idx] = out
        else:
            for consumer in list(out.outputs):
                _swap_input(consumer, out, replacement)
            # ``out`` disappears; ``replacement`` already names the same values in both graphs.


def as_stored(value):
    """An attribute value as an ONNX file holds it and onnx-graphsurgeon reads it back (floats in
    float32, numpy scalars as Python numbers, sequences as lists), so a check or rule that runs
    before the graph is exported sees what the exported model will hold."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(np.float32(value))
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (list, tuple)):
        return [as_stored(v) for v in value]
    return value


def _swap_input(consumer: gs.Node, old: gs.Tensor, new: gs.Tensor) -> None:
    for i, t in enumerate(consumer.inputs):
        if t is old:
            consumer.inputs[i] = new


def apply_rule_to_graph(graph: gs.Graph, rule_obj: Rule, node: gs.Node,
                        names: NameAllocator | None = None) -> list[gs.Node]:
    """Apply ``rule_obj`` to ``node`` in place; returns the nodes it emitted."""
    why = rule_obj.why_not(node, graph)
    if why:
        raise ValueError(f"rule {rule_obj.name} does not apply to {node.name}: {why}")
    rw = Rewrite(graph, node, rule_obj.name, names or NameAllocator(graph))
    node.outputs.clear()
    rule_obj.rewrite(rw, node)
    node.inputs.clear()
    return rw.new_nodes


def apply_rule(model: onnx.ModelProto, rule_name: str, node_name: str | None = None) -> onnx.ModelProto:
    """Apply one registered rule to one node (by default: the first node it matches)."""
    from ...ir.graph import to_graph, to_model

    graph = to_graph(model)
    r = REGISTRY[rule_name]
    for node in list(graph.nodes):
        if (node_name is None and r.matches(node, graph)) or node.name == node_name:
            apply_rule_to_graph(graph, r, node)
            return infer(to_model(graph))
    raise ValueError(f"rule {rule_name} matches no node" + (f" named {node_name}" if node_name else ""))


def infer(model: onnx.ModelProto) -> onnx.ModelProto:
    """Shape inference that never fails a rewrite (unknown shapes stay unknown)."""
    try:
        return light_model.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001  (inference is best effort; the rewrite stands)
        return model
