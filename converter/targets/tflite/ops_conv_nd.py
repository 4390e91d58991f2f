"""Convolutions and pools beyond the 2-D, ungrouped cases of ``ops_nn``.

* 1-D Conv / ConvTranspose / MaxPool / AveragePool: TFLite has no 1-D builtins; TensorFlow's own
  converter lowers tf.nn.conv1d to CONV_2D on an ``(n, 1, l, c)`` view (tensorflow/python/ops/
  nn_ops.py ``conv1d``: expand_dims then conv2d).  Here too: the NLC data is RESHAPEd to NHWC with
  H = 1 and the node is lowered as the 2-D op with a 1 x k window.
* 3-D Conv -> CONV_3D (tensorflow/lite/kernels/conv3d.cc: NDHWC input, filter [kd, kh, kw, cin,
  cout], optional bias, no groups).  3-D pools have no builtin (TensorFlow's MaxPool3D and
  AveragePool3D are *custom* ops, tensorflow/lite/kernels/pooling3d.cc), so they stay refused.
* ConvTranspose with dilations: a dilated kernel is the kernel with (d-1) zeros between taps, so
  TRANSPOSE_CONV with that bigger kernel is exact.  With groups: SPLIT the channels, one
  TRANSPOSE_CONV per group, CONCATENATION (TransposeConvOptions has no groups, schema.fbs).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...ir.graph import attr
from . import layout as L
from . import ops_nn as nn
from .registry import OPS
from .ops_tensor import SubNode, builtin_options

_NLC = (0, 2, 1)  # an (n, c, l) tensor stored as (n, l, c): the same bytes as NHWC of (n, c, 1, l)


def _two_d_attrs(node) -> dict:
    """The attributes of the 2-D twin of a 1-D window node (H: size 1, stride 1, no padding)."""
    attrs = dict(node.attrs)
    for name, lead in (("kernel_shape", 1), ("strides", 1), ("dilations", 1), ("output_padding", 0),
                       ("output_shape", 1)):
        if name in attrs:
            attrs[name] = [lead] + list(attrs[name])
    if "pads" in attrs:
        b, e = attrs["pads"]
        attrs["pads"] = [0, b, 0, e]
    return attrs


def _weights_2d(t: gs.Tensor, value: np.ndarray | None) -> gs.Tensor:
    if value is None:
        return t
    return gs.Constant(f"{t.name}/as_2d", np.ascontiguousarray(np.expand_dims(np.asarray(value), 2)))


def lift_1d(lower_2d):
    """Wrap a 2-D lowering so that it also lowers the 1-D (rank-3 input) form of the op."""

    def lower(Lw, node):
        x = node.inputs[0]
        if Lw.rank(x) != 3:
            return lower_2d(Lw, node)
        if len(node.outputs) > 1 and node.outputs[1].name and node.outputs[1].outputs:
            raise Lw.unsupported("MaxPool indices output has no builtin")
        n, c, length = Lw.shape(x)
        y = node.outputs[0]
        _, cy, ly = Lw.shape(y)
        dtype = np.float32
        x4 = gs.Variable(f"{node.name}/input_2d", dtype=dtype, shape=(n, c, 1, length))
        view = Lw.temp(x4.name, (n, 1, length, c), dtype)
        Lw.reshape_to(Lw.get(x, _NLC), view, (n, 1, length, c))
        Lw.bind(x4, L.NHWC, view, (n, c, 1, length))
        y4 = gs.Variable(f"{node.name}/output_2d", dtype=dtype, shape=(n, cy, 1, ly))
        inputs = [x4] + [_weights_2d(t, Lw.const(t)) if k == 1 else t for k, t in enumerate(node.inputs[1:], 1)]
        lower_2d(Lw, SubNode(node.op, node.name, inputs, [y4], _two_d_attrs(node)))
        Lw.reshape_to(Lw.get(y4, L.NHWC), Lw.define(y, _NLC), (n, ly, cy))

    lower.__doc__ = f"1-D or 2-D: {lower_2d.__doc__ or lower_2d.__name__}"
    return lower


def _explicit_pads(node, spatial, out_spatial, kernel, strides, dilations) -> list[tuple[int, int]]:
    auto_pad = attr(node, "auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    r = len(spatial)
    if auto_pad == "VALID":
        return [(0, 0)] * r
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for i, o, k, s, d in zip(spatial, out_spatial, kernel, strides, dilations):
            total = max((o - 1) * s + (k - 1) * d + 1 - i, 0)
            small, big = total // 2, total - total // 2
            pads.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
        return pads
    flat = list(attr(node, "pads", [0] * (2 * r)))
    return list(zip(flat[:r], flat[r:]))


def lower_conv_3d(Lw, node):
    """3-D Conv (group 1) -> [PAD] + CONV_3D (VALID) on NDHWC data."""
    x, w_t = node.inputs[:2]
    weights = Lw.const(w_t)
    if weights is None:
        raise Lw.unsupported("weights must be constant")
    if int(attr(node, "group", 1)) != 1:
        raise Lw.unsupported("grouped 3-D Conv: CONV_3D has no groups (conv3d.cc)")
    weights = np.asarray(weights, np.float32)
    cout, cin, *kernel = weights.shape
    shape, out_shape = Lw.shape(x), Lw.shape(node.outputs[0])
    strides = list(attr(node, "strides", [1, 1, 1]))
    dilations = list(attr(node, "dilations", [1, 1, 1]))
    pads = _explicit_pads(node, shape[2:], out_shape[2:], kernel, strides, dilations)
    ndhwc = (0, 2, 3, 4, 1)
    src = Lw.get(x, ndhwc)
    if any(p for pair in pads for p in pair):
        n, d, h, w, c = Lw.w.tensors[src].shape
        padded = Lw.temp(f"{node.name}/padded", (n, d + sum(pads[0]), h + sum(pads[1]), w + sum(pads[2]), c))
        Lw.emit("PAD", [src, Lw.int32(f"{node.name}/paddings", [[0, 0], *pads, [0, 0]])], [padded],
                builtin_options("PadOptions"))
        src = padded
    bias = Lw.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2].name else None
    bias = np.zeros(cout, np.float32) if bias is None else np.asarray(bias, np.float32)
    filt = Lw.constant(f"{node.name}/filter", weights.transpose(2, 3, 4, 1, 0))
    opts = builtin_options("Conv3DOptions", padding=nn.fb.Padding.VALID, strideD=strides[0], strideH=strides[1],
                    strideW=strides[2], dilationDFactor=dilations[0], dilationHFactor=dilations[1],
                    dilationWFactor=dilations[2])
    Lw.emit("CONV_3D", [src, filt, Lw.constant(f"{node.name}/bias", bias)], [Lw.define(node.outputs[0], ndhwc)], opts)


@OPS.register("Conv")
def lower_conv(Lw, node):
    """Conv: 1-D (lifted), 2-D (``ops_nn.lower_conv``) or 3-D (CONV_3D)."""
    if Lw.rank(node.inputs[0]) == 5:
        return lower_conv_3d(Lw, node)
    return lift_1d(nn.lower_conv)(Lw, node)


def _undilated(weights: np.ndarray, dilations) -> np.ndarray:
    """The kernel with (d - 1) zeros between taps: same result without dilation."""
    cin, cout, kh, kw = weights.shape
    dh, dw = dilations
    out = np.zeros((cin, cout, (kh - 1) * dh + 1, (kw - 1) * dw + 1), np.float32)
    out[:, :, ::dh, ::dw] = weights
    return out


def lower_conv_transpose_2d(Lw, node):
    """2-D ConvTranspose with any groups/dilations -> TRANSPOSE_CONV per group (see module doc)."""
    group = int(attr(node, "group", 1))
    dilations = list(attr(node, "dilations", [1, 1]))
    weights = Lw.const(node.inputs[1])
    if (group == 1 and dilations == [1, 1]) or weights is None:
        return nn.lower_conv_transpose(Lw, node)
    weights = _undilated(np.asarray(weights, np.float32), dilations)
    attrs = dict(node.attrs, dilations=[1, 1], group=1, kernel_shape=list(weights.shape[2:]))
    bias = Lw.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2].name else None
    x, y = node.inputs[0], node.outputs[0]
    n, cin, h, w = Lw.shape(x)
    _, cout, oh, ow = Lw.shape(y)
    cin_g, cout_g = cin // group, cout // group
    src = Lw.get(x, L.NHWC)
    parts = []
    if group == 1:
        parts = [x]
    else:
        split_idx = [Lw.temp(f"{node.name}/group{g}_input", (n, h, w, cin_g)) for g in range(group)]
        Lw.emit("SPLIT", [Lw.int32(f"{node.name}/channel_axis", 3), src], split_idx,
                builtin_options("SplitOptions", numSplits=group))
        for g, index in enumerate(split_idx):
            part = gs.Variable(f"{node.name}/group{g}_input", dtype=np.float32, shape=(n, cin_g, h, w))
            Lw.bind(part, L.NHWC, index, (n, cin_g, h, w))
            parts.append(part)
    outs = []
    for g, part in enumerate(parts):
        w_g = gs.Constant(f"{node.name}/group{g}_filter", np.ascontiguousarray(weights[g * cin_g:(g + 1) * cin_g]))
        ins = [part, w_g]
        if bias is not None:
            ins.append(gs.Constant(f"{node.name}/group{g}_bias",
                                   np.ascontiguousarray(np.asarray(bias, np.float32)[g * cout_g:(g + 1) * cout_g])))
        out_g = y if group == 1 else gs.Variable(f"{node.name}/group{g}_output", dtype=np.float32,
                                                   shape=(n, cout_g, oh, ow))
        nn.lower_conv_transpose(Lw, SubNode("ConvTranspose", f"{node.name}/group{g}", ins, [out_g], attrs))
        outs.append(out_g)
    if group > 1:
        Lw.emit("CONCATENATION", [Lw.get(o, L.NHWC) for o in outs], [Lw.define(y, L.NHWC)],
                builtin_options("ConcatenationOptions", axis=3))


lower_conv_transpose = OPS.register("ConvTranspose")(lift_1d(lower_conv_transpose_2d))
lower_max_pool = OPS.register("MaxPool")(lift_1d(nn.lower_max_pool))
lower_average_pool = OPS.register("AveragePool")(lift_1d(nn.lower_average_pool))
