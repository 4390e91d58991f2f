"""The QDQ model with the weight integers a target's file will hold, where the target quantizes
the float weights itself (MACE's CPU: uint8 per tensor, ``quantize_util.quantize(non_zero=True)``).

onnxruntime's quantizer writes its own weight integers (per channel, other scales and rounding).
A target that re-quantizes the float weights computes with other ones, so neither the QDQ
model's verdict nor a bias correction fitted to the QDQ model's weight errors would hold for its
file.  :func:`with_target_weights` replaces, for every Conv, the integer weight, its scale and
zero point (one per tensor, the DequantizeLinear's ``axis`` dropped) and re-quantizes the int32
bias on the new ``input scale x weight scale``; the graph is unchanged::

    x -> DQ -> Conv(DQ(w_ort, s_c[axis 0]), DQ(b_int32, s_x * s_c)) -> Q
    x -> DQ -> Conv(DQ(w_target, s_w),      DQ(b'_int32, s_x * s_w)) -> Q

The integers come from the target (``Target.weight_integers(mode, hw)``), written by the code
its exporter uses, so the file holds exactly them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from ..ir.integers import int32_bias
from .params import QdqView

#: ``(float weight) -> (integers, scale, zero point)``, one scale and zero point per tensor.
WeightIntegers = Callable[[np.ndarray], tuple[np.ndarray, float, int]]


def with_target_weights(float_model: onnx.ModelProto, qdq_model: onnx.ModelProto,
                        integers: WeightIntegers) -> tuple[onnx.ModelProto, set[str]]:
    """(the QDQ model with the target's Conv weight integers, the float weights rewritten)."""
    view = QdqView(float_model, qdq_model)
    out = onnx.ModelProto()
    out.CopyFrom(qdq_model)
    inits = {i.name: i for i in out.graph.initializer}
    dq_of = {n.output[0]: n for n in out.graph.node if n.op_type == "DequantizeLinear"}
    floats = {i.name: i for i in float_model.graph.initializer}
    rewritten = set()
    for node in float_model.graph.node:
        weight = node.input[1] if node.op_type == "Conv" and len(node.input) > 1 else None
        edge = view.constants.get(weight) if weight else None
        source = view.activations.get(node.input[0])
        if edge is None or view.constant_consumers[weight] != [node.name] or source is None or source.scale.size != 1:
            continue
        q, scale, zero = integers(numpy_helper.to_array(floats[weight]))
        _set_dequantize(dq_of[edge.dequantized], inits, out, q, np.float32(scale), np.asarray(zero, q.dtype))
        rewritten.add(weight)
        bias = node.input[2] if len(node.input) > 2 else None
        bias_edge = view.constants.get(bias) if bias else None
        if bias_edge is not None and bias_edge.dtype == "int32" and view.constant_consumers[bias] == [node.name]:
            bias_scale = np.float32(np.float32(source.scale.reshape(())) * np.float32(scale))
            _set_dequantize(dq_of[bias_edge.dequantized], inits, out,
                            int32_bias(numpy_helper.to_array(floats[bias]), bias_scale), bias_scale, np.int32(0))
    return out, rewritten


def _set_dequantize(node: onnx.NodeProto, inits: dict, model: onnx.ModelProto, q: np.ndarray,
                    scale: np.float32, zero: np.ndarray) -> None:
    """``node`` (a DequantizeLinear of a constant) dequantizes ``q`` per tensor; its scale and
    zero point get initializers of their own (onnxruntime may share one between nodes)."""
    values = {0: np.ascontiguousarray(q), 1: np.asarray(scale, np.float32).reshape(()),
              2: np.asarray(zero).reshape(())}
    for index, value in values.items():
        name = node.input[index] if index == 0 else f"{node.input[0]}_target_{('', 'scale', 'zero_point')[index]}"
        if name in inits:
            inits[name].CopyFrom(numpy_helper.from_array(value, name))
        else:
            inits[name] = model.graph.initializer.add()
            inits[name].CopyFrom(numpy_helper.from_array(value, name))
        if index < len(node.input):
            node.input[index] = name
        else:
            node.input.append(name)
    kept = [a for a in node.attribute if a.name != "axis"]
    del node.attribute[:]
    node.attribute.extend(kept)
