"""Read an int8 TNN network (``Quantized*`` layers, ``BlobScale`` resources) as a float model
that computes what TNN's int8 kernels compute.

* :func:`dequantize_int8` turns each quantized Convolution / InnerProduct resource back into
  float weights and biases: TNN stores ``scale[oc] = input_scale * weight_scale[oc]`` (the
  quantization tool folds the input blob's scale into the weights, tools/quantization/
  calibration.cc ``QuantizeConvParams``), so ``w = (q - zero_point) * scale[oc] / input_scale``
  and ``bias = bias_int32 * scale[oc]``;
* :func:`quantize_blobs` puts a QuantizeLinear/DequantizeLinear pair (int8, the blob's scale
  and zero point) on every blob that has a ``<blob>_scale_data_`` resource: TNN holds those blobs
  in int8 (its Reformat layers convert at the float/int8 borders), so their values are rounded to
  that grid, which onnxruntime then reproduces.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...errors import BadInput

BLOB_SCALE_SUFFIX = "_scale_data_"


def dequantize_int8(net) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Float resources for the quantized layers of ``net`` (in place); returns blob -> (scale, zero point)."""
    scales = {name[: -len(BLOB_SCALE_SUFFIX)]: (np.asarray(res["scale"], np.float32).reshape(-1),
                                                np.asarray(res["zero_point"], np.int8).reshape(-1))
              for name, res in net.resources.items() if name.endswith(BLOB_SCALE_SUFFIX)}
    for layer in net.layers:
        res = net.resources.get(layer.name)
        key = {1: "filter", 19: "weight"}.get(layer.type)
        if res is None or key is None or res.get(key) is None or res[key].dtype != np.int8:
            continue
        if layer.inputs[0] not in scales:
            raise BadInput(f"TNN model: int8 layer '{layer.name}' has no scale for its input blob '{layer.inputs[0]}'")
        in_scale = scales[layer.inputs[0]][0]
        q = res[key].astype(np.float32)
        out_channels = q.shape[0]
        scale = np.broadcast_to(np.asarray(res["scale"], np.float32).reshape(-1), (out_channels,))
        zero = np.broadcast_to(np.asarray(res["zero_point"], np.float32).reshape(-1), (out_channels,))
        shape = (out_channels,) + (1,) * (q.ndim - 1)
        w = (q - zero.reshape(shape)) * scale.reshape(shape)
        if in_scale.size == 1:
            w = w / in_scale[0]
        elif q.ndim == 4 and q.shape[1] == 1 and in_scale.size == out_channels:  # depthwise
            w = w / in_scale.reshape(shape)
        else:  # per-channel input scale: one per input channel (group 1)
            w = w / in_scale.reshape((1, -1) + (1,) * (q.ndim - 2))
        res[key] = w.astype(np.float32)
        if res.get("bias") is not None and np.asarray(res["bias"]).dtype == np.int32:
            res["bias"] = (res["bias"].astype(np.float64) * scale).astype(np.float32)
    return scales


def quantize_blobs(model: onnx.ModelProto, scales: dict[str, tuple[np.ndarray, np.ndarray]]) -> onnx.ModelProto:
    graph = model.graph
    produced = {o for n in graph.node for o in n.output}
    inputs = {i.name for i in graph.input}
    nodes = []
    for blob, (scale, zero) in sorted(scales.items()):
        if blob not in produced and blob not in inputs:
            continue
        per_channel = scale.size > 1
        base = f"{blob}/int8"
        graph.initializer.extend([numpy_helper.from_array(scale if per_channel else scale.reshape(()), f"{base}/scale"),
                                  numpy_helper.from_array(zero if per_channel else zero.reshape(()), f"{base}/zero")])
        source = f"{base}/float_in"
        if blob in produced:
            for node in graph.node:
                node.output[:] = [source if o == blob else o for o in node.output]
        else:
            source = blob
            for node in graph.node:
                node.input[:] = [f"{base}/dq" if i == blob else i for i in node.input]
        attrs = {"axis": 1} if per_channel else {}
        target = blob if blob in produced else f"{base}/dq"
        nodes += [helper.make_node("QuantizeLinear", [source, f"{base}/scale", f"{base}/zero"], [f"{base}/q"],
                                   name=f"{base}/quantize", **attrs),
                  helper.make_node("DequantizeLinear", [f"{base}/q", f"{base}/scale", f"{base}/zero"], [target],
                                   name=f"{base}/dequantize", **attrs)]
    graph.node.extend(nodes)
    # keep the node list topologically sorted (the pairs were appended last)
    from ...ir.graph import to_graph, to_model

    g = to_graph(model)
    g.toposort()
    out = to_model(g, cleanup=False)
    out.ir_version = model.ir_version
    return out
