"""Tensor types newer than the canonical opset, and the casts that gained attributes for them.

Opset 19 added the float8 types, 21 int4/uint4, 23 float4e2m1, 24 float8e8m0, 25 int2/uint2,
28 float6: no edge framework edgeconv targets has kernels for them, and opset 17 cannot name
them.  A model that declares one anywhere (a graph input or output, an initializer, a Constant,
a Cast's ``to``, a quantizer's ``output_dtype``) is refused with one line naming the tensor
and the type, before anything reads it.  The one exception is exact: 4-bit integer weights read
only by DequantizeLinear, whose values int8/uint8 hold unchanged (:mod:`.quant` widens them).
"""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from ...errors import Unsupported
from .base import adapter

#: The last type code opset 17 knows (TensorProto.BFLOAT16); every later code is newer.
_LAST_CANONICAL_TYPE = onnx.TensorProto.BFLOAT16
#: Newer types whose values a wider canonical type holds exactly, when DequantizeLinear reads them.
WIDENED = {onnx.TensorProto.INT4: onnx.TensorProto.INT8, onnx.TensorProto.UINT4: onnx.TensorProto.UINT8}
#: Attributes that name an element type.
_TYPE_ATTRIBUTES = ("to", "dtype", "output_dtype")


def refuse_new_types(model: onnx.ModelProto) -> None:
    """Raise :class:`Unsupported` naming the first tensor of a type newer than opset 17."""
    widenable = _dequantized_weights(model.graph)
    for where, code in _declared_types(model.graph):
        if code > _LAST_CANONICAL_TYPE and not (code in WIDENED and where[1] in widenable):
            name = onnx.TensorProto.DataType.Name(code)
            raise Unsupported(f"{where[0]} '{where[1]}' has type {name}, which edgeconv does not support "
                              "(no float8, float4, float6, int4 or int2 kernels on its targets; opset 17 has "
                              "none of these types)")


def _dequantized_weights(graph: onnx.GraphProto) -> set[str]:
    """Initializers read by DequantizeLinear (as its quantized input) and by nothing else."""
    readers: dict[str, set[tuple[str, int]]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            readers.setdefault(name, set()).add((node.op_type, i))
    return {t.name for t in graph.initializer if readers.get(t.name) == {("DequantizeLinear", 0)}}


def _declared_types(graph: onnx.GraphProto):
    """((what, name), element type) of every typed thing in ``graph`` and its subgraphs."""
    for kind, values in (("input", graph.input), ("output", graph.output), ("tensor", graph.value_info)):
        for value in values:
            if value.type.HasField("tensor_type"):
                yield (kind, value.name), value.type.tensor_type.elem_type
    for tensor in graph.initializer:
        yield ("initializer", tensor.name), tensor.data_type
    for node in graph.node:
        for a in node.attribute:
            if a.name in _TYPE_ATTRIBUTES and a.type == onnx.AttributeProto.INT:
                yield (f"attribute {a.name} of node", node.name or node.op_type), a.i
            if a.type == onnx.AttributeProto.TENSOR:
                yield (f"{node.op_type} value", node.name or node.op_type), a.t.data_type
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                yield from _declared_types(sub)


@adapter("Cast", 19, 21, 23, 24, 25, 28)
def cast_without_float8_attributes(rw, node: gs.Node) -> None:
    """Cast-19+ → Cast-13: ``saturate`` (float8 targets only) and ``round_mode`` (float8e8m0
    only) mean nothing for the types opset 17 has; :func:`refuse_new_types` refused the others.

    before: Cast(x; to, saturate, round_mode) ─► y
    after:  Cast(x; to) ─► y
    """
    for name in ("saturate", "round_mode"):
        node.attrs.pop(name, None)


@adapter("CastLike", 19, 21, 23, 24, 25)
def castlike_without_float8_attributes(rw, node: gs.Node) -> None:
    """CastLike-19+ → CastLike-15, as for Cast.

    before: CastLike(x, like; saturate, round_mode) ─► y
    after:  CastLike(x, like) ─► y
    """
    for name in ("saturate", "round_mode"):
        node.attrs.pop(name, None)
