"""ONNX convolution, pooling, matmul, normalization and resize -> TFLite builtins.

Convolutions, pools, resizes and depth/space shuffles run in NHWC (``layout.NHWC``); their
weights are transposed here, at export time.  Padding: TFLite only knows SAME (TensorFlow's:
extra row at the end) and VALID, so ONNX pads that are not exactly TF-SAME become an explicit
PAD (PADV2 with -FLT_MAX for max pooling) followed by a VALID op.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir.graph import attr
from ..onnx_attrs import str_attr
from . import layout as L
from ._generated import schema_generated as fb
from .registry import OPS
from .ops_tensor import positive_axis, builtin_options, lower_identity

_FLT_LOWEST = np.float32(-3.4028234663852886e38)


# -- padding -------------------------------------------------------------------------------
def _window(Lw, node, x_shape, out_shape, kernel):
    """(padding, explicit) for a 2-D window op: ``explicit`` is [(top, bottom), (left, right)] or None."""
    strides = attr(node, "strides", [1, 1])
    dilations = attr(node, "dilations", [1, 1])
    pads = list(attr(node, "pads", [0, 0, 0, 0]))
    auto_pad = attr(node, "auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    ins, outs = x_shape[2:], out_shape[2:]
    keff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if auto_pad == "VALID":
        return "VALID", None, strides, dilations
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0, 0, 0, 0]
        for i in range(2):
            total = max((outs[i] - 1) * strides[i] + keff[i] - ins[i], 0)
            small, big = total // 2, total - total // 2
            pads[i], pads[i + 2] = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    ceil_mode = bool(attr(node, "ceil_mode", 0))
    begins, ends = pads[:2], pads[2:]
    if ceil_mode:  # extend the end pad so that a VALID window produces the ceil-mode size
        ends = [max(e, (o - 1) * s + k - i - b) for e, o, s, k, i, b in zip(ends, outs, strides, keff, ins, begins)]
    if not any(begins) and not any(ends):
        return "VALID", None, strides, dilations
    same = all(
        outs[i] == math.ceil(ins[i] / strides[i])
        and (begins[i], ends[i]) == (_same_total(ins[i], strides[i], keff[i]) // 2,
                                     _same_total(ins[i], strides[i], keff[i]) - _same_total(ins[i], strides[i], keff[i]) // 2)
        for i in range(2)
    )
    if same:
        return "SAME", None, strides, dilations
    return "VALID", [(begins[0], ends[0]), (begins[1], ends[1])], strides, dilations


def _same_total(size: int, stride: int, keff: int) -> int:
    out = math.ceil(size / stride)
    return max((out - 1) * stride + keff - size, 0)


def _padded_input(Lw, node, x, explicit, fill: float = 0.0) -> int:
    src = Lw.get(x, L.NHWC)
    if explicit is None:
        return src
    n, h, w, c = Lw.w.tensors[src].shape
    (t, b), (l, r) = explicit
    # Convolutions reading one tensor with the same padding (a detection head's box and class
    # branches) share one PAD: one padded copy written per inference, not one per consumer.
    padded = Lw.__dict__.setdefault("_padded_inputs", {})
    key = (src, t, b, l, r, float(fill))
    if key in padded:
        return padded[key]
    out = Lw.temp(f"{node.name}/padded", (n, h + t + b, w + l + r, c), Lw.w.tensors[src].dtype)
    padded[key] = out
    paddings = Lw.int32(f"{node.name}/paddings", [[0, 0], [t, b], [l, r], [0, 0]])
    if fill == 0.0:
        Lw.emit("PAD", [src, paddings], [out], builtin_options("PadOptions"))
    else:
        value = Lw.constant(f"{node.name}/pad_value", np.array(fill, np.float32))
        Lw.emit("PADV2", [src, paddings, value], [out], builtin_options("PadV2Options"))
    return out


def _padding_enum(name: str) -> int:
    return fb.Padding.SAME if name == "SAME" else fb.Padding.VALID


def require_2d(Lw, node, x):
    if Lw.rank(x) != 4:
        raise Lw.unsupported(f"only 2-D spatial {node.op} is mapped (input rank {Lw.rank(x)})")


# -- convolutions -------------------------------------------------------------------------
def lower_conv(Lw, node):
    """Conv -> CONV_2D (groups=1), DEPTHWISE_CONV_2D (groups = in channels), grouped CONV_2D (v6)."""
    x, w_t = node.inputs[:2]
    require_2d(Lw, node, x)
    weights = Lw.const(w_t)
    if weights is None:
        raise Lw.unsupported("weights must be constant")
    weights = np.asarray(weights, np.float32)
    cout, cin_g, kh, kw = weights.shape
    cin = Lw.shape(x)[1]
    group = int(attr(node, "group", 1))
    bias = Lw.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2].name else None
    bias = np.zeros(cout, np.float32) if bias is None else np.asarray(bias, np.float32)
    padding, explicit, strides, dilations = _window(Lw, node, Lw.shape(x), Lw.shape(node.outputs[0]), (kh, kw))
    src = _padded_input(Lw, node, x, explicit)
    out = Lw.define(node.outputs[0], L.NHWC)
    b = Lw.constant(f"{node.name}/bias", bias)
    if group == 1 or group != cin or cout % cin:
        filt = Lw.constant(f"{node.name}/filter", weights.transpose(0, 2, 3, 1))
        opts = builtin_options("Conv2DOptions", padding=_padding_enum(padding), strideH=strides[0], strideW=strides[1],
                        dilationHFactor=dilations[0], dilationWFactor=dilations[1])
        Lw.emit("CONV_2D", [src, filt, b], [out], opts, grouped=group != 1)
    else:
        filt = Lw.constant(f"{node.name}/filter", weights.transpose(1, 2, 3, 0))
        opts = builtin_options("DepthwiseConv2DOptions", padding=_padding_enum(padding), strideH=strides[0],
                        strideW=strides[1], depthMultiplier=cout // cin,
                        dilationHFactor=dilations[0], dilationWFactor=dilations[1])
        Lw.emit("DEPTHWISE_CONV_2D", [src, filt, b], [out], opts)


def lower_conv_transpose(Lw, node):
    """ConvTranspose -> TRANSPOSE_CONV (VALID, bias input: v3) + STRIDED_SLICE for ONNX's pads.

    TRANSPOSE_CONV with VALID padding computes the full ``(in-1)*s + k`` result (and writes only
    bias where an ``output_shape`` reaches beyond it, which is what output_padding means), so ONNX
    ``pads`` become a crop of that full result.
    """
    x, w_t = node.inputs[:2]
    require_2d(Lw, node, x)
    weights = Lw.const(w_t)
    if weights is None:
        raise Lw.unsupported("weights must be constant")
    if int(attr(node, "group", 1)) != 1 or any(d != 1 for d in attr(node, "dilations", [1, 1])):
        raise Lw.unsupported("grouped or dilated ConvTranspose has no TRANSPOSE_CONV mapping")
    weights = np.asarray(weights, np.float32)
    cin, cout, kh, kw = weights.shape
    n, _, h, w = Lw.shape(x)
    _, _, oh, ow = Lw.shape(node.outputs[0])
    strides = attr(node, "strides", [1, 1])
    out_pad = attr(node, "output_padding", [0, 0])
    full = [(h - 1) * strides[0] + kh, (w - 1) * strides[1] + kw]
    auto_pad = attr(node, "auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        totals = [f + op - o for f, op, o in zip(full, out_pad, (oh, ow))]
        begins = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in totals]
    elif auto_pad == "VALID":
        begins = [0, 0]
    else:
        begins = list(attr(node, "pads", [0, 0, 0, 0])[:2])
    span = [max(f, b + o) for f, b, o in zip(full, begins, (oh, ow))]
    bias = Lw.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2].name else None
    bias = np.zeros(cout, np.float32) if bias is None else np.asarray(bias, np.float32)
    filt = Lw.constant(f"{node.name}/filter", weights.transpose(1, 2, 3, 0))
    shape_const = Lw.int32(f"{node.name}/output_shape", [n, span[0], span[1], cout])
    opts = builtin_options("TransposeConvOptions", padding=fb.Padding.VALID, strideH=strides[0], strideW=strides[1])
    inputs = [shape_const, filt, Lw.get(x, L.NHWC), Lw.constant(f"{node.name}/bias", bias)]
    if span == [oh, ow] and begins == [0, 0]:
        Lw.emit("TRANSPOSE_CONV", inputs, [Lw.define(node.outputs[0], L.NHWC)], opts)
        return
    full_t = Lw.temp(f"{node.outputs[0].name}/uncropped", (n, span[0], span[1], cout))
    Lw.emit("TRANSPOSE_CONV", inputs, [full_t], opts)
    Lw.emit("STRIDED_SLICE", [full_t, Lw.int32(f"{node.name}/crop_begin", [0, begins[0], begins[1], 0]),
                              Lw.int32(f"{node.name}/crop_end", [n, begins[0] + oh, begins[1] + ow, cout]),
                              Lw.int32(f"{node.name}/crop_strides", [1, 1, 1, 1])],
            [Lw.define(node.outputs[0], L.NHWC)], builtin_options("StridedSliceOptions"))


# -- pooling ---------------------------------------------------------------------------------
def lower_max_pool(Lw, node):
    x = node.inputs[0]
    require_2d(Lw, node, x)
    if len(node.outputs) > 1 and node.outputs[1].name and node.outputs[1].outputs:
        raise Lw.unsupported("MaxPool indices output has no builtin")
    if any(d != 1 for d in attr(node, "dilations", [1, 1])):
        raise Lw.unsupported("dilated MaxPool has no builtin")
    kernel = attr(node, "kernel_shape")
    padding, explicit, strides, _ = _window(Lw, node, Lw.shape(x), Lw.shape(node.outputs[0]), kernel)
    src = _padded_input(Lw, node, x, explicit, fill=float(_FLT_LOWEST))
    opts = builtin_options("Pool2DOptions", padding=_padding_enum(padding), strideH=strides[0], strideW=strides[1],
                    filterHeight=kernel[0], filterWidth=kernel[1])
    Lw.emit("MAX_POOL_2D", [src], [Lw.define(node.outputs[0], L.NHWC)], opts)


def lower_average_pool(Lw, node):
    """AveragePool: SAME when pads match (TFLite's SAME excludes padding = count_include_pad=0);
    else zero PAD (explicit pads plus the ceil_mode extension) + VALID AVERAGE_POOL_2D, which
    divides by k*k, rescaled by k*k/count where ONNX counts fewer elements: count_include_pad=0
    counts the window inside the input, =1 inside input + explicit pads (never the ceil extension,
    as onnxruntime's pool_functors.h and the ONNX reference do)."""
    x = node.inputs[0]
    require_2d(Lw, node, x)
    kernel = attr(node, "kernel_shape")
    x_shape, out_shape = Lw.shape(x), Lw.shape(node.outputs[0])
    padding, explicit, strides, _ = _window(Lw, node, x_shape, out_shape, kernel)
    include_pad = bool(attr(node, "count_include_pad", 0))
    if padding == "SAME" and include_pad:
        t, l = (_same_total(x_shape[2 + i], strides[i], kernel[i]) // 2 for i in range(2))
        explicit = [(t, _same_total(x_shape[2], strides[0], kernel[0]) - t),
                    (l, _same_total(x_shape[3], strides[1], kernel[1]) - l)]
        padding = "VALID"
    src = _padded_input(Lw, node, x, explicit)
    opts = builtin_options("Pool2DOptions", padding=_padding_enum(padding), strideH=strides[0], strideW=strides[1],
                    filterHeight=kernel[0], filterWidth=kernel[1])
    n, c, oh, ow = out_shape
    scale = None
    if explicit is not None:
        pads = _onnx_pads(node, x_shape, out_shape, kernel, strides, explicit) if include_pad else None
        counts = [_window_counts(x_shape[2 + i], out_shape[2 + i], kernel[i], strides[i], explicit[i][0],
                                 pads[i] if pads else (0, 0)) for i in range(2)]
        scale = (kernel[0] * kernel[1]) / np.outer(counts[0], counts[1])
    if scale is None or np.all(scale == 1.0):
        Lw.emit("AVERAGE_POOL_2D", [src], [Lw.define(node.outputs[0], L.NHWC)], opts)
        return
    pooled = Lw.temp(f"{node.outputs[0].name}/zero_padded_mean", (n, oh, ow, c))
    Lw.emit("AVERAGE_POOL_2D", [src], [pooled], opts)
    Lw.emit("MUL", [pooled, Lw.constant(f"{node.name}/count_scale", scale.astype(np.float32).reshape(1, oh, ow, 1))],
            [Lw.define(node.outputs[0], L.NHWC)], builtin_options("MulOptions"))


def _onnx_pads(node, x_shape, out_shape, kernel, strides, explicit):
    """The (begin, end) pads ONNX counts with count_include_pad=1: explicit ``pads`` (or the
    auto_pad amounts), without the ceil_mode extension that ``_window`` added to ``explicit``."""
    auto_pad = attr(node, "auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad in ("SAME_UPPER", "SAME_LOWER", "VALID") or not attr(node, "ceil_mode", 0):
        return explicit
    pads = list(attr(node, "pads", [0, 0, 0, 0]))
    return [(pads[0], pads[2]), (pads[1], pads[3])]


def _window_counts(size, out, k, s, begin, pads=(0, 0)):
    """Per output index: how many of the k window taps fall inside [-pads[0], size + pads[1])."""
    starts = np.arange(out) * s - begin
    return np.minimum(starts + k, size + pads[1]) - np.maximum(starts, -pads[0])


# -- matmul --------------------------------------------------------------------------------
@OPS.register("Gemm")
def lower_gemm(Lw, node):
    """Gemm with constant B -> FULLY_CONNECTED (alpha, beta folded into weights and bias)."""
    a, b_t = node.inputs[:2]
    c_t = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2].name else None
    alpha, beta = float(attr(node, "alpha", 1.0)), float(attr(node, "beta", 1.0))
    b = Lw.const(b_t)
    if b is None:
        raise Lw.unsupported("Gemm with a non-constant B is not mapped (legalize it to MatMul)")
    b = np.asarray(b, np.float32)
    weights = (b if attr(node, "transB", 0) else b.T) * alpha
    n_out = weights.shape[0]
    c = Lw.const(c_t) if c_t is not None else None
    bias = np.zeros(n_out, np.float32) if c is None else np.asarray(c, np.float32) * beta
    if bias.size != n_out:
        raise Lw.unsupported("Gemm bias must be a per-output vector")
    src = Lw.get(a, (1, 0) if attr(node, "transA", 0) else (0, 1))
    Lw.emit("FULLY_CONNECTED", [src, Lw.constant(f"{node.name}/weights", np.ascontiguousarray(weights)),
                                Lw.constant(f"{node.name}/bias", bias.reshape(-1))],
            [Lw.define(node.outputs[0], (0, 1))], builtin_options("FullyConnectedOptions"))


@OPS.register("MatMul")
def lower_matmul(Lw, node):
    """MatMul with constant 2-D B -> FULLY_CONNECTED(keep_num_dims) on the innermost axis;
    otherwise BATCH_MATMUL, using adj_x/adj_y where the operands are stored transposed."""
    a, b = node.inputs[:2]
    b_value = Lw.const(b)
    ra = Lw.rank(a)
    if b_value is not None and np.asarray(b_value).ndim == 2 and ra >= 2:
        perm = Lw.home(a) or L.identity(ra)
        if perm[-1] != ra - 1:
            perm = L.axis_last(perm, ra - 1)
        weights = np.ascontiguousarray(np.asarray(b_value, np.float32).T)
        zeros = np.zeros(weights.shape[0], np.float32)
        Lw.emit("FULLY_CONNECTED", [Lw.get(a, perm), Lw.constant(f"{node.name}/weights", weights),
                                    Lw.constant(f"{node.name}/bias", zeros)],
                [Lw.define(node.outputs[0], perm)], builtin_options("FullyConnectedOptions", keepNumDims=ra > 2))
        return
    if ra < 2 or Lw.rank(b) < 2:
        raise Lw.unsupported("MatMul with a 1-D operand is not mapped")
    ia, adj_x = _matmul_operand(Lw, a)
    ib, adj_y = _matmul_operand(Lw, b)
    out_rank = Lw.rank(node.outputs[0])
    Lw.emit("BATCH_MATMUL", [ia, ib], [Lw.define(node.outputs[0], L.identity(out_rank))],
            builtin_options("BatchMatMulOptions", adjX=adj_x, adjY=adj_y))


def _matmul_operand(Lw, t):
    r = Lw.rank(t)
    perm = Lw.home(t)
    ident = L.identity(r)
    if perm is None or perm == ident:
        return Lw.get(t, ident), False
    swapped = ident[:-2] + (r - 1, r - 2)
    if perm == swapped:
        return Lw.get(t, swapped), True
    return Lw.get(t, ident), False


# -- normalization -------------------------------------------------------------------------
@OPS.register("LayerNormalization")
def lower_layer_norm(Lw, node):
    """LayerNormalization -> builtin decomposition (no Flex):

        mean = MEAN(x, axes); d = x - mean; var = MEAN(d*d, axes)
        y = d * RSQRT(var + eps) * scale + bias
    """
    x = node.inputs[0]
    rank = Lw.rank(x)
    axis = positive_axis(attr(node, "axis", -1), rank)
    eps = float(attr(node, "epsilon", 1e-5))
    perm = Lw.home(x) or L.identity(rank)
    xi = Lw.get(x, perm)
    stored = Lw.w.tensors[xi].shape
    axes = list(range(axis, rank))
    positions = sorted(L.position(perm, a) for a in axes)
    reduced = tuple(1 if i in positions else d for i, d in enumerate(stored))
    name = node.outputs[0].name
    axes_c = Lw.int32(f"{node.name}/axes", positions)
    keep = builtin_options("ReducerOptions", keepDims=True)
    mean, d, sq, var, var_eps, inv, normed = (
        Lw.temp(f"{name}/{k}", s) for k, s in (("mean", reduced), ("centered", stored), ("squared", stored),
                                               ("var", reduced), ("var_eps", reduced), ("rstd", reduced),
                                               ("normed", stored)))
    Lw.emit("MEAN", [xi, axes_c], [mean], keep)
    Lw.emit("SUB", [xi, mean], [d], builtin_options("SubOptions"))
    Lw.emit("MUL", [d, d], [sq], builtin_options("MulOptions"))
    Lw.emit("MEAN", [sq, axes_c], [var], keep)
    Lw.emit("ADD", [var, Lw.constant(f"{node.name}/epsilon", np.array(eps, np.float32))], [var_eps],
            builtin_options("AddOptions"))
    Lw.emit("RSQRT", [var_eps], [inv])
    scale_t = node.inputs[1]
    bias_t = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2].name else None
    Lw.emit("MUL", [d, inv], [normed], builtin_options("MulOptions"))
    if bias_t is None:
        Lw.emit("MUL", [normed, Lw.broadcast_input(scale_t, rank, perm)], [Lw.define(node.outputs[0], perm)],
                builtin_options("MulOptions"))
        return
    scaled = Lw.temp(f"{name}/scaled", stored)
    Lw.emit("MUL", [normed, Lw.broadcast_input(scale_t, rank, perm)], [scaled], builtin_options("MulOptions"))
    Lw.emit("ADD", [scaled, Lw.broadcast_input(bias_t, rank, perm)], [Lw.define(node.outputs[0], perm)],
            builtin_options("AddOptions"))


@OPS.register("BatchNormalization")
def lower_batch_norm(Lw, node):
    """Inference BatchNormalization (unfolded) -> MUL + ADD with per-channel constants."""
    x = node.inputs[0]
    scale, bias, mean, var = (np.asarray(Lw.const(t), np.float32) for t in node.inputs[1:5])
    eps = float(attr(node, "epsilon", 1e-5))
    mul = scale / np.sqrt(var + eps)
    add = bias - mean * mul
    rank = Lw.rank(x)
    perm = Lw.home(x) or L.identity(rank)
    shape = (1, -1) + (1,) * (rank - 2)
    xi = Lw.get(x, perm)
    mid = Lw.temp(f"{node.outputs[0].name}/scaled", Lw.w.tensors[xi].shape)
    Lw.emit("MUL", [xi, Lw.constant(f"{node.name}/mul", mul.reshape(shape).transpose(perm))], [mid],
            builtin_options("MulOptions"))
    Lw.emit("ADD", [mid, Lw.constant(f"{node.name}/add", add.reshape(shape).transpose(perm))],
            [Lw.define(node.outputs[0], perm)], builtin_options("AddOptions"))


# -- depth/space ----------------------------------------------------------------------------
@OPS.register("DepthToSpace")
def lower_depth_to_space(Lw, node):
    """DepthToSpace: DCR is TFLite's DEPTH_TO_SPACE; CRD (torch's PixelShuffle) is DCR after a
    channel permutation, done by GATHER (``fuse.fold_crd_into_conv`` folds it into a producing
    convolution's weights first, so a sub-pixel convolution costs nothing extra)."""
    x = node.inputs[0]
    require_2d(Lw, node, x)
    bs = int(attr(node, "blocksize"))
    mode = str_attr(node, "mode", "DCR")
    src = Lw.get(x, L.NHWC)
    if mode == "CRD":
        n, c, h, w = Lw.shape(x)
        order = crd_to_dcr_channels(c, bs)
        gathered = Lw.temp(f"{node.name}/dcr", (n, h, w, c))
        Lw.emit("GATHER", [src, Lw.int32(f"{node.name}/dcr_order", order)], [gathered],
                builtin_options("GatherOptions", axis=3))
        src = gathered
    Lw.emit("DEPTH_TO_SPACE", [src], [Lw.define(node.outputs[0], L.NHWC)],
            builtin_options("DepthToSpaceOptions", blockSize=bs))


def crd_to_dcr_channels(channels: int, bs: int) -> np.ndarray:
    """Channel order that makes DCR of the permuted tensor equal CRD of the original:
    DCR channel (i*bs + j)*C' + c reads CRD channel c*bs*bs + i*bs + j."""
    c_out = channels // (bs * bs)
    dcr = np.arange(channels)
    ij, c = dcr // c_out, dcr % c_out
    return (c * bs * bs + ij).astype(np.int32)


@OPS.register("SpaceToDepth")
def lower_space_to_depth(Lw, node):
    x = node.inputs[0]
    require_2d(Lw, node, x)
    Lw.emit("SPACE_TO_DEPTH", [Lw.get(x, L.NHWC)], [Lw.define(node.outputs[0], L.NHWC)],
            builtin_options("SpaceToDepthOptions", blockSize=int(attr(node, "blocksize"))))


__all__ = ["lower_identity"]
