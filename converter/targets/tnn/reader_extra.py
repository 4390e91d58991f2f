"""Round-trip reader for the layers of ``layers_extra.py``: TNN semantics -> ONNX.

Written from TNN's side (Tencent/TNN f0cb081): fields as the cited ``*_layer_interpreter.cc``
reads them, output types and shapes from ``source/tnn/layer/*_layer.cc``, values as
``source/tnn/device/cpu/acc/cpu_*_layer_acc.cc`` computes them, including where that differs
from ONNX (Range's truncated int count, LRN's window, NonZero's byte test, Size's dims {1}).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs
from onnx import TensorProto

from ...errors import BadInput
from .layer_types import DATA_FLOAT, DATA_INT8, DATA_INT32, DATA_UINT32
from .reader import ProtoLayer
from .reader_builder import LAYER_READERS, Builder, as_float, resource_of

#: TNN DataType -> ONNX TensorProto type.
_ONNX_TYPE = {DATA_FLOAT: TensorProto.FLOAT, DATA_INT8: TensorProto.INT8, DATA_INT32: TensorProto.INT32,
              DATA_UINT32: TensorProto.UINT32}


def _cast(b: Builder, x: gs.Tensor, onnx_type: int, output: gs.Variable | None = None) -> gs.Variable:
    return b.op("Cast", [x], output, to=onnx_type)


@LAYER_READERS.register(103)
def _layer_cast(b: Builder, layer: ProtoLayer) -> None:
    to = layer.fields.int(0)  # cast_layer_interpreter.cc: to (a TNN DataType), default 0
    if to not in _ONNX_TYPE:
        raise BadInput(f"TNN model: Cast to data type {to} is not read by edgeconv")
    _cast(b, b.get(layer.inputs[0]), _ONNX_TYPE[to], b.out(layer.outputs[0]))


@LAYER_READERS.register(324)
def _layer_equal(b: Builder, layer: ProtoLayer) -> None:
    # No interpreter; equal_layer.cc: output DATA_TYPE_INT8, dims = left-aligned max of the inputs.
    a, c = (b.get(n) for n in layer.inputs[:2])
    if len(a.shape) != len(c.shape):
        raise BadInput("TNN model: Equal inputs of different rank (DimsVectorUtils::Max aligns left)")
    _cast(b, b.op("Equal", [a, c]), TensorProto.INT8, b.out(layer.outputs[0]))


@LAYER_READERS.register(325)
def _layer_where(b: Builder, layer: ProtoLayer) -> None:
    # No interpreter; where_layer.cc / cpu_where_layer_acc.cc: inputs X, Y, condition; c != 0 ? x : y
    x, y, cond = (b.get(n) for n in layer.inputs[:3])
    if not len(x.shape) == len(y.shape) == len(cond.shape):
        raise BadInput("TNN model: Where inputs of different rank (DimsVectorUtils::Max aligns left)")
    mask = b.op("Not", [b.op("Equal", [cond, b.const(np.zeros((), cond.dtype))])])
    b.op("Where", [mask, x, y], b.out(layer.outputs[0]))


@LAYER_READERS.register(315)
def _layer_gather_nd(b: Builder, layer: ProtoLayer) -> None:
    if layer.fields.int(0) != 0:  # gathernd_layer_interpreter.cc: batch_dims
        raise BadInput("TNN model: GatherND batch_dims != 0 (cpu_gathernd_layer_acc.cc rejects it)")
    data, indices = (b.get(n) for n in layer.inputs[:2])
    b.op("GatherND", [data, _cast(b, indices, TensorProto.INT64)], b.out(layer.outputs[0]))


@LAYER_READERS.register(305)
def _layer_scatter_nd(b: Builder, layer: ProtoLayer) -> None:
    # cpu_scatter_nd_layer_acc.cc: 3 inputs = data, indices, updates; else indices from the resource
    res = b.net.resources.get(layer.name, {})
    blobs = [b.get(n) for n in layer.inputs]
    if len(blobs) >= 3:
        data, indices, updates = blobs[:3]
    elif "indices" in res:
        data, updates = blobs[:2]
        indices = b.const(res["indices"])
    else:
        raise BadInput(f"TNN model: ScatterND '{layer.name}' has no indices")
    b.op("ScatterND", [data, _cast(b, indices, TensorProto.INT64), updates], b.out(layer.outputs[0]))


@LAYER_READERS.register(72)
def _layer_shape(b: Builder, layer: ProtoLayer) -> None:
    # shape_layer.cc: int32 output with every dim of the input
    _cast(b, b.op("Shape", [b.get(layer.inputs[0])]), TensorProto.INT32, b.out(layer.outputs[0]))


@LAYER_READERS.register(312)
def _layer_size(b: Builder, layer: ProtoLayer) -> None:
    # size_layer.cc: int32, dims {1} (not a scalar)
    count = _cast(b, b.op("Size", [b.get(layer.inputs[0])]), TensorProto.INT32)
    b.op("Reshape", [count, b.const(np.array([1], np.int64))], b.out(layer.outputs[0]))


@LAYER_READERS.register(309)
def _layer_non_zero(b: Builder, layer: ProtoLayer) -> None:
    # cpu_nonzero_layer_acc.cc: an element counts when any of its bytes is non-zero, so -0.0 does.
    x = b.get(layer.inputs[0])
    mask = b.op("Not", [b.op("Equal", [x, b.const(np.zeros((), x.dtype))])])
    if np.dtype(x.dtype).kind == "f":
        negative_zero = b.op("IsInf", [b.op("Reciprocal", [x])], detect_positive=0)
        mask = b.op("Or", [mask, negative_zero])
    _cast(b, b.op("NonZero", [mask]), TensorProto.INT32, b.out(layer.outputs[0]))


@LAYER_READERS.register(311)
def _layer_range(b: Builder, layer: ProtoLayer) -> None:
    # range_layer.cc + DimsFunctionUtils::Range: count = ceil((limit - start) / delta), with the
    # quotient an int division for int32; cpu_range_layer_acc.cc: value_i = start + i * delta.
    start, limit, delta = (b.get(n) for n in layer.inputs[:3])
    span = b.op("Div", [b.op("Sub", [limit, start]), delta])
    if np.dtype(start.dtype).kind == "f":
        span = b.op("Ceil", [span])
    count = b.op("Max", [_cast(b, span, TensorProto.INT64), b.const(np.array(0, np.int64))])
    index = b.op("Range", [b.const(np.array(0, np.int64)), count, b.const(np.array(1, np.int64))])
    onnx_type = _ONNX_TYPE[DATA_FLOAT if np.dtype(start.dtype).kind == "f" else DATA_INT32]
    steps = b.op("Mul", [_cast(b, index, onnx_type), delta])
    b.op("Add", [steps, start], b.out(layer.outputs[0]))


@LAYER_READERS.register(308)
def _layer_constant_of_shape(b: Builder, layer: ProtoLayer) -> None:
    # constantofshape_layer.cc: output dims = the int32 input's values, type = the value's type
    value = np.asarray(resource_of(b, layer)["value"]).reshape(-1)[:1]
    shape = _cast(b, b.get(layer.inputs[0]), TensorProto.INT64)
    b.op("ConstantOfShape", [shape], b.out(layer.outputs[0]), value=gs.Constant("value", as_float(value)))


@LAYER_READERS.register(131)
def _layer_reorg(b: Builder, layer: ProtoLayer) -> None:
    f = layer.fields  # reorg_layer_interpreter.cc: stride forward run_with_output_dims mode
    stride, forward = f.int(), f.int()
    f.int()
    mode = f.int()
    x = b.get(layer.inputs[0])
    out = b.out(layer.outputs[0])
    # naive_compute.cc NaiveReorg: forward = depth -> space (mode 0 DCR, 1 CRD); backward inverts mode 0.
    if forward:
        b.op("DepthToSpace", [x], out, blocksize=stride, mode="CRD" if mode == 1 else "DCR")
    elif mode == 0:
        b.op("SpaceToDepth", [x], out, blocksize=stride)
    else:
        raise BadInput("TNN model: Reorg backward with mode 1 (CRD space-to-depth) is not read by edgeconv")


@LAYER_READERS.register(12)
def _layer_lrn(b: Builder, layer: ProtoLayer) -> None:
    f = layer.fields  # lrn_layer_interpreter.cc: alpha beta bias size
    alpha, beta, bias, size = f.float(), f.float(), f.float(), f.int()
    # cpu_lrn_layer_acc.cc: channels [c - (size-1)/2, c + (size-1)/2] (integer halves), scale alpha/size.
    window = 2 * ((size - 1) // 2) + 1
    b.op("LRN", [b.get(layer.inputs[0])], b.out(layer.outputs[0]), alpha=alpha * window / size, beta=beta,
         bias=bias, size=window)


@LAYER_READERS.register(317)
def _layer_roi_align(b: Builder, layer: ProtoLayer) -> None:
    f = layer.fields  # roialign_layer_interpreter.cc: mode out_h out_w sampling_ratio spatial_scale
    mode = f.int(1)
    out_h, out_w, ratio = f.int(), f.int(), f.int()
    scale = f.float()
    if mode != 1:
        raise BadInput("TNN model: max-mode RoiAlign is not read by edgeconv")
    x, rois, batch = (b.get(n) for n in layer.inputs[:3])
    # cpu_roialign_layer_acc.cc: roi_start = roi * spatial_scale, no half-pixel shift
    b.op("RoiAlign", [x, rois, _cast(b, batch, TensorProto.INT64)], b.out(layer.outputs[0]), mode="avg",
         output_height=out_h, output_width=out_w, sampling_ratio=ratio, spatial_scale=scale,
         coordinate_transformation_mode="output_half_pixel")


@LAYER_READERS.register(323)
def _layer_grid_sample(b: Builder, layer: ProtoLayer) -> None:
    f = layer.fields  # gridsample_layer_interpreter.cc: mode pad_type align_corners (2 0 0)
    mode, pad_type, align = f.int(2), f.int(0), f.int(0)
    if (mode, pad_type, align) != (2, 0, 0):
        raise BadInput("TNN model: GridSample other than bilinear/zeros/align_corners=0 cannot run "
                       "(cpu_gridsample_layer_acc.cc)")
    x, grid = (b.get(n) for n in layer.inputs[:2])
    # ix = (x + 1) * W / 2 - 0.5 with zero outside: ONNX bilinear, zeros, align_corners 0
    b.op("GridSample", [x, grid], b.out(layer.outputs[0]), mode="bilinear", padding_mode="zeros", align_corners=0)


@LAYER_READERS.register(321)
def _layer_einsum(b: Builder, layer: ProtoLayer) -> None:
    equation = layer.fields.text("")  # einsum_layer_interpreter.cc: one token, operands split by ';'
    b.op("Einsum", [b.get(n) for n in layer.inputs], b.out(layer.outputs[0]), equation=equation.replace(";", ","))


@LAYER_READERS.register(313)
def _layer_bit_shift(b: Builder, layer: ProtoLayer) -> None:
    direction, bits = layer.fields.int(0), layer.fields.int(0)  # bitshift_layer_interpreter.cc
    x = b.get(layer.inputs[0])
    # cpu_bitshift_layer_acc.cc shifts the 32-bit words as unsigned int: 0 = right, else left
    word = x if np.dtype(x.dtype) == np.uint32 else _cast(b, x, TensorProto.UINT32)
    shifted = b.op("BitShift", [word, b.const(np.array(bits, np.uint32))], direction="RIGHT" if direction == 0 else "LEFT")
    out = b.out(layer.outputs[0])
    if np.dtype(x.dtype) == np.uint32:
        b.op("Identity", [shifted], out)
    else:
        _cast(b, shifted, TensorProto.INT32, out)

