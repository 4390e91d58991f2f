"""The QDQ model for other activation ranges, without quantizing the model again.

Bias correction scores the QDQ model of two range layouts (:func:`.ranges.share_add_ranges`
and each tensor's own range), which differ only on the few tensors the Adds widen.  A second
``quantize_static`` repeats everything else (the per-channel weight quantization in Python: 4.8 s
for MobileNetV2 at 224x224).  :func:`with_ranges` instead re-stamps the scale and zero-point
initializers of the tensors whose range differs::

    x -> Q(s_a, z_a) -> DQ(s_a, z_a) -> Add     (ranges a)
    x -> Q(s_b, z_b) -> DQ(s_b, z_b) -> Add     (ranges b: the same graph, other constants)

It answers None, and the caller quantizes again, wherever the result could differ from what
onnxruntime would write: a tensor whose parameters are not the ``<tensor>_scale`` /
``<tensor>_zero_point`` pair its own Q/DQ alone read, whose current parameters are not
onnxruntime's ``compute_scale_zp`` of its range (overrides, restricted zero points), or that a
Conv/Gemm/MatMul reads (its int32 bias is quantized with that scale).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

_RANGE_FOLLOWERS = ("Relu", "Clip")  # onnxruntime's adjust_tensor_ranges: a lone input takes their range
_BIASED = ("Conv", "Gemm", "MatMul", "ConvTranspose")


def with_ranges(float_model: onnx.ModelProto, quantized: onnx.ModelProto, ranges_from, ranges_to,
                qtype) -> onnx.ModelProto | None:
    """``quantized`` (onnxruntime's QDQ model for ``ranges_from``) with ``ranges_to``, or None."""
    from onnxruntime.quantization.quant_utils import compute_scale_zp, get_qmin_qmax_for_qType

    changed = _changed(float_model, ranges_from, ranges_to)
    if changed is None:
        return None
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in quantized.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    if any(n.op_type in _BIASED for t in changed for n in _float_readers(float_model, t)):
        return None
    out = onnx.ModelProto()
    out.CopyFrom(quantized)
    inits = {i.name: i for i in out.graph.initializer}
    qmin, qmax = get_qmin_qmax_for_qType(qtype.tensor_type)
    for tensor in changed:
        scale_name, zero_name = f"{tensor}_scale", f"{tensor}_zero_point"
        if scale_name not in inits or zero_name not in inits:
            return None
        users = readers.get(scale_name, []) + readers.get(zero_name, [])
        if not users or any(n.op_type not in ("QuantizeLinear", "DequantizeLinear") for n in users) \
                or any(n.op_type == "QuantizeLinear" and n.input[0] != tensor for n in users):
            return None
        zero = numpy_helper.to_array(inits[zero_name])
        params = [compute_scale_zp(*_range(ranges, tensor), qmin, qmax) for ranges in (ranges_from, ranges_to)]
        (zero_from, scale_from), (zero_to, scale_to) = params
        if not (np.array_equal(np.asarray(scale_from, np.float32).reshape(-1),
                               numpy_helper.to_array(inits[scale_name]).reshape(-1))
                and np.array_equal(np.asarray(zero_from).astype(zero.dtype).reshape(-1), zero.reshape(-1))):
            return None
        _set(inits[scale_name], np.asarray(scale_to, np.float32))
        _set(inits[zero_name], np.asarray(zero_to).astype(zero.dtype))
    return out


def _set(init: onnx.TensorProto, value: np.ndarray) -> None:
    """``init`` holds ``value`` (its shape kept), stored as onnxruntime stored it (raw bytes or a
    typed field), so that the model is byte for byte the one onnxruntime would write."""
    value = value.reshape(tuple(init.dims))
    if init.HasField("raw_data"):
        init.CopyFrom(numpy_helper.from_array(value, init.name))
    else:
        init.CopyFrom(helper.make_tensor(init.name, init.data_type, list(init.dims), value.reshape(-1).tolist()))


def _range(ranges, tensor: str) -> tuple[np.ndarray, np.ndarray]:
    low, high = ranges.data[tensor].range_value
    return np.asarray(low, np.float32), np.asarray(high, np.float32)


def _float_readers(model: onnx.ModelProto, tensor: str) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if tensor in n.input]


def _changed(model: onnx.ModelProto, a, b) -> list[str] | None:
    """The tensors whose quantized range differs between ``a`` and ``b``, after onnxruntime's own
    adjustment (the lone input of a Relu/Clip takes the Relu/Clip output's range); None when the
    two do not cover the same tensors."""
    if a.data.keys() != b.data.keys():
        return None
    changed = {t for t in a.data if not np.array_equal(np.asarray(a.data[t].range_value), np.asarray(b.data[t].range_value))}
    for node in model.graph.node:
        if node.op_type in _RANGE_FOLLOWERS and node.output[0] in changed and len(_float_readers(model, node.input[0])) == 1:
            changed.add(node.input[0])
    return sorted(changed)
