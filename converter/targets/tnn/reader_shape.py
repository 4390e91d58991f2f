"""Round-trip reader: TNN shape and data-movement layers -> ONNX, following the cited parsers."""

from __future__ import annotations

import numpy as np

from ...errors import BadInput
from .reader import ProtoLayer
from .reader_builder import LAYER_READERS, Builder, as_float


# -- shape and data movement ----------------------------------------------------------------------

@LAYER_READERS.register(9)
def _layer_reshape(b: Builder, layer: ProtoLayer) -> None:
    f = layer.fields  # reshape_layer_interpreter.cc: axis num_axes shape_size shape.. reshape_type
    axis, num_axes = f.int(0), f.int(0)
    size = f.int(-1)
    if size == -1:
        raise BadInput("TNN model: ReshapeLayerInterpreter: invalid layer param")
    shape = f.ints(size, 0)
    reshape_type = f.int(0)
    if reshape_type != 0:
        raise BadInput("TNN model: NHWC reshape (reshape_type 1) is not read by edgeconv")
    x = b.get(layer.inputs[0])
    in_dims = list(x.shape)
    if num_axes == -1:
        num_axes = len(shape)
    # DimsFunctionUtils::Reshape: 0 copies the input dim, -1 is inferred
    out = in_dims[:axis] + [1] * len(shape)
    infer = None
    for j in range(num_axes):
        i = axis + j
        if shape[j] == -1:
            infer = i
        elif shape[j] == 0:
            out[i] = in_dims[i]
        else:
            out[i] = shape[j]
    if infer is not None:
        out[infer] = int(np.prod(in_dims)) // int(np.prod(out))
    b.op("Reshape", [x, b.const(np.array(out, np.int64))], b.out(layer.outputs[0]))


@LAYER_READERS.register(10)
def _layer_flatten(b: Builder, layer: ProtoLayer) -> None:
    axis = layer.fields.int()  # flatten_layer_interpreter.cc (required)
    b.op("Flatten", [b.get(layer.inputs[0])], b.out(layer.outputs[0]), axis=axis)


@LAYER_READERS.register(32)
def _layer_permute(b: Builder, layer: ProtoLayer) -> None:
    n = layer.fields.int()  # permute_layer_interpreter.cc
    perm = layer.fields.ints(n)
    b.op("Transpose", [b.get(layer.inputs[0])], b.out(layer.outputs[0]), perm=perm)


@LAYER_READERS.register(8)
def _layer_concat(b: Builder, layer: ProtoLayer) -> None:
    axis = layer.fields.int(1)  # concat_layer_interpreter.cc: default 1
    b.op("Concat", [b.get(n) for n in layer.inputs], b.out(layer.outputs[0]), axis=axis)


@LAYER_READERS.register(153)
def _layer_splitv(b: Builder, layer: ProtoLayer) -> None:
    axis, count = layer.fields.int(0), layer.fields.int(0)  # splitv_layer_interpreter.cc
    slices = layer.fields.ints(count, 0)
    x = b.get(layer.inputs[0])
    axis = axis + len(x.shape) if axis < 0 else axis
    if not slices:  # splitv_layer.cc: an even split over the outputs
        slices = [x.shape[axis] // len(layer.outputs)] * len(layer.outputs)
    outs = [b.out(n) for n in layer.outputs]
    b.node("Split", [x, b.const(np.array(slices, np.int64))], outs, axis=axis)


@LAYER_READERS.register(118, 164)
def _layer_squeeze(b: Builder, layer: ProtoLayer) -> None:
    n = layer.fields.int(0)  # squeeze/unsqueeze_layer_interpreter.cc: n axes..
    axes = layer.fields.ints(n, 0)
    op = "Squeeze" if layer.type == 118 else "Unsqueeze"
    x = b.get(layer.inputs[0])
    b.op(op, [x, b.const(np.array(axes, np.int64))], b.out(layer.outputs[0]))


@LAYER_READERS.register(104)
def _layer_gather(b: Builder, layer: ProtoLayer) -> None:
    f = layer.fields  # gather_layer_interpreter.cc: axis data_in_resource indices_in_resource
    axis, data_in_res, indices_in_res = f.int(0), f.int(0), f.int(1)
    res = b.net.resources.get(layer.name, {})
    blobs = [b.get(n) for n in layer.inputs]
    data = b.const(as_float(res["data"])) if data_in_res else blobs[0]
    indices = b.const(res["indices"].astype(np.int64)) if indices_in_res else blobs[-1]
    b.op("Gather", [data, indices], b.out(layer.outputs[0]), axis=axis)


@LAYER_READERS.register(306)
def _layer_strided_slice_v2(b: Builder, layer: ProtoLayer) -> None:
    f = layer.fields  # stride_slice_v2_layer_interpreter.cc: n begins.. n ends.. n axes.. n strides..
    begins = f.ints(f.int())
    ends = f.ints(f.int())
    axes = f.ints(f.int())
    strides = f.ints(f.int())
    x = b.get(layer.inputs[0])
    dims = x.shape
    # DimsFunctionUtils::StrideSlice: negative begins/ends count from the end, INT_MAX = to the end
    fixed_ends = []
    for end, axis in zip(ends, axes):
        dim = dims[axis if axis >= 0 else axis + len(dims)]
        fixed_ends.append(dim if end >= dim else (end + dim if end < 0 else end))
    arrays = [np.array(v, np.int64) for v in (begins, fixed_ends, axes, strides)]
    b.op("Slice", [x, *(b.const(a) for a in arrays)], b.out(layer.outputs[0]))


_PAD_MODES = {0: "constant", 1: "reflect", 2: "edge"}


@LAYER_READERS.register(44)
def _layer_pad(b: Builder, layer: ProtoLayer) -> None:
    f = layer.fields  # pad_layer_interpreter.cc: n1 n2 t b l r c_begin c_end type value
    f.int(0), f.int(0)
    t, bottom, left, right, c_begin, c_end = f.ints(6, 0)
    mode, value = f.int(0), f.float(0.0)
    pads = [0, c_begin, t, left, 0, c_end, bottom, right]
    x = b.get(layer.inputs[0])
    b.op("Pad", [x, b.const(np.array(pads, np.int64)), b.const(np.float32(value))], b.out(layer.outputs[0]),
         mode=_PAD_MODES[mode])


@LAYER_READERS.register(316)
def _layer_padv2(b: Builder, layer: ProtoLayer) -> None:
    f = layer.fields  # padv2_layer_interpreter.cc: ndims pads(2n, ONNX order) type value
    n = f.int(0)
    pads = f.ints(2 * n)
    mode, value = f.int(0), f.float(0.0)
    x = b.get(layer.inputs[0])
    b.op("Pad", [x, b.const(np.array(pads, np.int64)), b.const(np.float32(value))], b.out(layer.outputs[0]),
         mode=_PAD_MODES[mode])


@LAYER_READERS.register(149)
def _layer_upsample(b: Builder, layer: ProtoLayer) -> None:
    f = layer.fields  # upsample_layer_interpreter.cc: mode scale_h scale_w [align_corners] [h w]
    mode, scale_h, scale_w = f.int(), f.float(), f.float()
    align = f.int(0)
    x = b.get(layer.inputs[0])
    n, c, h, w = x.shape
    if f.index + 1 < len(f.tokens):
        out_h, out_w = f.int(), f.int()
    else:  # DimsFunctionUtils::Upsample from the scales
        out_h, out_w = int(round(h * scale_h)), int(round(w * scale_w))
    sizes = b.const(np.array([n, c, out_h, out_w], np.int64))
    empty = b.const(np.zeros(0, np.float32))
    if mode == 1:  # cpu_upsample_layer_acc.cc: floor(j * in/out)
        attrs = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    elif mode == 2:
        attrs = dict(mode="linear", coordinate_transformation_mode="align_corners" if align else "half_pixel")
    else:
        raise BadInput(f"TNN model: Upsample mode {mode} is not read by edgeconv")
    b.op("Resize", [x, empty, empty, sizes], b.out(layer.outputs[0]), **attrs)


@LAYER_READERS.register(199)
def _layer_arg_max_or_min(b: Builder, layer: ProtoLayer) -> None:
    f = layer.fields  # arg_max_or_min_layer_interpreter.cc: mode axis keep_dims select_last_index
    mode, axis, keep = f.int(0), f.int(0), f.int(1)
    f.int(0)
    b.op("ArgMax" if mode == 1 else "ArgMin", [b.get(layer.inputs[0])], b.out(layer.outputs[0]),
         axis=axis, keepdims=keep)


@LAYER_READERS.register(148)
def _layer_tile(b: Builder, layer: ProtoLayer) -> None:
    reps = layer.fields.rest_ints()  # tile_layer_interpreter.cc: every remaining token
    x = b.get(layer.inputs[0])
    b.op("Tile", [x, b.const(np.array(reps, np.int64))], b.out(layer.outputs[0]))


@LAYER_READERS.register(304)
def _layer_expand(b: Builder, layer: ProtoLayer) -> None:
    n = layer.fields.int(0)  # expand_layer_interpreter.cc: shape_size shape..
    shape = layer.fields.ints(n, 0)
    x = b.get(layer.inputs[0])
    b.op("Expand", [x, b.const(np.array(shape, np.int64))], b.out(layer.outputs[0]))
