"""Read a QDQ model back against its float original: the quantization record exporters consume.

:class:`QdqView` relates the two graphs: onnxruntime's QDQ insertion keeps node names, keeps a
tensor's name where it can, and renames a graph output's producer output to
``<output>_QuantizeLinear_Input``; it also removes activations that the quantized range already
implies (a Relu/Clip after a Conv: the Conv then produces the Clip's output tensor).  A QDQ
tensor is therefore mapped to the float tensor of the same name, else to the float tensor its
producer (same node name, same output index) produced.

:func:`quant_params` is the JSON-ready record (``format: edgeconv.quant/1``)::

    {"format": "edgeconv.quant/1", "mode": "int8", "activation_dtype": "int8", "weight_dtype": "int8",
     "per_channel": true, "method": "minmax", "full_integer": true,
     "inputs":  [{"name": "input", "dtype": "int8", "scale": [0.0331], "zero_point": [8], "axis": null}],
     "outputs": [{"name": "output", ...}],            # null where the edge stays float
     "activations": {"clip_0_1": {"dtype": "int8", "scale": [...], "zero_point": [...], "axis": null,
                                  "qdq_tensor": "clip_0_1_DequantizeLinear_Output"}, ...},
     "weights": {"conv_0_in1": {"dtype": "int8", "scale": [16 values], "zero_point": [16 zeros], "axis": 0,
                                "quantized": "conv_0_in1_quantized", "consumers": ["conv_0"]}, ...},
     "biases":  {"conv_0_in2": {"dtype": "int32", ...}},
     "float_nodes": ["..."],                           # nodes left in float (mixed precision)
     "bias_correction": {"layers": 41, "applied": true, "add_ranges": "own", "samples": 16,
                         "sqnr_db_before": 42.9, "sqnr_db_after": 46.8,   # shared/plain, the chosen one
                         "candidates": {"shared/plain": 42.9, "shared/corrected": 45.6, "own/plain": 42.6,
                                        "own/corrected": 46.8},
                         "float_biases": ["conv_0_in2", ...]}}  # .bias_correction's record (null: not tried)

Keys of ``activations`` are tensor names of the float model; keys of ``weights``/``biases`` are
its initializer names; ``quantized`` names the integer initializer in the QDQ model (the exact
integers to write: never re-round the float weights).  Real value = scale * (q - zero_point),
per channel along ``axis`` when it is not null.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import onnx

from ..ir.integers import int32_bias  # noqa: F401  (part of this module's API)
from onnx import numpy_helper

FORMAT = "edgeconv.quant/1"


@dataclass(frozen=True)
class QuantEdge:
    """One Q/DQ pair (or a lone DQ of a constant): the integer encoding of one tensor."""

    dtype: str
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None
    #: Tensor in the QDQ model holding the dequantized value (DQ output).
    dequantized: str | None
    #: Integer initializer (constants) or the Q node's output (activations).
    quantized: str

    def qrange(self) -> tuple[int, int]:
        info = np.iinfo(np.dtype(self.dtype))
        return int(info.min), int(info.max)

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "scale": [float(v) for v in self.scale.reshape(-1)],
                "zero_point": [int(v) for v in self.zero_point.reshape(-1)], "axis": self.axis}


class QdqView:
    def __init__(self, float_model: onnx.ModelProto, qdq_model: onnx.ModelProto):
        self.float_model, self.qdq_model = float_model, qdq_model
        self.float_nodes = {n.name: n for n in float_model.graph.node}
        self.float_tensors = ({o for n in float_model.graph.node for o in n.output}
                              | {i.name for i in float_model.graph.input})
        self.float_inits = {i.name for i in float_model.graph.initializer}
        self.inits = {i.name: i for i in qdq_model.graph.initializer}
        self.producer = {o: n for n in qdq_model.graph.node for o in n.output}
        self.consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
        for node in qdq_model.graph.node:
            for k, name in enumerate(node.input):
                self.consumers.setdefault(name, []).append((node, k))
        self.activations: dict[str, QuantEdge] = {}
        self.constants: dict[str, QuantEdge] = {}
        self.constant_consumers: dict[str, list[str]] = {}
        for node in qdq_model.graph.node:
            if node.op_type == "QuantizeLinear" and node.input[0] not in self.inits:
                name = self.float_name(node.input[0])
                dq = next((c for c, _ in self.consumers.get(node.output[0], []) if c.op_type == "DequantizeLinear"), None)
                if name is not None and name not in self.activations:
                    self.activations[name] = self._edge(node, node.output[0], dq.output[0] if dq else None)
            elif node.op_type == "DequantizeLinear" and node.input[0] in self.inits:
                for consumer, index in self.consumers.get(node.output[0], []):
                    original = self.float_nodes.get(consumer.name)
                    if original is None or index >= len(original.input) or original.input[index] not in self.float_inits:
                        continue
                    weight = original.input[index]
                    self.constants.setdefault(weight, self._edge(node, node.input[0], node.output[0]))
                    self.constant_consumers.setdefault(weight, []).append(consumer.name)

    def float_name(self, qdq_tensor: str) -> str | None:
        if qdq_tensor in self.float_tensors:
            return qdq_tensor
        node = self.producer.get(qdq_tensor)
        original = self.float_nodes.get(node.name) if node is not None else None
        if original is None:
            return None
        index = list(node.output).index(qdq_tensor)
        return original.output[index] if index < len(original.output) else None

    def _edge(self, node: onnx.NodeProto, quantized: str, dequantized: str | None) -> QuantEdge:
        scale = numpy_helper.to_array(self.inits[node.input[1]])
        zero = (numpy_helper.to_array(self.inits[node.input[2]]) if len(node.input) > 2 and node.input[2]
                else np.zeros_like(scale, dtype=np.uint8))
        axis = next((a.i for a in node.attribute if a.name == "axis"), None) if scale.size > 1 else None
        return QuantEdge(zero.dtype.name, scale, zero, axis, dequantized, quantized)

    def quantized_view(self, float_tensor: str) -> str | None:
        """The QDQ tensor carrying ``float_tensor`` as the quantized model computes it."""
        edge = self.activations.get(float_tensor)
        if edge is not None and edge.dequantized is not None:
            return edge.dequantized
        return float_tensor if float_tensor in self.producer or float_tensor in {
            i.name for i in self.qdq_model.graph.input} else None

    def computed_by(self, float_tensor: str) -> onnx.NodeProto | None:
        """The QDQ node computing ``float_tensor`` (before its QuantizeLinear): for a Relu the
        quantizer folded away, the Conv before it."""
        edge = self.activations.get(float_tensor)
        if edge is not None:
            q_node = self.producer.get(edge.quantized)
            return self.producer.get(q_node.input[0]) if q_node is not None else None
        return self.producer.get(float_tensor)

    def weight_values(self, weight: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(float weight, dequantized weight) of a quantized constant."""
        edge = self.constants.get(weight)
        if edge is None:
            return None
        init = {i.name: i for i in self.float_model.graph.initializer}[weight]
        q = numpy_helper.to_array(self.inits[edge.quantized]).astype(np.float64)
        return numpy_helper.to_array(init), dequantize(q, edge)

    def float_only_nodes(self) -> list[str]:
        """Float-model nodes the QDQ model computes in float: a node runs quantized when every
        non-constant input comes from a DequantizeLinear and every output goes only to
        QuantizeLinear; anything else (an excluded node, a float island) is float."""
        out = []
        for node in self.qdq_model.graph.node:
            if node.name not in self.float_nodes or node.op_type in ("QuantizeLinear", "DequantizeLinear"):
                continue
            inputs = [i for i in node.input if i and i not in self.inits]
            fed = all(self.producer.get(i) is not None and self.producer[i].op_type == "DequantizeLinear"
                      for i in inputs)
            drained = all(self.consumers.get(o) and all(c.op_type == "QuantizeLinear" for c, _ in self.consumers[o])
                          for o in node.output if o)
            if not (fed and drained):
                out.append(node.name)
        return sorted(out)


def dequantize(q: np.ndarray, edge: QuantEdge) -> np.ndarray:
    scale, zero = edge.scale.astype(np.float64), edge.zero_point.astype(np.float64)
    if edge.axis is not None:
        shape = [1] * q.ndim
        shape[edge.axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return (q.astype(np.float64) - zero) * scale


def quant_params(view: QdqView, config) -> dict:
    """The record described in the module docstring."""
    qdq = view.qdq_model
    init_names = {i.name for i in qdq.graph.initializer}

    def io_entry(name: str) -> dict | None:
        edge = view.activations.get(name)
        return None if edge is None else {"name": name, **edge.to_dict()}

    weights, biases = {}, {}
    for name, edge in sorted(view.constants.items()):
        entry = {**edge.to_dict(), "quantized": edge.quantized, "consumers": sorted(view.constant_consumers[name])}
        (biases if edge.dtype == "int32" else weights)[name] = entry
    inputs = [i.name for i in view.float_model.graph.input if i.name not in init_names | view.float_inits]
    integer = config.mode in ("int8", "uint8")
    return {
        "format": FORMAT,
        "mode": config.mode,
        "activation_dtype": config.mode if integer else "float32",
        "weight_dtype": {"int8": "int8", "uint8": "uint8", "int8-weights": "int8"}.get(config.mode, "float16"),
        "per_channel": bool(config.per_channel),
        "method": config.method if integer else None,
        "full_integer": bool(config.full_integer),
        "inputs": [io_entry(n) for n in inputs],
        "outputs": [io_entry(o.name) for o in view.float_model.graph.output],
        "activations": {name: {**edge.to_dict(), "qdq_tensor": edge.dequantized}
                        for name, edge in sorted(view.activations.items())},
        "weights": weights,
        "biases": biases,
        "float_nodes": view.float_only_nodes() if integer else [],
        "bias_correction": bias_correction_record(qdq),
    }


#: The QDQ model's metadata key holding the bias correction record.
BIAS_CORRECTION_KEY = "edgeconv.bias_correction"


def bias_correction_record(model: onnx.ModelProto) -> dict | None:
    """What bias correction recorded in a QDQ model's metadata (:mod:`.bias_correction`), or None."""
    for prop in model.metadata_props:
        if prop.key == BIAS_CORRECTION_KEY:
            return json.loads(prop.value)
    return None
