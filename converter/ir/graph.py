"""The one way edgeconv touches a graph: onnx-graphsurgeon, plus small helpers.

Rewrites, the post-processing split, verification and every exporter import a model with
:func:`to_graph`, edit ``gs.Graph``/``gs.Node``/``gs.Variable``/``gs.Constant``, and export with
:func:`to_model`.  Provenance (which original tensor a new tensor stands for, which rule or
mapping produced a node) travels with the graph as ``graph.provenance`` and is stored in the
model's ``metadata_props`` so that it survives a save/load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterable

import numpy as np
import onnx
import onnx_graphsurgeon as gs

#: The opset every normalized model uses.  17 is the newest opset in which LayerNormalization
#: exists as one op while the reductions other than ReduceSum still take ``axes`` as an
#: attribute, which is how the edge frameworks' own converters read them; onnxruntime, torch's
#: exporters and tf2onnx all produce it.
CANONICAL_OPSET = 17
#: The IR version that goes with opset 17 (onnx's table); newer onnx releases default to IR
#: versions that onnxruntime and the edge converters do not read yet.
CANONICAL_IR_VERSION = 8

_PROVENANCE_KEY = "edgeconv.provenance"


@dataclass
class Provenance:
    """Where the tensors and nodes of an edited graph came from.

    ``tensor_origin`` maps a new tensor name to the original tensor it computes (same values);
    ``node_origin`` maps a new node name to ``{"from": original node, "by": rule or mapping}``.
    """

    tensor_origin: dict[str, str] = field(default_factory=dict)
    node_origin: dict[str, dict[str, str]] = field(default_factory=dict)

    def record_tensor(self, new: str, original: str) -> None:
        # Chains collapse: if ``original`` itself stood for something, point at that.
        self.tensor_origin[new] = self.tensor_origin.get(original, original)

    def record_node(self, new: str, original: str, by: str) -> None:
        prior = self.node_origin.get(original)
        self.node_origin[new] = {"from": prior["from"] if prior else original, "by": by}

    def original_tensor(self, name: str) -> str:
        return self.tensor_origin.get(name, name)

    def to_json(self) -> str:
        return json.dumps(
            {"tensor_origin": self.tensor_origin, "node_origin": self.node_origin}, sort_keys=True
        )

    @classmethod
    def from_json(cls, text: str) -> Provenance:
        data = json.loads(text)
        return cls(dict(data.get("tensor_origin", {})), dict(data.get("node_origin", {})))


def provenance_of(model_or_graph: onnx.ModelProto | gs.Graph) -> Provenance:
    if isinstance(model_or_graph, gs.Graph):
        # gs.Graph.__getattr__ looks unknown names up as graph functions (and logs an error),
        # so read our attributes from the instance dict.
        prov = model_or_graph.__dict__.get("provenance")
        if prov is None:
            prov = Provenance()
            model_or_graph.provenance = prov
        return prov
    for prop in model_or_graph.metadata_props:
        if prop.key == _PROVENANCE_KEY:
            return Provenance.from_json(prop.value)
    return Provenance()


class _StoredValues(gs.ir.tensor.LazyValues):
    """A constant held by reference (converter/ir/weights.py): loading it is the stored array itself."""

    def load(self):
        from . import weights

        return weights.array_of(self.tensor)


def _adopt_references(graph: gs.Graph) -> None:
    """Constants imported from weight references load as the stored arrays (no copy) and keep
    the ``data_location`` the tensor had before it became a reference."""
    from . import weights

    for tensor in graph.tensors().values():
        values = getattr(tensor, "_values", None)
        if isinstance(tensor, gs.Constant) and type(values) is gs.ir.tensor.LazyValues and \
                weights.is_reference(values.tensor):
            tensor._values = _StoredValues(values.tensor)
            tensor.data_location = weights.data_location_of(values.tensor)


def _export_references(graph: gs.Graph, store) -> list:
    """Big array constants become references into ``store`` for the export (undone by
    :func:`_undo_references`): the exported model shares the arrays instead of copying them."""
    from . import weights

    swapped = []
    for tensor in graph.tensors().values():
        values = getattr(tensor, "_values", None)
        if (isinstance(tensor, gs.Constant) and isinstance(values, np.ndarray) and values.nbytes >= weights.MIN_BYTES
                and weights._numpy_type(values) is not None and tensor.export_dtype == tensor.dtype):
            tensor._values = _StoredValues(weights.reference_tensor(store, values, tensor.name, tensor.data_location))
            swapped.append((tensor, values))
    return swapped


def _undo_references(swapped: list) -> None:
    for tensor, values in swapped:
        tensor._values = values


def to_graph(model: onnx.ModelProto) -> gs.Graph:
    graph = gs.import_onnx(model)
    from . import weights

    if weights.has_references(model):
        _adopt_references(graph)
    graph.provenance = provenance_of(model)
    graph.metadata = {p.key: p.value for p in model.metadata_props if p.key != _PROVENANCE_KEY}
    return graph


def to_model(graph: gs.Graph, opset: int | None = None, *, cleanup: bool = True) -> onnx.ModelProto:
    """Export ``graph`` with dead nodes removed, topologically sorted, provenance attached."""
    if cleanup:
        graph.cleanup(remove_unused_graph_inputs=False).toposort()
    if opset is not None:
        graph.opset = opset
    from . import weights

    store = weights.active()
    swapped = _export_references(graph, store) if store is not None else []
    try:
        model = gs.export_onnx(graph, do_type_check=False)
    finally:
        _undo_references(swapped)
    model.producer_name = "edgeconv"
    if model_opset(model) <= CANONICAL_OPSET:
        model.ir_version = min(model.ir_version, CANONICAL_IR_VERSION)
    del model.metadata_props[:]
    for key, value in sorted(graph.__dict__.get("metadata", {}).items()):
        model.metadata_props.add(key=key, value=value)
    prov = graph.__dict__.get("provenance")
    if prov is not None and (prov.tensor_origin or prov.node_origin):
        model.metadata_props.add(key=_PROVENANCE_KEY, value=prov.to_json())
    return model


def constant_value(tensor: gs.Tensor) -> np.ndarray | None:
    """The value of a tensor known at export time: an initializer or a Constant node's output."""
    if isinstance(tensor, gs.Constant):
        return np.asarray(tensor.values)
    if isinstance(tensor, gs.Variable) and len(tensor.inputs) == 1:
        producer = tensor.inputs[0]
        if producer.op == "Constant" and "value" in producer.attrs:
            value = producer.attrs["value"]
            return np.asarray(value.values if isinstance(value, gs.Constant) else value)
    return None


def is_constant(tensor: gs.Tensor) -> bool:
    return constant_value(tensor) is not None


def tensor_shape(tensor: gs.Tensor) -> tuple | None:
    shape = getattr(tensor, "shape", None)
    return None if shape is None else tuple(shape)


def tensor_rank(tensor: gs.Tensor) -> int | None:
    shape = tensor_shape(tensor)
    return None if shape is None else len(shape)


def static_shape(tensor: gs.Tensor) -> tuple[int, ...] | None:
    """Shape with every dimension a known int, else None."""
    shape = tensor_shape(tensor)
    if shape is None or not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape):
        return None
    return tuple(int(d) for d in shape)


def dtype_name(tensor: gs.Tensor) -> str | None:
    """ONNX-style dtype name ('float32', 'int64', ...), or None when unknown."""
    dtype = getattr(tensor, "dtype", None)
    if dtype is None:
        return None
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


def attr(node: gs.Node, name: str, default: Any = None) -> Any:
    return node.attrs.get(name, default)


def unique_name(base: str, used: set[str]) -> str:
    """``base``, or ``base_1``, ``base_2``, ... whichever is not in ``used``; claims it."""
    name, k = base, 1
    while name in used:
        name = f"{base}_{k}"
        k += 1
    used.add(name)
    return name


class NameAllocator:
    """Unique, deterministic names for the tensors and nodes a rewrite creates."""

    def __init__(self, graph: gs.Graph):
        tensors = graph.tensors()
        self._used = set(tensors) | {n.name for n in graph.nodes if n.name}

    def __call__(self, base: str) -> str:
        return unique_name(base, self._used)


def make_constant(names: NameAllocator, base: str, value: np.ndarray) -> gs.Constant:
    return gs.Constant(names(base), np.ascontiguousarray(value))


def make_variable(names: NameAllocator, base: str, dtype=None, shape=None) -> gs.Variable:
    return gs.Variable(names(base), dtype=dtype, shape=shape)


def op_histogram(nodes: Iterable[gs.Node] | onnx.ModelProto) -> dict[str, int]:
    ops = (n.op_type for n in nodes.graph.node) if isinstance(nodes, onnx.ModelProto) else (
        n.op for n in nodes
    )
    hist: dict[str, int] = {}
    for op in ops:
        hist[op] = hist.get(op, 0) + 1
    return dict(sorted(hist.items()))


def model_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 1
