"""A node's neighbourhood: the part of a graph a rule may look at, copied, keyed and re-inferred.

The planner tries a rule on a node without touching the whole graph: :func:`neighbourhood`
collects the nodes at most ``CONTEXT_RADIUS`` tensor links away (see the locality contract in
:mod:`converter.legalize.rewrites.base`), :meth:`Neighbourhood.signature` describes them with everything
a rule or the matrix may read (ops, attributes, shapes, dtypes, small constants, reader counts,
graph input/output marks; no names), so that two nodes in alike surroundings share one trial,
and :meth:`Neighbourhood.copy` builds a small ``gs.Graph`` of them to apply the rule to.
:func:`settle` then gives what the rule emitted its shapes and cleans the small graph as an
export would.

A small graph remembers what lies beyond its edge (:class:`Boundary`: readers outside, tensors
produced outside), so a tensor in it has the same reader count as in the full graph, cleanup
keeps a node whose output is read beyond the edge, and the neighbourhood of a node of a small
graph (the planner looks for the chain of a node a rule emitted) is keyed the same way.

:func:`infer_nodes` is shape inference for the nodes one rewrite emitted, in place, from a model
of just those nodes and the tensors they read (the legalizer calls it after each rewrite).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter
from onnx_graphsurgeon.importers.onnx_importer import get_onnx_tensor_dtype, get_onnx_tensor_shape

from .rewrites.base import CONTEXT_RADIUS, small_constant

_BOUNDARY_KEY = "boundary"


@dataclass
class Boundary:
    """What lies outside a small graph cut from a bigger one (tensor names)."""

    readers: dict[str, int] = field(default_factory=dict)   # readers that are not in the graph
    produced: set[str] = field(default_factory=set)         # produced by a node not in the graph


def boundary_of(graph: gs.Graph) -> Boundary:
    return graph.__dict__.get(_BOUNDARY_KEY) or Boundary()


class Unkeyable(Exception):
    """The neighbourhood holds something without a stable description (e.g. a subgraph)."""


def _is_empty(t: gs.Tensor) -> bool:
    return isinstance(t, gs.Variable) and t.name == ""


def _constant_producer(t: gs.Tensor) -> gs.Node | None:
    """The Constant node that makes ``t``, if that is how ``t`` is made."""
    if isinstance(t, gs.Variable) and len(t.inputs) == 1 and t.inputs[0].op == "Constant":
        return t.inputs[0]
    return None


def _links(t: gs.Tensor) -> bool:
    """Does ``t`` connect its producer and readers as neighbours?  Constants do not: one shared
    weight or scalar would otherwise make every node that reads it a neighbour of every other."""
    return not (_is_empty(t) or isinstance(t, gs.Constant) or _constant_producer(t) is not None)


class Neighbourhood:
    """The nodes at most ``radius`` tensor links from ``root`` (BFS order, root first), plus the
    Constant nodes that make their constant inputs."""

    def __init__(self, graph: gs.Graph, root: gs.Node, radius: int = CONTEXT_RADIUS):
        self.graph, self.root = graph, root
        order = [root]
        seen = {id(root)}
        frontier = [root]
        for _ in range(radius):
            nxt = []
            for node in frontier:
                for t in list(node.inputs) + list(node.outputs):
                    if not _links(t):
                        continue
                    for other in list(t.inputs) + list(t.outputs):
                        if id(other) not in seen:
                            seen.add(id(other))
                            order.append(other)
                            nxt.append(other)
            frontier = nxt
        for node in list(order):
            for t in node.inputs:
                maker = _constant_producer(t)
                if maker is not None and id(maker) not in seen:
                    seen.add(id(maker))
                    order.append(maker)
        self.nodes = order
        self._ids = seen

    # ------------------------------------------------------------------------------ the key

    def signature(self) -> tuple:
        """Everything a rule (under the locality contract) or the matrix can read here, with
        tensor and node names left out.  Raises :class:`Unkeyable`."""
        bound = boundary_of(self.graph)
        inputs = {id(t) for t in self.graph.inputs}
        outputs = {id(t) for t in self.graph.outputs}
        index: dict[int, int] = {}
        tensors: list[tuple] = []

        def ref(t: gs.Tensor) -> int:
            if _is_empty(t):
                return -1
            k = index.get(id(t))
            if k is None:
                k = index[id(t)] = len(tensors)
                tensors.append(_describe(t, bound, id(t) in inputs, id(t) in outputs))
            return k

        nodes = tuple((n.op, n.domain or "", _attrs_key(n.attrs), tuple(ref(t) for t in n.inputs),
                       tuple(ref(t) for t in n.outputs)) for n in self.nodes)
        return int(self.graph.opset or 0), nodes, tuple(tensors)

    # ------------------------------------------------------------------------------ the copy

    def copy(self) -> tuple[gs.Graph, gs.Node]:
        """A small graph of the neighbourhood (sharing constant values) and the root's twin."""
        bound = boundary_of(self.graph)
        twins: dict[int, gs.Tensor] = {}
        kept: dict[int, gs.Tensor] = {}

        def twin(t: gs.Tensor) -> gs.Tensor:
            if _is_empty(t):
                return gs.Variable.empty()
            c = twins.get(id(t))
            if c is None:
                c = twins[id(t)] = t.copy()
                kept[id(t)] = t
            return c

        links = [([twin(t) for t in n.inputs], [twin(t) for t in n.outputs]) for n in self.nodes]
        # A subgraph attribute (If, Loop) reads outer tensors by name: give it the twins.
        by_name = {t.name: twins[key] for key, t in kept.items()}
        nodes = [n.copy(inputs=ins, outputs=outs, tensor_map=by_name) for n, (ins, outs) in zip(self.nodes, links)]
        readers, produced = {}, set()
        for t in kept.values():
            outside = sum(1 for r in t.outputs if id(r) not in self._ids) + bound.readers.get(t.name, 0)
            if outside:
                readers[t.name] = outside
            if t.name in bound.produced or any(id(p) not in self._ids for p in t.inputs):
                produced.add(t.name)
        small = gs.Graph(nodes=nodes,
                         inputs=[twins[id(t)] for t in self.graph.inputs if id(t) in twins],
                         outputs=[twins[id(t)] for t in self.graph.outputs if id(t) in twins],
                         opset=self.graph.opset, ir_version=self.graph.ir_version,
                         # a copy: exporting adds missing domains to the list in place
                         import_domains=None if self.graph.import_domains is None
                         else list(self.graph.import_domains),
                         functions=list(self.graph.functions))
        small.__dict__[_BOUNDARY_KEY] = Boundary(readers, produced)
        return small, nodes[0]


def _describe(t: gs.Tensor, bound: Boundary, is_input: bool, is_output: bool) -> tuple:
    readers = len(t.outputs) + bound.readers.get(t.name, 0)
    produced = bool(t.inputs) or t.name in bound.produced
    if isinstance(t, gs.Constant):
        return ("c", _constant_key(t), readers, is_input, is_output)
    shape = None if t.shape is None else tuple(t.shape)
    return ("v", _dtype_key(t.dtype), shape, readers, produced, is_input, is_output)


def _dtype_key(dtype) -> str | None:
    if dtype is None:
        return None
    try:
        return np.dtype(dtype).str
    except TypeError:
        return str(dtype)


def _constant_key(t: gs.Constant) -> tuple:
    """A small constant by value; a large one by shape and dtype only (the locality contract:
    weights do not change what a rule emits)."""
    shape = tuple(int(d) for d in t.shape)
    size = int(np.prod(shape)) if shape else 1
    if not _small(t, size):
        return ("shape", _dtype_key(t.dtype), shape)
    return ("value",) + _array_key(np.asarray(t.values))


def _small(t: gs.Constant, size: int) -> bool:
    try:
        return small_constant(t.dtype, size)
    except TypeError:  # a dtype numpy does not know (e.g. float8 kept as an ONNX type): by value
        return True


def _array_key(arr: np.ndarray) -> tuple:
    arr = np.ascontiguousarray(arr)
    if arr.dtype == object:
        raise Unkeyable("object array")
    digest = hashlib.blake2b(memoryview(arr).cast("B"), digest_size=16).hexdigest() if arr.size else ""
    return arr.dtype.str, arr.shape, digest


def _attrs_key(attrs: dict) -> tuple:
    return tuple((k, _attr_key(v)) for k, v in sorted(attrs.items()))


def _attr_key(v):
    if isinstance(v, float):
        return ("f", repr(v))
    if v is None or isinstance(v, (bool, int, str, bytes)):
        return v
    if isinstance(v, (list, tuple)):
        return tuple(_attr_key(x) for x in v)
    if isinstance(v, np.generic):
        return _attr_key(v.item())
    if isinstance(v, np.ndarray):
        return ("a",) + _array_key(v)
    if isinstance(v, gs.Constant):
        return ("t",) + _array_key(np.asarray(v.values))
    if isinstance(v, type):
        return ("type", v.__name__)
    raise Unkeyable(type(v).__name__)


def neighbourhood(graph: gs.Graph, node: gs.Node, radius: int = CONTEXT_RADIUS) -> Neighbourhood:
    return Neighbourhood(graph, node, radius)


# ---------------------------------------------------------------------------------- inference


def settle(small: gs.Graph, emitted: list[gs.Node]) -> list[gs.Node]:
    """After a rule ran on a small graph: shapes for the nodes it emitted (:func:`infer_nodes`),
    and the graph cleaned and sorted as an export would (an emitted node nothing reads, in the
    small graph or beyond its edge, is dropped).  Returns the emitted nodes left, in graph order."""
    infer_nodes(emitted, small)
    bound = boundary_of(small)
    real_out = list(small.outputs)
    kept = {id(t) for t in real_out}
    read_beyond = [t for name, t in small.tensors().items() if bound.readers.get(name) and id(t) not in kept]
    small.outputs = real_out + read_beyond
    small.cleanup(remove_unused_graph_inputs=False).toposort()
    small.outputs = real_out
    ids = {id(n) for n in emitted}
    return [n for n in small.nodes if id(n) in ids]


def infer_nodes(nodes: list[gs.Node], graph: gs.Graph, seen: dict | None = None) -> None:
    """Give the outputs of ``nodes`` (one rewrite's emitted nodes, still in ``graph``) the shapes
    and dtypes ONNX shape inference finds from the tensors they read, in place.

    ``seen``: a dict kept across calls; nodes alike in ops, attributes and the shapes, dtypes and
    small constants they read (18 rewrites of 18 alike Erf nodes) are inferred once.
    """
    if not nodes:
        return
    made = list({id(t): t for n in nodes for t in n.outputs if not _is_empty(t)}.values())
    members = list(nodes)
    ids = {id(n) for n in nodes}
    for n in nodes:
        for t in n.inputs:
            maker = _constant_producer(t)
            if maker is not None and id(maker) not in ids:
                ids.add(id(maker))
                members.insert(0, maker)
    key = None
    if seen is not None:
        try:
            key = _members_key(int(graph.opset or 0), members, made)
        except Unkeyable:
            key = None
        if key in seen:
            for t, (dtype, shape) in zip(made, seen[key]):
                _set_type(t, dtype, shape)
            return
    found = _infer_members(members, made, graph)
    if key is not None:
        seen[key] = found
    for t, (dtype, shape) in zip(made, found):
        _set_type(t, dtype, shape)


def _set_type(t: gs.Variable, dtype, shape) -> None:
    if dtype is not None:
        t.dtype = dtype
    if shape is not None:
        t.shape = list(shape)


def _members_key(opset: int, members: list[gs.Node], made: list[gs.Tensor]) -> tuple:
    made_ids = {id(t) for t in made}
    index: dict[int, int] = {}
    tensors: list[tuple] = []

    def ref(t: gs.Tensor) -> int:
        if _is_empty(t):
            return -1
        k = index.get(id(t))
        if k is None:
            k = index[id(t)] = len(tensors)
            if isinstance(t, gs.Constant):
                tensors.append(("c", _constant_key(t)))
            else:
                shape = None if t.shape is None else tuple(t.shape)
                tensors.append(("v", id(t) in made_ids, _dtype_key(t.dtype), shape))
        return k

    nodes = tuple((n.op, n.domain or "", _attrs_key(n.attrs), tuple(ref(t) for t in n.inputs),
                   tuple(ref(t) for t in n.outputs)) for n in members)
    return opset, nodes, tuple(tensors), tuple(index[id(t)] for t in made)


def _infer_members(members: list[gs.Node], made: list[gs.Tensor], graph: gs.Graph) -> list[tuple]:
    """ONNX shape inference on a model of ``members`` alone: what they read from outside comes
    in as typed inputs (small constants as initializers, for shape arithmetic)."""
    made_ids = {id(t) for t in made}
    inputs, inits, seen = [], [], set()
    for n in members:
        for t in n.inputs:
            if _is_empty(t) or id(t) in made_ids or id(t) in seen or _constant_producer(t) is not None:
                continue
            seen.add(id(t))
            if isinstance(t, gs.Constant) and _small(t, int(np.prod(t.shape))):
                inits.append(OnnxExporter.export_tensor_proto(t))
            else:
                inputs.append(OnnxExporter.export_value_info_proto(t, do_type_check=False))
    outputs = [OnnxExporter.export_value_info_proto(t, do_type_check=False) for t in made]
    body = onnx.helper.make_graph([OnnxExporter.export_node(n) for n in members], "emitted",
                                  inputs, outputs, inits)
    opsets = [onnx.helper.make_opsetid("", int(graph.opset or 17))]
    opsets += [imp for imp in graph.import_domains or [] if imp.domain not in ("", "ai.onnx")]
    unknown = [(None, None)] * len(made)
    try:
        found = onnx.shape_inference.infer_shapes(onnx.helper.make_model(body, opset_imports=opsets),
                                                  data_prop=True)
    except Exception:  # noqa: BLE001  (best effort, like infer(): unknown shapes stay unknown)
        return unknown
    infos = {i.name: i for i in (*found.graph.value_info, *found.graph.output)}
    out = []
    for t in made:
        info = infos.get(t.name)
        if info is None or not info.type.HasField("tensor_type"):
            out.append((None, None))
            continue
        dtype = get_onnx_tensor_dtype(info) if info.type.tensor_type.elem_type else None
        out.append((dtype, get_onnx_tensor_shape(info)))
    return out
