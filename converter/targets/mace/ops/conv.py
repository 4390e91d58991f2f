"""Convolution, transposed convolution and pooling -> Conv2D / DepthwiseConv2d / Deconv2D /
DepthwiseDeconv2d / Pooling / Reduce."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from ....ir.graph import attr
from ..registry import OPS
from .common import (POOL_AVG, POOL_MAX, ROUND_CEIL, ROUND_FLOOR, const_input, explicit_pad_op,
                     explicit_pads, fail, mace_pad_ok, optional_const, split_pads)


@OPS.register("Conv")
def conv(em, node: gs.Node) -> None:
    """ONNX Conv -> Conv2D (filter OIHW) or DepthwiseConv2d (filter [1,C,kh,kw]).

    Args from ``mace/ops/conv_pool_2d_base.h:30-34`` (strides, padding_values = total pad per
    dim, dilations) and ``onnx_converter.py:convert_conv2d`` (kernels, group; depthwise only
    when group == C_in and one filter per group).  MACE pads ``total >> 1`` on top/left, so
    top/left-heavy ONNX pads are emitted as an explicit Pad first (MACE's converter gets these
    wrong, FORMAT-NOTES 7.2)."""
    weight = const_input(node, 1, "the filter")
    bias = optional_const(node, 2)
    if len(node.inputs) > 2 and node.inputs[2].name and bias is None:
        raise fail(node, "the bias must be a constant")
    if weight.ndim != 4:
        raise fail(node, "only 2-D convolution is supported")
    c_in = em.shape(node.inputs[0])[1]
    group = int(attr(node, "group", 1))
    kernel = list(weight.shape[2:])
    strides = [int(s) for s in attr(node, "strides", [1, 1])]
    dilations = [int(d) for d in attr(node, "dilations", [1, 1])]
    begin, end = split_pads(node, explicit_pads(em, node, kernel, strides, dilations))
    x = em.name_of(node.inputs[0])
    if not mace_pad_ok(begin, end):
        x = explicit_pad_op(em, node, x, begin, end, 0.0)
        begin, end = [0, 0], [0, 0]
    if group == 1:
        op_type, filt = "Conv2D", weight
    elif group == c_in and weight.shape[1] == 1 and weight.shape[0] == c_in:
        op_type, filt = "DepthwiseConv2d", weight.reshape(1, c_in, *kernel)
    else:
        raise fail(node, f"group={group} convolution (MACE has Conv2D and depthwise only)")
    inputs = [x, em.weight(node.inputs[1].name, filt)]
    if bias is not None:
        inputs.append(em.weight(node.inputs[2].name, bias.reshape(-1)))
    em.op(op_type, node.name, inputs, [em.name_of(node.outputs[0])], fixed=True, args=[
        ("strides", "ints", strides), ("padding_values", "ints", [begin[0] + end[0], begin[1] + end[1]]),
        ("dilations", "ints", dilations), ("kernels", "ints", kernel), ("group", "i", group)])


@OPS.register("ConvTranspose")
def conv_transpose(em, node: gs.Node) -> None:
    """ONNX ConvTranspose -> Deconv2D with ONNX-style inputs (x, filter [O,I,kh,kw], bias).

    ``mace/ops/deconv_2d.cc:74-82``: input 2 is the bias only when ``framework_type`` != 0
    (TENSORFLOW), so framework_type=2 (ONNX) is written.  ``conv_pool_2d_util.cc
    CalcDeconvShape_Caffe``: out = (in-1)*s + k - total_pad, cropping total_pad/2 at top/left
    (``ops/ref/deconv_2d.cc``).  The filter is stored [O, I, kh, kw] (``transformer.py``
    swaps ONNX's [I, O, kh, kw]).  ``output_padding`` and begin-heavy pads, which MACE's
    converter refuses, become Deconv2D without padding followed by a Slice per spatial axis
    (``mace/ops/slice.cc``: one axis per op, ``starts``/``ends``/``axes`` args).

    group > 1 -> DepthwiseDeconv2d (``mace/ops/depthwise_deconv2d.cc``; ``ref/depthwise_deconv_2d.cc``
    GroupDeconv2d reads filter[(p*group+g)*in_g + q] and ``CalcDeconvShape_Caffe`` takes
    out_channels = filter.dim(0) * group, i.e. a [C_out/group, C_in, kh, kw] filter: ONNX's
    [C_in, C_out/group, kh, kw] transposed as for Deconv2D)."""
    weight = const_input(node, 1, "the filter")
    bias = optional_const(node, 2)
    if len(node.inputs) > 2 and node.inputs[2].name and bias is None:
        raise fail(node, "the bias must be a constant")
    if weight.ndim != 4:
        raise fail(node, "only 2-D transposed convolution is supported")
    group = int(attr(node, "group", 1))
    if any(int(d) != 1 for d in attr(node, "dilations", [1, 1])):
        raise fail(node, "dilated transposed convolution (Deconv2D has no dilations)")
    if attr(node, "output_shape") is not None:
        raise fail(node, "explicit output_shape attribute; normalize the model first")
    auto_pad = attr(node, "auto_pad", "NOTSET")
    if (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) != "NOTSET":
        raise fail(node, "auto_pad on ConvTranspose; normalize the model first")
    kernel = list(weight.shape[2:])
    strides = [int(s) for s in attr(node, "strides", [1, 1])]
    begin, end = split_pads(node, [int(p) for p in attr(node, "pads", [0, 0, 0, 0])])
    out_pad = [int(p) for p in attr(node, "output_padding", [0, 0])]
    # ONNX output row o is full-buffer row o + begin; the rows kept end `end - out_pad` early.
    crop_end = [e - p for e, p in zip(end, out_pad)]
    if any(c < 0 for c in crop_end):
        raise fail(node, "output_padding larger than the end padding (would need zero rows)")
    inputs = [em.name_of(node.inputs[0]), em.weight(node.inputs[1].name, weight.transpose(1, 0, 2, 3))]
    if bias is not None:
        inputs.append(em.weight(node.inputs[2].name, bias.reshape(-1)))
    out = em.name_of(node.outputs[0])
    direct = all(b == (b + c) // 2 for b, c in zip(begin, crop_end))
    total = [b + c for b, c in zip(begin, crop_end)] if direct else [0, 0]
    in_hw = em.shape(node.inputs[0])[2:]
    full = [(i - 1) * s + k for i, s, k in zip(in_hw, strides, kernel)]
    n, c_out, out_h, _ = em.shape(node.outputs[0])
    deconv_out = out if direct else em.tensor(f"{node.name}_full", [n, c_out, *full])
    em.op("Deconv2D" if group == 1 else "DepthwiseDeconv2d", node.name, inputs, [deconv_out], fixed=True, args=[
        ("strides", "ints", strides), ("padding_values", "ints", total), ("group", "i", group)])
    if direct:
        return
    current = deconv_out
    for axis, (b, c, f) in enumerate(zip(begin, crop_end, full)):
        target = out if axis == 1 else em.tensor(f"{node.name}_crop_h", [n, c_out, out_h, full[1]])
        em.op("Slice", f"{node.name}_crop_{'hw'[axis]}", [current], [target], args=[
            ("axes", "ints", [axis + 2]), ("starts", "ints", [b]), ("ends", "ints", [f - c])])
        current = target



@OPS.register("MaxPool", "AveragePool")
def pool(em, node: gs.Node) -> None:
    """MaxPool/AveragePool -> Pooling (``mace/ops/pooling.cc:43-100``): pad top/left =
    padding_values/2, ``round_mode`` defaults to CEIL so FLOOR is always written, AVG divides
    by the number of valid (unpadded) elements = ONNX count_include_pad=0 (count_include_pad=1:
    an explicit zero Pad before an unpadded pool)."""
    kernel = [int(k) for k in attr(node, "kernel_shape")]
    if len(kernel) != 2:
        raise fail(node, "only 2-D pooling")
    strides = [int(s) for s in attr(node, "strides", [1, 1])]
    dilations = [int(d) for d in attr(node, "dilations", [1, 1])]
    begin, end = split_pads(node, explicit_pads(em, node, kernel, strides, dilations))
    if len(node.outputs) > 1 and node.outputs[1].name:
        raise fail(node, "MaxPool indices output")
    is_max = node.op == "MaxPool"
    x = em.name_of(node.inputs[0])
    if not is_max and int(attr(node, "count_include_pad", 0)) and any(begin + end):
        # MACE averages the valid elements only; counting the padding (PyTorch's AvgPool2d
        # default, MaxViT's downsampling) is a zero Pad op first, then a pool without padding.
        if int(attr(node, "ceil_mode", 0)):
            raise fail(node, "count_include_pad=1 with padding and ceil_mode (MACE averages valid elements only)")
        x = explicit_pad_op(em, node, x, begin, end, 0.0)
        begin, end = [0, 0], [0, 0]
    if not mace_pad_ok(begin, end):
        if not is_max:
            raise fail(node, "top/left-heavy padding on AveragePool")
        x = explicit_pad_op(em, node, x, begin, end, -3.4028234663852886e38)
        begin, end = [0, 0], [0, 0]
    em.op("Pooling", node.name, [x], [em.name_of(node.outputs[0])], fixed=True, args=[
        ("pooling_type", "i", POOL_MAX if is_max else POOL_AVG), ("kernels", "ints", kernel),
        ("strides", "ints", strides), ("padding_values", "ints", [begin[0] + end[0], begin[1] + end[1]]),
        ("dilations", "ints", dilations),
        ("round_mode", "i", ROUND_CEIL if int(attr(node, "ceil_mode", 0)) else ROUND_FLOOR)])


