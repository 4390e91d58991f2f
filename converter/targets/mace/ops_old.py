"""ONNX node -> MACE ``OperatorDef``(s): one small function per ONNX op.

Each function reads one onnx-graphsurgeon node and emits MACE ops through an :class:`Emitter`
(``netdef_writer.py``).  Type strings, argument names, enums, defaults and input order follow
MACE's kernels (XiaoMi/mace ``mace/ops/*.cc``) and its ONNX converter
(``tools/python/transform/onnx_converter.py``); each function cites the file it follows.

Data-format convention (MACE's own for ONNX, ``tools/python/transform/base_converter.py`` and
``transformer.py:transpose_data_format``): CPU float runs NCHW.  Fixed-format ops (Conv2D,
Deconv2D, DepthwiseConv2d, Pooling, BatchNorm) get ``data_format=AUTO``; transposable ops whose
input is 4-D (Activation, Eltwise, Concat, Pad, Reduce, Softmax) get ``data_format=AUTO`` and
``has_data_format=1``, and then their axis/padding arguments are written in NHWC order (the CPU
kernels remap them to NCHW).  All other ops keep the source format ``data_format=NCHW`` and
index the tensor as it is.  Unlike MACE's converter we never store 4-D non-filter constants
(which MACE would expect in NHWC order): per-channel operands are written 1-D ``[C]``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx_graphsurgeon as gs

from ...errors import Unsupported
from ...graph import attr, constant_value
from .data_file import DT_FLOAT, DT_INT32

# include/mace/public/mace.h DataFormat
DF_NONE, DF_NHWC, DF_NCHW, DF_AUTO = 0, 1, 2, 1000
# mace/ops/common/eltwise_type.h
SUM, SUB, PROD, DIV, MIN, MAX, NEG, ABS, SQR_DIFF, POW = range(10)
CLIP = 12
# mace/ops/common/pooling_type.h, reduce_type.h, pad_type.h, conv_pool_2d_util.h RoundType
POOL_AVG, POOL_MAX = 1, 2
REDUCE_MEAN, REDUCE_MIN, REDUCE_MAX, REDUCE_PROD, REDUCE_SUM = range(5)
PAD_CONSTANT, PAD_REFLECT, PAD_SYMMETRIC = 0, 1, 2
ROUND_FLOOR, ROUND_CEIL = 0, 1
FRAMEWORK_ONNX = 2  # mace/core/types.h FrameworkType

#: NCHW axis -> NHWC axis (the order has_data_format kernels read).
NCHW_TO_NHWC_AXIS = {0: 0, 1: 3, 2: 1, 3: 2}


def _fail(node: gs.Node, why: str) -> Unsupported:
    return Unsupported(f"MACE cannot express node '{node.name}' ({node.op}): {why}")


def _const(node: gs.Node, i: int, what: str) -> np.ndarray:
    value = constant_value(node.inputs[i]) if i < len(node.inputs) else None
    if value is None:
        raise _fail(node, f"{what} must be a constant")
    return value


def _optional_const(node: gs.Node, i: int) -> np.ndarray | None:
    if i >= len(node.inputs) or node.inputs[i].name == "":
        return None
    return constant_value(node.inputs[i])


def _rank(em, tensor) -> int:
    return len(em.shape(tensor))


def _split_pads(node: gs.Node, pads: list[int]) -> tuple[list[int], list[int]]:
    half = len(pads) // 2
    return pads[:half], pads[half:]


def _explicit_pads(em, node: gs.Node, kernel, strides, dilations) -> list[int]:
    """ONNX pads ``[t, l, b, r]``, resolving auto_pad from static shapes."""
    auto_pad = attr(node, "auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad in ("NOTSET", "VALID"):
        return [int(p) for p in attr(node, "pads", [0, 0, 0, 0])] if auto_pad == "NOTSET" else [0] * 4
    h, w = em.shape(node.inputs[0])[2:]
    begin, end = [], []
    for size, k, s, d in zip((h, w), kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return begin + end


def _mace_pad_ok(begin: list[int], end: list[int]) -> bool:
    """MACE applies a total pad as top = total >> 1 (``mace/ops/ref/conv_2d.cc:66``,
    ``mace/ops/pooling.cc`` pad_hw = paddings / 2): only begin == total // 2 is expressible."""
    return all(b == (b + e) // 2 for b, e in zip(begin, end))


def _pad_nchw_to_nhwc_list(begin: list[int], end: list[int]) -> list[int]:
    """4-D Pad ``paddings`` for has_data_format=1: [before, after] per dim in NHWC order
    (``mace/ops/pad.cc:71-75`` remaps them with {0,1,6,7,2,3,4,5})."""
    per_dim = [(begin[i], end[i]) for i in range(4)]
    out = []
    for d in (0, 2, 3, 1):
        out.extend(per_dim[d])
    return out


def _explicit_pad_op(em, node: gs.Node, x: str, begin_hw, end_hw, value: float) -> str:
    n, c, h, w = em.shape(node.inputs[0])
    shape = [n, c, h + begin_hw[0] + end_hw[0], w + begin_hw[1] + end_hw[1]]
    padded = em.tensor(f"{node.name}_pad", shape)
    em.op("Pad", f"{node.name}_pad", [x], [padded], transposable=True, args=[
        ("paddings", "ints", _pad_nchw_to_nhwc_list([0, 0, *begin_hw], [0, 0, *end_hw])),
        ("pad_type", "i", PAD_CONSTANT), ("constant_value", "f", value)])
    return padded


# ---------------------------------------------------------------- convolution family

def conv(em, node: gs.Node) -> None:
    """ONNX Conv -> Conv2D (filter OIHW) or DepthwiseConv2d (filter [1,C,kh,kw]).

    Args from ``mace/ops/conv_pool_2d_base.h:30-34`` (strides, padding_values = total pad per
    dim, dilations) and ``onnx_converter.py:convert_conv2d`` (kernels, group; depthwise only
    when group == C_in and one filter per group).  MACE pads ``total >> 1`` on top/left, so
    top/left-heavy ONNX pads are emitted as an explicit Pad first (MACE's converter gets these
    wrong, FORMAT-NOTES 7.2)."""
    weight = _const(node, 1, "the filter")
    bias = _optional_const(node, 2)
    if len(node.inputs) > 2 and node.inputs[2].name and bias is None:
        raise _fail(node, "the bias must be a constant")
    if weight.ndim != 4:
        raise _fail(node, "only 2-D convolution is supported")
    c_in = em.shape(node.inputs[0])[1]
    group = int(attr(node, "group", 1))
    kernel = list(weight.shape[2:])
    strides = [int(s) for s in attr(node, "strides", [1, 1])]
    dilations = [int(d) for d in attr(node, "dilations", [1, 1])]
    begin, end = _split_pads(node, _explicit_pads(em, node, kernel, strides, dilations))
    x = em.name_of(node.inputs[0])
    if not _mace_pad_ok(begin, end):
        x = _explicit_pad_op(em, node, x, begin, end, 0.0)
        begin, end = [0, 0], [0, 0]
    if group == 1:
        op_type, filt = "Conv2D", weight
    elif group == c_in and weight.shape[1] == 1 and weight.shape[0] == c_in:
        op_type, filt = "DepthwiseConv2d", weight.reshape(1, c_in, *kernel)
    else:
        raise _fail(node, f"group={group} convolution (MACE has Conv2D and depthwise only)")
    inputs = [x, em.weight(node.inputs[1].name, filt)]
    if bias is not None:
        inputs.append(em.weight(node.inputs[2].name, bias.reshape(-1)))
    em.op(op_type, node.name, inputs, [em.name_of(node.outputs[0])], fixed=True, args=[
        ("strides", "ints", strides), ("padding_values", "ints", [begin[0] + end[0], begin[1] + end[1]]),
        ("dilations", "ints", dilations), ("kernels", "ints", kernel), ("group", "i", group)])


def conv_transpose(em, node: gs.Node) -> None:
    """ONNX ConvTranspose -> Deconv2D with ONNX-style inputs (x, filter [O,I,kh,kw], bias).

    ``mace/ops/deconv_2d.cc:74-82``: input 2 is the bias only when ``framework_type`` != 0
    (TENSORFLOW), so framework_type=2 (ONNX) is written.  ``conv_pool_2d_util.cc
    CalcDeconvShape_Caffe``: out = (in-1)*s + k - total_pad, cropping total_pad/2 at top/left
    (``ops/ref/deconv_2d.cc``).  The filter is stored [O, I, kh, kw] (``transformer.py``
    swaps ONNX's [I, O, kh, kw]).  ``output_padding`` and begin-heavy pads, which MACE's
    converter refuses, become Deconv2D without padding followed by a Slice per spatial axis
    (``mace/ops/slice.cc``: one axis per op, ``starts``/``ends``/``axes`` args)."""
    weight = _const(node, 1, "the filter")
    bias = _optional_const(node, 2)
    if len(node.inputs) > 2 and node.inputs[2].name and bias is None:
        raise _fail(node, "the bias must be a constant")
    if weight.ndim != 4:
        raise _fail(node, "only 2-D transposed convolution is supported")
    if int(attr(node, "group", 1)) != 1:
        raise _fail(node, "grouped transposed convolution")
    if any(int(d) != 1 for d in attr(node, "dilations", [1, 1])):
        raise _fail(node, "dilated transposed convolution (Deconv2D has no dilations)")
    if attr(node, "output_shape") is not None:
        raise _fail(node, "explicit output_shape attribute; normalize the model first")
    auto_pad = attr(node, "auto_pad", "NOTSET")
    if (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) != "NOTSET":
        raise _fail(node, "auto_pad on ConvTranspose; normalize the model first")
    kernel = list(weight.shape[2:])
    strides = [int(s) for s in attr(node, "strides", [1, 1])]
    begin, end = _split_pads(node, [int(p) for p in attr(node, "pads", [0, 0, 0, 0])])
    out_pad = [int(p) for p in attr(node, "output_padding", [0, 0])]
    # ONNX output row o is full-buffer row o + begin; the rows kept end `end - out_pad` early.
    crop_end = [e - p for e, p in zip(end, out_pad)]
    if any(c < 0 for c in crop_end):
        raise _fail(node, "output_padding larger than the end padding (would need zero rows)")
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
    em.op("Deconv2D", node.name, inputs, [deconv_out], fixed=True, args=[
        ("strides", "ints", strides), ("padding_values", "ints", total), ("group", "i", 1)])
    if direct:
        return
    current = deconv_out
    for axis, (b, c, f) in enumerate(zip(begin, crop_end, full)):
        target = out if axis == 1 else em.tensor(f"{node.name}_crop_h", [n, c_out, out_h, full[1]])
        em.op("Slice", f"{node.name}_crop_{'hw'[axis]}", [current], [target], args=[
            ("axes", "ints", [axis + 2]), ("starts", "ints", [b]), ("ends", "ints", [f - c])])
        current = target


# ---------------------------------------------------------------- activations

def _activation(em, node: gs.Node, kind: str, extra=(), inputs=None) -> None:
    """Activation (``mace/ops/activation.cc:42-52``; math in ``mace/ops/ref/activation.cc``)."""
    x = [em.name_of(node.inputs[0])] + (inputs or [])
    em.op("Activation", node.name, x, [em.name_of(node.outputs[0])],
          transposable=_rank(em, node.inputs[0]) == 4, args=[("activation", "s", kind), *extra])


def relu(em, node):
    _activation(em, node, "RELU")


def sigmoid(em, node):
    _activation(em, node, "SIGMOID")


def tanh(em, node):
    _activation(em, node, "TANH")


def leaky_relu(em, node):
    """max(x,0) + min(x,0)*activation_coefficient (``ref/activation.cc`` LEAKYRELU)."""
    _activation(em, node, "LEAKYRELU", [("activation_coefficient", "f", float(attr(node, "alpha", 0.01)))])


def elu(em, node):
    """x<0: (exp(x)-1)*activation_coefficient (``ref/activation.cc`` ELU)."""
    _activation(em, node, "ELU", [("activation_coefficient", "f", float(attr(node, "alpha", 1.0)))])


def hard_sigmoid(em, node):
    """max(0, min(1, alpha*x + beta)) (``ref/activation.cc`` HARDSIGMOID)."""
    _activation(em, node, "HARDSIGMOID", [("hardsigmoid_alpha", "f", float(attr(node, "alpha", 0.2))),
                                          ("hardsigmoid_beta", "f", float(attr(node, "beta", 0.5)))])


def prelu(em, node):
    """PRELU takes alpha as input 1, one slope per channel of a 4-D NCHW tensor
    (``mace/ops/activation.cc:59-70``, ``activation.h PReLUActivation``)."""
    slope = _const(node, 1, "the slope")
    shape = em.shape(node.inputs[0])
    if len(shape) != 4:
        raise _fail(node, "PRelu needs a 4-D input")
    channels = shape[1]
    if slope.size == 1:
        slope = np.full(channels, float(slope.reshape(-1)[0]), np.float32)
    elif slope.size != channels or slope.reshape(-1).shape[0] != channels or (
            slope.ndim >= 3 and slope.shape[-2:] != (1, 1)) or slope.ndim > 3:
        raise _fail(node, f"slope of shape {list(slope.shape)} is not per-channel")
    _activation(em, node, "PRELU", inputs=[em.weight(node.inputs[1].name, slope.reshape(-1))])


def clip(em, node):
    """Clip(0, m) -> Activation RELUX (min(max(x,0),max_limit)); Clip(0, inf) -> RELU;
    otherwise Eltwise CLIP with coeff [min, max] (``mace/ops/eltwise.cc`` requires min < max)."""
    lo = _optional_const(node, 1)
    hi = _optional_const(node, 2)
    if (len(node.inputs) > 1 and node.inputs[1].name and lo is None) or (
            len(node.inputs) > 2 and node.inputs[2].name and hi is None):
        raise _fail(node, "min/max must be constants")
    lo = float(lo) if lo is not None else float("-inf")
    hi = float(hi) if hi is not None else float("inf")
    if lo == 0.0 and np.isinf(hi):
        return _activation(em, node, "RELU")
    if lo == 0.0:
        return _activation(em, node, "RELUX", [("max_limit", "f", hi)])
    lo, hi = max(lo, -3.4028234663852886e38), min(hi, 3.4028234663852886e38)
    if not lo < hi:
        raise _fail(node, "Eltwise CLIP needs min < max")
    em.op("Eltwise", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          transposable=_rank(em, node.inputs[0]) == 4, args=[("type", "i", CLIP), ("coeff", "floats", [lo, hi])])


# ---------------------------------------------------------------- element-wise

_ELTWISE = {"Add": SUM, "Sub": SUB, "Mul": PROD, "Div": DIV, "Min": MIN, "Max": MAX, "Pow": POW}


def eltwise(em, node: gs.Node) -> None:
    """Binary ONNX op -> Eltwise (``mace/ops/eltwise.cc:954-1120``).

    A scalar constant operand is dropped from the inputs and carried as ``scalar_input`` with
    ``scalar_input_index`` = its position (SUB/DIV swap on index 0).  With has_data_format a
    4-D input broadcasts a 1-D [C] operand per channel (``eltwise.cc:1064-1075``), so ONNX
    [1,C,1,1] constants are stored as [C]; other operands must have the same rank and broadcast
    only over size-1 dims (tail-aligned, numpy style, as ONNX)."""
    if len(node.inputs) != 2:
        raise _fail(node, "Eltwise takes exactly two inputs")
    kind = _ELTWISE[node.op]
    out_rank = len(em.shape(node.outputs[0]))
    values = [constant_value(t) for t in node.inputs]
    args = [("type", "i", kind)]
    inputs = []
    for i, (tensor, value) in enumerate(zip(node.inputs, values)):
        if value is not None and value.size == 1 and values[1 - i] is None:
            args += [("scalar_input", "f", float(value.reshape(-1)[0])), ("scalar_input_index", "i", i)]
            continue
        if value is not None:
            shape = tuple(value.shape)
            out_shape = tuple(em.shape(node.outputs[0]))
            full = (1,) * (out_rank - len(shape)) + shape
            if out_rank == 4 and full == (1, out_shape[1], 1, 1):
                inputs.append(em.weight(tensor.name, value.reshape(-1)))
                continue
            if out_rank == 4:
                # MACE expects other 4-D constants of AUTO ops in NHWC order and transposes
                # them at load (mace/flows/cpu/transpose_const.cc); we do not emit those.
                raise _fail(node, f"4-D constant operand of shape {list(shape)} is not per-channel")
            value = value.reshape(full)
            inputs.append(em.weight(tensor.name, value))
            continue
        if _rank(em, tensor) != out_rank:
            raise _fail(node, "operands of different rank")
        inputs.append(em.name_of(tensor))
    if len(inputs) == 0:
        raise _fail(node, "both operands are constant (fold constants first)")
    em.op("Eltwise", node.name, inputs, [em.name_of(node.outputs[0])], transposable=out_rank == 4, args=args)


def unary_eltwise(em, node: gs.Node) -> None:
    """Abs/Neg -> Eltwise ABS/NEG; Sqrt -> POW 0.5; Reciprocal -> POW -1 (``eltwise.cc``; the
    ONNX converter maps them the same way)."""
    kind, scalar = {"Abs": (ABS, None), "Neg": (NEG, None), "Sqrt": (POW, 0.5), "Reciprocal": (POW, -1.0)}[node.op]
    args = [("type", "i", kind)]
    if scalar is not None:
        args += [("scalar_input", "f", scalar), ("scalar_input_index", "i", 1)]
    em.op("Eltwise", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          transposable=_rank(em, node.inputs[0]) == 4, args=args)


# ---------------------------------------------------------------- pooling and reductions

def pool(em, node: gs.Node) -> None:
    """MaxPool/AveragePool -> Pooling (``mace/ops/pooling.cc:43-100``): pad top/left =
    padding_values/2, ``round_mode`` defaults to CEIL so FLOOR is always written, AVG divides
    by the number of valid (unpadded) elements = ONNX count_include_pad=0."""
    kernel = [int(k) for k in attr(node, "kernel_shape")]
    if len(kernel) != 2:
        raise _fail(node, "only 2-D pooling")
    strides = [int(s) for s in attr(node, "strides", [1, 1])]
    dilations = [int(d) for d in attr(node, "dilations", [1, 1])]
    begin, end = _split_pads(node, _explicit_pads(em, node, kernel, strides, dilations))
    if len(node.outputs) > 1 and node.outputs[1].name:
        raise _fail(node, "MaxPool indices output")
    is_max = node.op == "MaxPool"
    if not is_max and int(attr(node, "count_include_pad", 0)) and any(begin + end):
        raise _fail(node, "count_include_pad=1 with padding (MACE averages valid elements only)")
    x = em.name_of(node.inputs[0])
    if not _mace_pad_ok(begin, end):
        if not is_max:
            raise _fail(node, "top/left-heavy padding on AveragePool")
        x = _explicit_pad_op(em, node, x, begin, end, -3.4028234663852886e38)
        begin, end = [0, 0], [0, 0]
    em.op("Pooling", node.name, [x], [em.name_of(node.outputs[0])], fixed=True, args=[
        ("pooling_type", "i", POOL_MAX if is_max else POOL_AVG), ("kernels", "ints", kernel),
        ("strides", "ints", strides), ("padding_values", "ints", [begin[0] + end[0], begin[1] + end[1]]),
        ("dilations", "ints", dilations),
        ("round_mode", "i", ROUND_CEIL if int(attr(node, "ceil_mode", 0)) else ROUND_FLOOR)])


def _reduce(em, node: gs.Node, kind: int, axes: list[int], keepdims: bool) -> None:
    """Reduce (``mace/ops/reduce.cc:39-110``): ``axis`` ints, ``keepdims`` default false; with
    has_data_format on 4-D input the axes are read in NHWC order and remapped."""
    rank = _rank(em, node.inputs[0])
    axes = sorted(a % rank for a in axes) if axes else list(range(rank))
    if rank == 4:
        axes = sorted(NCHW_TO_NHWC_AXIS[a] for a in axes)
    em.op("Reduce", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          transposable=rank == 4, args=[("reduce_type", "i", kind), ("axis", "ints", axes),
                                        ("keepdims", "i", int(keepdims))])


_REDUCE = {"ReduceMean": REDUCE_MEAN, "ReduceMin": REDUCE_MIN, "ReduceMax": REDUCE_MAX,
           "ReduceProd": REDUCE_PROD, "ReduceSum": REDUCE_SUM}


def reduce(em, node: gs.Node) -> None:
    """ReduceX; opset-13 ReduceSum takes axes as an input (MACE's converter ignores it)."""
    if node.op == "ReduceSum" and len(node.inputs) > 1 and node.inputs[1].name:
        axes = [int(a) for a in _const(node, 1, "axes").reshape(-1)]
    else:
        axes = [int(a) for a in attr(node, "axes", [])]
    if not axes and int(attr(node, "noop_with_empty_axes", 0)):
        raise _fail(node, "noop_with_empty_axes")
    _reduce(em, node, _REDUCE[node.op], axes, bool(attr(node, "keepdims", 1)))


def global_pool(em, node: gs.Node) -> None:
    """GlobalAveragePool/GlobalMaxPool -> Reduce MEAN/MAX over H,W keepdims (as MACE's converter)."""
    _reduce(em, node, REDUCE_MEAN if node.op == "GlobalAveragePool" else REDUCE_MAX, [2, 3], True)


# ---------------------------------------------------------------- dense

def gemm(em, node: gs.Node) -> None:
    """Gemm -> MatMul (``mace/ops/matmul.cc``: transpose_a/transpose_b, bias [cols] as input 2,
    ``matmul.cc:195-207``).  alpha/beta other than 1 are folded into the constants."""
    alpha, beta = float(attr(node, "alpha", 1.0)), float(attr(node, "beta", 1.0))
    inputs = []
    for i in (0, 1):
        value = constant_value(node.inputs[i])
        if value is not None:
            value = value * alpha if (i == 1 and alpha != 1.0) else value
            inputs.append(em.weight(node.inputs[i].name, value.astype(np.float32)))
        else:
            if i == 1 or alpha != 1.0:
                if alpha != 1.0:
                    raise _fail(node, "alpha != 1 with a non-constant B")
            inputs.append(em.name_of(node.inputs[i]))
    if len(node.inputs) > 2 and node.inputs[2].name:
        bias = _const(node, 2, "C") * beta
        cols = em.shape(node.outputs[0])[1]
        bias = np.broadcast_to(bias, (cols,)) if bias.ndim <= 1 or bias.shape[0] == 1 else None
        if bias is None:
            raise _fail(node, "C must broadcast along rows")
        inputs.append(em.weight(node.inputs[2].name, np.ascontiguousarray(bias.reshape(-1), np.float32)))
    em.op("MatMul", node.name, inputs, [em.name_of(node.outputs[0])], args=[
        ("transpose_a", "i", int(attr(node, "transA", 0))), ("transpose_b", "i", int(attr(node, "transB", 0)))])


def matmul(em, node: gs.Node) -> None:
    """MatMul -> MatMul (rank >= 2 both sides; ``matmul.cc:50-86``)."""
    if _rank(em, node.inputs[0]) < 2 or _rank(em, node.inputs[1]) < 2:
        raise _fail(node, "MatMul operands must have rank >= 2")
    inputs = []
    for tensor in node.inputs:
        value = constant_value(tensor)
        inputs.append(em.weight(tensor.name, value) if value is not None else em.name_of(tensor))
    em.op("MatMul", node.name, inputs, [em.name_of(node.outputs[0])],
          args=[("transpose_a", "i", 0), ("transpose_b", "i", 0)])


# ---------------------------------------------------------------- shape ops

def _reshape_to(em, node: gs.Node, shape) -> None:
    """Reshape with the ``dim`` arg (``mace/ops/reshape.cc``), source format, no has_data_format
    so a 4-D ``dim`` is taken as-is (NCHW)."""
    em.op("Reshape", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          args=[("dim", "ints", [int(d) for d in shape])])


def reshape(em, node):
    if int(attr(node, "allowzero", 0)):
        raise _fail(node, "allowzero=1")
    _reshape_to(em, node, em.shape(node.outputs[0]))


def flatten(em, node):
    _reshape_to(em, node, em.shape(node.outputs[0]))


def squeeze(em, node):
    """Squeeze/Unsqueeze are shape-only; static shapes are known, so Reshape is exact and
    avoids the opset-13 axes-as-input forms MACE's converter crashes on."""
    _reshape_to(em, node, em.shape(node.outputs[0]))


def transpose(em, node):
    """Transpose (``mace/ops/transpose.cc:36-50``): ``dims`` = perm, rank 2..4."""
    rank = _rank(em, node.inputs[0])
    perm = [int(p) for p in attr(node, "perm", list(range(rank))[::-1])]
    if not 2 <= rank <= 4:
        raise _fail(node, f"Transpose of rank {rank} (MACE supports 2..4)")
    em.op("Transpose", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          args=[("dims", "ints", perm)])


def concat(em, node):
    """Concat (``mace/ops/concat.cc:33,58-68``): ``axis`` default 3; with has_data_format on
    4-D inputs the axis is NHWC-ordered."""
    rank = _rank(em, node.outputs[0])
    axis = int(attr(node, "axis")) % rank
    inputs = []
    for tensor in node.inputs:
        value = constant_value(tensor)
        if value is not None:
            raise _fail(node, "constant Concat operand")
        inputs.append(em.name_of(tensor))
    em.op("Concat", node.name, inputs, [em.name_of(node.outputs[0])], transposable=rank == 4,
          args=[("axis", "i", NCHW_TO_NHWC_AXIS[axis] if rank == 4 else axis)])


def softmax(em, node):
    """Softmax/LogSoftmax (``mace/ops/softmax.cc:49-66,242-246``): a 4-D NCHW input with
    axis 1 is a channel softmax; every other case normalizes the LAST axis whatever ``axis``
    says, so only those two ONNX axes are accepted."""
    rank = _rank(em, node.inputs[0])
    axis = int(attr(node, "axis", -1)) % rank
    if not (axis == rank - 1 or (rank == 4 and axis == 1)):
        raise _fail(node, f"softmax over axis {axis} of a rank-{rank} tensor (MACE: last axis, or channels of 4-D)")
    em.op("Softmax", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          transposable=rank == 4, args=[("axis", "i", axis), ("use_log", "i", int(node.op == "LogSoftmax"))])


def pad(em, node):
    """Pad (``mace/ops/pad.cc:64-75``): exactly 8 ``paddings`` ([before, after] per dim, NHWC
    order with has_data_format), ``pad_type`` CONSTANT 0 / REFLECT 1 (the CPU kernel reads
    ``pad_type``; MACE's converter writes ``padding`` and loses the mode), ``constant_value``."""
    if _rank(em, node.inputs[0]) != 4:
        raise _fail(node, "MACE Pad is 4-D only")
    pads = [int(p) for p in _const(node, 1, "pads").reshape(-1)]
    if len(node.inputs) > 3 and node.inputs[3].name:
        raise _fail(node, "Pad axes input")
    if any(p < 0 for p in pads):
        raise _fail(node, "negative pads")
    value = _optional_const(node, 2)
    mode = attr(node, "mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "reflect"):
        raise _fail(node, f"mode '{mode}' (MACE has constant, reflect and symmetric)")
    em.op("Pad", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])], transposable=True, args=[
        ("paddings", "ints", _pad_nchw_to_nhwc_list(pads[:4], pads[4:])),
        ("pad_type", "i", PAD_CONSTANT if mode == "constant" else PAD_REFLECT),
        ("constant_value", "f", float(value.reshape(-1)[0]) if value is not None and value.size else 0.0)])


_MACE_DTYPE = {"float32": DT_FLOAT, "int32": DT_INT32}


def cast(em, node):
    """Cast (``mace/ops/cast.cc:25-60``): kernels are registered by SOURCE type, so ``T`` is the
    input dtype (MACE's converter copies the producer's float and reads ints as floats), and
    the destination goes in ``output_type``."""
    import onnx

    src = em.dtype(node.inputs[0])
    dst = onnx.helper.tensor_dtype_to_np_dtype(int(attr(node, "to"))).name
    if src not in _MACE_DTYPE or dst not in _MACE_DTYPE:
        raise _fail(node, f"cast {src} -> {dst} (MACE casts between float32 and int32)")
    em.op("Cast", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          T=_MACE_DTYPE[src], output_types=[_MACE_DTYPE[dst]])


def batch_norm(em, node):
    """BatchNormalization -> BatchNorm with folded scale/offset (inference form, 3 inputs;
    ``mace/ops/batch_norm.cc:38-63``), as MACE's ONNX converter folds it."""
    scale, bias, mean, var = (_const(node, i, "statistics") for i in range(1, 5))
    if _rank(em, node.inputs[0]) != 4:
        raise _fail(node, "BatchNorm needs a 4-D input")
    factor = scale / np.sqrt(var + float(attr(node, "epsilon", 1e-5)))
    em.op("BatchNorm", node.name, [em.name_of(node.inputs[0]),
                                   em.weight(f"{node.name}_scale", factor.astype(np.float32)),
                                   em.weight(f"{node.name}_offset", (bias - mean * factor).astype(np.float32))],
          [em.name_of(node.outputs[0])], fixed=True, args=[])


CONVERTERS: dict[str, Callable] = {
    "Conv": conv, "ConvTranspose": conv_transpose,
    "Relu": relu, "Sigmoid": sigmoid, "Tanh": tanh, "LeakyRelu": leaky_relu, "Elu": elu,
    "HardSigmoid": hard_sigmoid, "PRelu": prelu, "Clip": clip,
    **{op: eltwise for op in _ELTWISE},
    "Abs": unary_eltwise, "Neg": unary_eltwise, "Sqrt": unary_eltwise, "Reciprocal": unary_eltwise,
    "MaxPool": pool, "AveragePool": pool, "GlobalAveragePool": global_pool, "GlobalMaxPool": global_pool,
    **{op: reduce for op in _REDUCE},
    "Gemm": gemm, "MatMul": matmul,
    "Reshape": reshape, "Flatten": flatten, "Squeeze": squeeze, "Unsqueeze": squeeze,
    "Transpose": transpose, "Concat": concat, "Softmax": softmax, "LogSoftmax": softmax,
    "Pad": pad, "Cast": cast, "BatchNormalization": batch_norm,
}

#: MACE op types with an OpenCL (GPU) kernel (``op_registrations.txt``, MACE_REGISTER_GPU_OP).
GPU_OPS = frozenset({"Conv2D", "DepthwiseConv2d", "Deconv2D", "Pooling", "Eltwise", "Activation",
                     "Softmax", "Concat", "Pad", "Reduce", "Reshape", "BatchNorm", "Squeeze"})
#: Hexagon DSP (``tools/python/transform/hexagon_converter.py:159-186``) and MTK APU
#: (``apu_converter.py:35-76``) op sets.
DSP_OPS = frozenset({"Activation", "BatchNorm", "Concat", "Conv2D", "Deconv2D", "DepthwiseConv2d",
                     "Eltwise", "Pad", "Pooling", "Reduce", "Reshape", "Softmax"})
APU_OPS = frozenset({"Activation", "Concat", "Conv2D", "DepthwiseConv2d", "Deconv2D", "Eltwise",
                     "Pad", "Pooling", "Reduce", "Reshape", "Softmax"})
