"""A bound preprocessing spec as an ONNX graph: HxWxC uint8 image -> the model input.

    image (uint8 [H, W, C]) -> Cast(float32) -> Mul(step) -> Add(low) [-> Gather(channels, axis 2)]
        -> Sub(mean) -> Div(std) [-> Transpose(2, 0, 1)] -> Unsqueeze(0) -> <model input>

The nodes are the same float32 operations, in the same order, as the numpy reference
:func:`~converter.quantize.preprocess.apply_spec`, so every executor of this graph (onnxruntime,
the generated Python and C++) agrees with the reference.  Resizing is not in the graph: the app
decodes and resizes with its own image library (the spec says to what size).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..ir.graph import CANONICAL_OPSET, to_model
from .preprocess import PreprocessSpec

IMAGE = "image"


def spec_graph(spec: PreprocessSpec) -> gs.Graph:
    """The graph of a bound spec (``preprocess.bind``); its output is named like the model input."""
    if spec.input is None or spec.resize is None:
        raise ValueError("bind the spec to the model first")
    height, width = spec.resize
    lo, hi = spec.value_range
    image = gs.Variable(IMAGE, dtype=np.uint8, shape=[height, width, spec.channels])
    nodes: list[gs.Node] = []

    def add(op: str, name: str, inputs: list, attrs: dict | None = None, dtype=np.float32, shape=None) -> gs.Variable:
        out = gs.Variable(f"{name}_out", dtype=dtype, shape=shape)
        nodes.append(gs.Node(op, name, attrs or {}, inputs, [out]))
        return out

    hwc = [height, width, spec.channels]
    x = add("Cast", "to_float", [image], {"to": onnx.TensorProto.FLOAT}, shape=hwc)
    x = add("Mul", "scale_range", [x, gs.Constant("range_step", np.array((hi - lo) / 255.0, dtype=np.float32))], shape=hwc)
    x = add("Add", "shift_range", [x, gs.Constant("range_low", np.array(lo, dtype=np.float32))], shape=hwc)
    if spec.order == "bgr":
        x = add("Gather", "channel_order", [x, gs.Constant("bgr_channels", np.array([2, 1, 0], dtype=np.int64))],
                {"axis": 2}, shape=hwc)
    x = add("Sub", "subtract_mean", [x, gs.Constant("mean", spec.per_channel(spec.mean))], shape=hwc)
    x = add("Div", "divide_std", [x, gs.Constant("std", spec.per_channel(spec.std))], shape=hwc)
    if spec.layout == "nchw":
        x = add("Transpose", "to_chw", [x], {"perm": [2, 0, 1]}, shape=[spec.channels, height, width])
    out = gs.Variable(spec.input, dtype=np.float32, shape=list(spec.input_shape))
    nodes.append(gs.Node("Unsqueeze", "add_batch", {}, [x, gs.Constant("batch_axis", np.array([0], dtype=np.int64))],
                         [out]))
    return gs.Graph(nodes=nodes, inputs=[image], outputs=[out], name="preprocess", opset=CANONICAL_OPSET)


def spec_model(spec: PreprocessSpec) -> onnx.ModelProto:
    return to_model(spec_graph(spec))
