"""Fold a preprocessing spec into the model, exactly: the model then takes raw pixels.

After folding, the model input keeps its name, shape and layout but holds pixel values as
decoded (float32, 0..255, RGB/L order); range scaling, channel order and mean/std happen inside.
For 8-bit hardware this is also the best input: 0..255 quantizes with scale 1, no rounding.

The spec is one affine map per model channel (``PreprocessSpec.affine``):
``x[c] = raw[source[c]] * scale[c] + offset[c]``.  Two ways to fold it:

* **into the first Conv** (the input's only consumer, NCHW, ``group == 1``, constant weight)::

      raw -> Conv(W, b)                      with W'[:, source[c]] = W[:, c] * scale[c]
      (no padding)  b' = b + sum_{c,kh,kw} W[:, c] * offset[c]
      (padding)     raw -> Add(t) -> Conv(W', b),  t[source[c]] = offset[c] / scale[c]

  With padding the offset cannot move into the bias: the zeros Conv pads with are zeros of the
  *preprocessed* tensor, so the shift stays an explicit Add before the Conv (zeros of
  ``raw + t`` are zeros of the preprocessed tensor), and only the scale and the channel
  permutation move into the weights.

* **explicitly** (any other first consumer)::

      raw -> [Gather(source, channel axis)] -> Mul(scale) -> Add(offset) -> <old consumers>

Both are exact up to float32 re-association (tests: max abs error <= 1e-5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..errors import BadInput
from ..ir.graph import NameAllocator, attr, constant_value, to_graph, to_model
from .preprocess import PreprocessSpec

FOLD_RULE = "preprocess-fold"


@dataclass
class FoldResult:
    model: onnx.ModelProto
    #: "conv" (weights and bias), "conv+add" (weights, explicit shift) or "explicit".
    how: str
    #: One sentence for the report.
    detail: str


def _unpadded(conv: gs.Node) -> bool:
    auto_pad = attr(conv, "auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad == "VALID":
        return True
    return auto_pad == "NOTSET" and not any(int(p) for p in (attr(conv, "pads") or []))


def _foldable_conv(graph: gs.Graph, x: gs.Variable, spec: PreprocessSpec) -> gs.Node | None:
    if spec.layout != "nchw" or len(x.outputs) != 1 or x in graph.outputs:
        return None
    conv = x.outputs[0]
    if conv.op != "Conv" or conv.inputs[0] is not x or int(attr(conv, "group", 1)) != 1:
        return None
    weight = constant_value(conv.inputs[1]) if len(conv.inputs) > 1 else None
    if weight is None or weight.ndim != 4 or weight.shape[1] != spec.channels:
        return None
    if len(conv.inputs) > 2 and conv.inputs[2].name and constant_value(conv.inputs[2]) is None:
        return None
    return conv


def fold_preprocess(model: onnx.ModelProto, spec: PreprocessSpec) -> FoldResult:
    """The model with the (bound) spec folded in; see the module docstring."""
    if spec.input is None:
        raise ValueError("bind the spec to the model first")
    graph = to_graph(model)
    names = NameAllocator(graph)
    x = next((t for t in graph.inputs if t.name == spec.input), None)
    if x is None:
        raise BadInput(f"--preprocess: the model has no input '{spec.input}'")
    source, scale, offset = spec.affine()
    raw = gs.Variable(spec.input, dtype=np.float32, shape=list(x.shape))
    x.name = names(f"{spec.input}_preprocessed")
    graph.inputs = [raw if t is x else t for t in graph.inputs]
    prov = graph.provenance

    conv = _foldable_conv(graph, x, spec)
    if conv is not None:
        weight = constant_value(conv.inputs[1]).astype(np.float64)
        folded = np.zeros_like(weight)
        for c, src in enumerate(source):
            folded[:, src] = weight[:, c] * scale[c]
        conv.inputs[1] = gs.Constant(names(f"{conv.name}_weight_folded"), folded.astype(np.float32))
        if _unpadded(conv):
            bias = constant_value(conv.inputs[2]).astype(np.float64) if len(conv.inputs) > 2 and conv.inputs[2].name \
                else np.zeros(weight.shape[0])
            bias = bias + np.einsum("ochw,c->o", weight, offset)
            bias_const = gs.Constant(names(f"{conv.name}_bias_folded"), bias.astype(np.float32))
            conv.inputs = [raw, conv.inputs[1], bias_const]
            prov.record_node(conv.name, conv.name, FOLD_RULE)
            return FoldResult(to_model(graph), "conv", f"scale, channel order and offset folded into {conv.name}'s "
                              "weights and bias")
        shift = np.zeros(spec.channels)
        for c, src in enumerate(source):
            shift[src] = offset[c] / scale[c]
        shifted = gs.Variable(names(f"{spec.input}_shifted"), dtype=np.float32, shape=list(x.shape))
        add = gs.Node("Add", names("preprocess_shift"), {}, [raw, gs.Constant(
            names("preprocess_shift_value"), shift.reshape(1, -1, 1, 1).astype(np.float32))], [shifted])
        graph.nodes.append(add)
        conv.inputs[0] = shifted
        prov.record_node(add.name, conv.name, FOLD_RULE)
        prov.record_node(conv.name, conv.name, FOLD_RULE)
        return FoldResult(to_model(graph), "conv+add", f"scale and channel order folded into {conv.name}'s weights; "
                          "the offset stays an Add before it because the Conv pads")

    axis = spec.channel_axis
    bshape = [1, 1, 1, 1]
    bshape[axis] = spec.channels
    current = raw
    nodes = []
    if source != list(range(spec.channels)):
        out = gs.Variable(names(f"{spec.input}_reordered"), dtype=np.float32, shape=list(x.shape))
        nodes.append(gs.Node("Gather", names("preprocess_channel_order"), {"axis": axis},
                             [current, gs.Constant(names("preprocess_channels"), np.array(source, dtype=np.int64))], [out]))
        current = out
    scaled = gs.Variable(names(f"{spec.input}_scaled"), dtype=np.float32, shape=list(x.shape))
    nodes.append(gs.Node("Mul", names("preprocess_scale"), {}, [current, gs.Constant(
        names("preprocess_scale_value"), scale.reshape(bshape).astype(np.float32))], [scaled]))
    nodes.append(gs.Node("Add", names("preprocess_offset"), {}, [scaled, gs.Constant(
        names("preprocess_offset_value"), offset.reshape(bshape).astype(np.float32))], [x]))
    graph.nodes.extend(nodes)
    for node in nodes:
        prov.record_node(node.name, node.name, FOLD_RULE)
    return FoldResult(to_model(graph), "explicit", "preprocessing inserted as "
                      + " -> ".join(n.op for n in nodes) + f" before the consumers of '{spec.input}'")
