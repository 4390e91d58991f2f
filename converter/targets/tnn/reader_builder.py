"""Builds the ONNX graph of the round-trip reader: blobs, constants, per-layer shape inference."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...errors import BadInput
from ...ir import light_model
from ...ir.graph import CANONICAL_OPSET
from .layer_types import DATA_FLOAT, DATA_HALF, DATA_INT8, DATA_INT32, DATA_INT64, DATA_UINT32
from ..registry import OpRegistry
from .reader import ParsedNet, ProtoLayer

#: TNN layer type id (layer_type.h) -> ``read(b, layer)``, which adds the layer's ONNX nodes to the
#: :class:`Builder`.  ``reader_onnx.py``, ``reader_shape.py`` and ``reader_extra.py`` fill it.
LAYER_READERS = OpRegistry("tnn-reader", title="TNN reader")

NP_TYPES = {DATA_FLOAT: np.float32, DATA_HALF: np.float16, DATA_INT8: np.int8, DATA_INT32: np.int32,
            DATA_INT64: np.int64, DATA_UINT32: np.uint32}


class Builder:
    def __init__(self, net: ParsedNet):
        self.net = net
        self.tensors: dict[str, gs.Tensor] = {}
        self.nodes: list[gs.Node] = []
        self.count = 0
        for name, value in net.constants.items():
            self.tensors[name] = gs.Constant(name, np.ascontiguousarray(as_float(value)))

    # tensors
    def get(self, name: str) -> gs.Tensor:
        if name not in self.tensors:
            raise BadInput(f"TNN model: blob '{name}' is used before any layer produces it")
        return self.tensors[name]

    def shape(self, name: str) -> list[int]:
        return list(self.get(name).shape)

    def const(self, value, dtype=None) -> gs.Constant:
        self.count += 1
        # np.array, not np.ascontiguousarray: that one turns a scalar (a Gather index) into 1-D.
        return gs.Constant(f"tnn_const_{self.count}", np.array(value, dtype=dtype, order="C"))

    def tmp(self) -> gs.Variable:
        self.count += 1
        return gs.Variable(f"tnn_tmp_{self.count}")

    def out(self, name: str) -> gs.Variable:
        var = gs.Variable(name)
        self.tensors[name] = var
        return var

    def node(self, op: str, inputs, outputs, **attrs) -> list:
        self.count += 1
        self.nodes.append(gs.Node(op, f"tnn_node_{self.count}", attrs, list(inputs), list(outputs)))
        return outputs

    def op(self, op: str, inputs, output: gs.Variable | None = None, **attrs) -> gs.Variable:
        output = output if output is not None else self.tmp()
        self.node(op, inputs, [output], **attrs)
        return output

    def infer(self, start: int) -> None:
        """Give the outputs of the nodes added since ``start`` their shapes (onnx inference)."""
        new = self.nodes[start:]
        feeds = {t.name: t for n in new for t in n.inputs if isinstance(t, gs.Variable) and t.shape is not None}
        outs = [t for n in new for t in n.outputs]
        graph = gs.Graph(nodes=new, inputs=list(feeds.values()), outputs=outs, opset=CANONICAL_OPSET)
        model = gs.export_onnx(graph, do_type_check=False)
        inferred = light_model.infer_shapes(model, strict_mode=True)
        info = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
        for tensor in outs:
            vi = info.get(tensor.name)
            if vi is None or not vi.type.tensor_type.HasField("shape"):
                raise BadInput(f"TNN model: cannot infer the shape of blob '{tensor.name}'")
            tensor.shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            tensor.dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)


def as_float(value: np.ndarray) -> np.ndarray:
    return value.astype(np.float32) if value.dtype == np.float16 else value


def resource_of(b: Builder, layer: ProtoLayer) -> dict:
    res = b.net.resources.get(layer.name)
    if res is None:
        raise BadInput(f"TNN model: no resource for layer '{layer.name}' ({layer.type_str})")
    return res
