"""The MACE reader's uint8 ops (``T = DT_UINT8``): MACE's quantized CPU kernels in ONNX integer
arithmetic, so a uint8 net runs in onnxruntime with the numbers MACE's kernels compute.

Written from XiaoMi/mace@0fc55a5, not from our writer:

* uint8 tensors are NHWC (``net_def_adapter.cc GetDefaultDataFormat``: quantized CPU nets), each
  with a scale and zero point: an op's ``quantize_info``, or its input's where the kernel copies
  them (Pooling, Reduce, ReLU/ReLUX: ``output->SetScale(input->scale())``), or, for a
  ``Quantize`` with ``find_range_every_time``, the range of the actual input
  (``core/quantize.h`` ``FindMinMax`` + ``AdjustRange``, float32);
* Conv2D: gemmlowp ``sum((w - w_zp) * (x - x_zp))`` (im2col pads with ``x_zp``), the int32 bias
  (re-scaled with ``roundf`` when ``|x_scale * w_scale - bias_scale| > 1e-6``,
  ``arm/q8/quantization_util.cc GetBiasData``), then ``OutputStageQuantizeDownInt32ToUint8
  ScaleByFixedPoint``: ``RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(acc, M), shift)
  + out_zp`` saturated to [0, 255], with ``M, shift`` from ``QuantizeMultiplier``
  (``frexp``; ``roundl(q * 2^31)``) of ``x_scale * w_scale / out_scale`` (``GetOutputMultiplier
  AndShift``);
* Eltwise SUM/SUB: ``arm/q8/eltwise.cc`` (arm64 builds use NEON): inputs ``(q - zp) << 20``
  times their fixed-point multiplier, shifted right arithmetically (the NEON loop's ``vshlq``;
  the last ``size % 8`` elements use ``RoundingDivideByPOT`` as the scalar tail does), summed,
  then the output multiplier with rounding;
* DepthwiseConv2d: TFLite's optimized uint8 DepthwiseConv, the same sums and output stage;
* Pooling: max of the valid elements; average ``(sum + n/2) / n`` over the valid ones;
  Reduce MEAN ``(sum + n/2) / n``, MIN/MAX exact; ReLU ``max(x, zp)``, ReLUX also
  ``min(., Quantize(max_limit))``, Sigmoid ``e^(q*s) / (e^(q*s) + e^(z*s))`` truncated at scale
  1/255 (``arm/q8/activation.cc``; exp is onnxruntime's, within an ulp of libm's);
* Concat: inputs requantized in float32 with ``roundf`` unless their scale and zero point are
  the output's (``concat.cc``);
* Quantize ``Saturate(roundf(zp + x / scale))``, Dequantize ``scale * (q - zp)`` (float32).

Float tensors keep the float reader's NCHW convention: Quantize transposes 4-D inputs to NHWC,
Dequantize back.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..registry import OpRegistry

Q8_READERS = OpRegistry("mace-reader-uint8", title="MACE reader (uint8)")
INT64, UINT8, FLOAT, DOUBLE = (onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.FLOAT,
                               onnx.TensorProto.DOUBLE)
TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


class QParams:
    """Scale (float32 scalar) and zero point (int64 scalar) of a uint8 value, as ONNX tensors."""

    def __init__(self, scale: gs.Tensor, zero: gs.Tensor):
        self.scale, self.zero = scale, zero


def qparams_of(b) -> dict:
    if not hasattr(b, "qparams"):
        b.qparams = {}
    return b.qparams


def const_q(b, scale: float, zero: int) -> QParams:
    return QParams(b.const(np.float32(scale), "scale"), b.const(np.int64(zero), "zp"))


def _i64(b, x):
    return b.node("Cast", [x], to=INT64)


def _k(b, value, dtype=np.int64):
    return b.const(np.array(value, dtype))


def _value(t):
    return t.values if isinstance(t, gs.Constant) else None


def _floor_div(b, x, d):
    """floor(x / d) for int64 ``x`` and positive int64 ``d`` (exact: Mod is floored)."""
    r = b.node("Mod", [x, d], fmod=0)
    return b.node("Div", [b.node("Sub", [x, r]), d])


def _pow2(b, e):
    """2**e as int64 for a non-negative exponent (int64 tensor)."""
    value = _value(e)
    if value is not None:
        return _k(b, 2 ** int(value))
    return b.node("Cast", [b.node("Pow", [_k(b, 2.0, np.float64), b.node("Cast", [e], to=DOUBLE)])], to=INT64)


def srdhm(b, a, m):
    """gemmlowp SaturatingRoundingDoublingHighMul (NEON vqrdmulh computes the same)."""
    ab = b.node("Mul", [a, m])
    nudge = b.node("Where", [b.node("GreaterOrEqual", [ab, _k(b, 0)]), _k(b, 1 << 30), _k(b, 1 - (1 << 30))])
    y = b.node("Add", [ab, nudge])
    q = _floor_div(b, y, _k(b, 1 << 31))
    inexact = b.node("Not", [b.node("Equal", [b.node("Mod", [y, _k(b, 1 << 31)], fmod=0), _k(b, 0)])])
    negative = b.node("Less", [y, _k(b, 0)])
    # C++ integer division truncates toward zero
    return b.node("Add", [q, b.node("Cast", [b.node("And", [negative, inexact])], to=INT64)])


def rounding_divide_by_pot(b, x, shift):
    """gemmlowp RoundingDivideByPOT(x, shift), shift >= 0 (int64 tensor)."""
    p2 = _pow2(b, shift)
    mask = b.node("Sub", [p2, _k(b, 1)])
    remainder = b.node("Mod", [x, p2], fmod=0)  # x & mask
    threshold = b.node("Add", [_floor_div(b, mask, _k(b, 2)),
                               b.node("Cast", [b.node("Less", [x, _k(b, 0)])], to=INT64)])
    up = b.node("Cast", [b.node("Greater", [remainder, threshold])], to=INT64)
    return b.node("Add", [_floor_div(b, x, p2), up])


def arithmetic_shift_right(b, x, shift):
    return _floor_div(b, x, _pow2(b, shift))


def quantize_multiplier(b, real):
    """``core/quantize.h QuantizeMultiplier(double)``: (multiplier, exponent) int64 tensors."""
    value = _value(real)
    if value is not None:
        q, exponent = math.frexp(float(value))
        qint = math.floor(q * (1 << 31) + 0.5)  # roundl of a positive value
        if qint == 1 << 31:
            qint //= 2
            exponent += 1
        return _k(b, qint), _k(b, exponent)
    real = b.node("Cast", [real], to=DOUBLE)
    e = b.node("Add", [b.node("Floor", [b.node("Div", [b.node("Log", [real]), _k(b, math.log(2.0), np.float64)])]),
                       _k(b, 1.0, np.float64)])
    two = _k(b, 2.0, np.float64)
    m = b.node("Div", [real, b.node("Pow", [two, e])])
    big = b.node("GreaterOrEqual", [m, _k(b, 1.0, np.float64)])
    m = b.node("Where", [big, b.node("Div", [m, two]), m])
    e = b.node("Where", [big, b.node("Add", [e, _k(b, 1.0, np.float64)]), e])
    small = b.node("Less", [m, _k(b, 0.5, np.float64)])
    m = b.node("Where", [small, b.node("Mul", [m, two]), m])
    e = b.node("Where", [small, b.node("Sub", [e, _k(b, 1.0, np.float64)]), e])
    qint = b.node("Floor", [b.node("Add", [b.node("Mul", [m, _k(b, float(1 << 31), np.float64)]),
                                            _k(b, 0.5, np.float64)])])
    full = b.node("Equal", [qint, _k(b, float(1 << 31), np.float64)])
    qint = b.node("Where", [full, b.node("Div", [qint, two]), qint])
    e = b.node("Where", [full, b.node("Add", [e, _k(b, 1.0, np.float64)]), e])
    return b.node("Cast", [qint], to=INT64), b.node("Cast", [e], to=INT64)


def _round_half_away(b, x):
    """roundf (float32)."""
    return b.node("Mul", [b.node("Sign", [x]), b.node("Floor", [b.node("Add", [b.node("Abs", [x]),
                                                                                 _k(b, 0.5, np.float32)])])])


def saturate_u8(b, x_int64):
    return b.node("Cast", [b.node("Min", [b.node("Max", [x_int64, _k(b, 0)]), _k(b, 255)])], to=UINT8)


def _fmul(b, x, y):
    return b.node("Mul", [x, y])


def _q(b, tensor) -> QParams:
    params = qparams_of(b).get(tensor.name)
    if params is None:
        raise ValueError(f"uint8 tensor '{tensor.name}' has no scale / zero point")
    return params


def _set_q(b, tensor, params: QParams):
    qparams_of(b)[tensor.name] = params
    return tensor


def _op_q(b, op) -> QParams:
    if not op.quantize_info:
        raise ValueError(f"uint8 op '{op.name}' ({op.type}) without quantize_info")
    info = op.quantize_info[0]
    return const_q(b, info.scale, info.zero_point)


def register_constant(b, t, value) -> None:
    """A uint8 / int32 ConstTensor's own scale and zero point (``ConstTensor.scale``...)."""
    if t.quantized:
        qparams_of(b)[t.name] = const_q(b, t.scale, t.zero_point)


# ------------------------------------------------------------------ edges

@Q8_READERS.register("Quantize")
def _quantize(b, op, args, ins):
    x = ins[0]
    rank = len(op.output_shape[0].dims) if op.output_shape else None
    if rank == 4:
        x = b.node("Transpose", [x], perm=TO_NHWC)
    if args.i("find_range_every_time", 0) or not op.quantize_info:
        # core/quantize.h Quantize(non_zero=false): FindMinMax + AdjustRange<uint8_t>, float32
        zero_f = _k(b, 0.0, np.float32)
        out_min = b.node("Min", [b.node("ReduceMin", [x], keepdims=0), zero_f])
        out_max = b.node("Max", [b.node("ReduceMax", [x], keepdims=0), zero_f])
        scale = b.node("Div", [b.node("Sub", [out_max, out_min]), _k(b, 255.0, np.float32)])
        eps = _k(b, 1e-6, np.float32)
        both = b.node("And", [b.node("Less", [out_min, b.node("Neg", [eps])]), b.node("Greater", [out_max, eps])])
        nearest = _round_half_away(b, b.node("Div", [b.node("Neg", [out_min]), scale]))
        positive = b.node("Greater", [out_min, b.node("Neg", [eps])])
        zero = b.node("Where", [both, nearest, b.node("Where", [positive, _k(b, 0.0, np.float32),
                                                                 _k(b, 255.0, np.float32)])])
        params = QParams(scale, _i64(b, zero))
    else:
        params = _op_q(b, op)
    recip = b.node("Div", [_k(b, 1.0, np.float32), params.scale])
    value = b.node("Add", [b.node("Cast", [params.zero], to=FLOAT), b.node("Mul", [recip, x])])
    out = saturate_u8(b, _i64(b, _round_half_away(b, value)))
    return [_set_q(b, out, params)]


@Q8_READERS.register("Dequantize")
def _dequantize(b, op, args, ins):
    params = _q(b, ins[0])
    y = b.node("Mul", [params.scale, b.node("Cast", [b.node("Sub", [_i64(b, ins[0]), params.zero])], to=FLOAT)])
    rank = len(op.output_shape[0].dims) if op.output_shape else None
    return [b.node("Transpose", [y], perm=TO_NCHW) if rank == 4 else y]


# ------------------------------------------------------------------ compute

def _pads(args):
    total = args.ints("padding_values")
    if total is None:
        raise ValueError("uint8 op without padding_values (padding type) is not modelled")
    return [total[0] // 2, total[1] // 2, total[0] - total[0] // 2, total[1] - total[1] // 2]


@Q8_READERS.register("Conv2D", "DepthwiseConv2d")
def _conv2d(b, op, args, ins):
    """Conv2D (gemmlowp) and DepthwiseConv2d (TFLite's optimized uint8 DepthwiseConv, the same
    fixed-point output stage; ``depthwise_conv2d.cc``): filters OHWI / [kh, kw, C, M]."""
    x, w = ins[0], ins[1]
    if args.ints("dilations", [1, 1]) != [1, 1]:
        raise ValueError(f"uint8 {op.type} with dilation is not modelled")
    xq, wq, out = _q(b, x), _q(b, w), _op_q(b, op)
    top, left, bottom, right = _pads(args)
    x_zero_u8 = b.node("Cast", [xq.zero], to=UINT8)
    xp = b.node("Transpose", [x], perm=TO_NCHW)
    if any((top, left, bottom, right)):  # im2col fills with the input zero point
        xp = b.node("Pad", [xp, _k(b, [0, 0, top, left, 0, 0, bottom, right]), x_zero_u8])
    if op.type == "Conv2D":
        filt, group, kernel = w.values.transpose(0, 3, 1, 2), 1, list(w.values.shape[1:3])  # OHWI -> OIHW
    else:  # [kh, kw, C, M] -> [C * M, 1, kh, kw]: output channel c * M + m, as the kernel's
        kh, kw, c, m = w.values.shape
        filt, group, kernel = w.values.transpose(2, 3, 0, 1).reshape(c * m, 1, kh, kw), c, [kh, kw]
    filt = b.const(np.ascontiguousarray(filt), "filter_oihw")
    acc = b.node("ConvInteger", [xp, filt, x_zero_u8, b.node("Cast", [wq.zero], to=UINT8)],
                 strides=args.ints("strides"), kernel_shape=kernel, group=group)
    acc = _i64(b, b.node("Transpose", [acc], perm=TO_NHWC))
    lhs_rhs = _f32(b, "Mul", wq.scale, xq.scale)  # float32, as GetOutputMultiplierAndShift
    if len(ins) > 2:
        bq = _q(b, ins[2])
        bias_f = b.node("Cast", [ins[2]], to=FLOAT)
        adjusted = _round_half_away(b, b.node("Mul", [bias_f, _f32(b, "Div", bq.scale, lhs_rhs)]))
        differs = b.node("Greater", [b.node("Abs", [b.node("Sub", [lhs_rhs, bq.scale])]), _k(b, 1e-6, np.float32)])
        bias = b.node("Where", [differs, _i64(b, adjusted), _i64(b, ins[2])])
        acc = b.node("Add", [acc, bias])
    multiplier, exponent = quantize_multiplier(b, _f32(b, "Div", lhs_rhs, out.scale))
    y = rounding_divide_by_pot(b, srdhm(b, acc, multiplier), b.node("Neg", [exponent]))
    return [_set_q(b, saturate_u8(b, b.node("Add", [y, out.zero])), out)]


def _f32(b, op: str, x, y):
    """A float32 Mul/Div of two scalars: a constant when both are (numpy float32 = C++ float)."""
    a, c = _value(x), _value(y)
    if a is None or c is None:
        return b.node(op, [x, y])
    a, c = np.float32(a), np.float32(c)
    return b.const(np.float32(a * c if op == "Mul" else a / c), "scale")


@Q8_READERS.register("Eltwise")
def _eltwise(b, op, args, ins):
    kind = args.i("type", 14)
    if kind not in (0, 1) or len(ins) != 2:
        raise ValueError(f"uint8 Eltwise type {kind} not modelled (arm/q8/eltwise.cc: SUM and SUB)")
    q0, q1, out = _q(b, ins[0]), _q(b, ins[1]), _op_q(b, op)
    # doubled_scale = 2 * max(s0, s1) and the adjusted scales, in double (inputs' scales may be
    # per-sample: a model input's Quantize with find_range_every_time)
    s0, s1 = (b.node("Cast", [q.scale], to=DOUBLE) for q in (q0, q1))
    doubled = b.node("Mul", [_k(b, 2.0, np.float64), b.node("Max", [s0, s1])])
    m0, e0 = quantize_multiplier(b, b.node("Div", [s0, doubled]))
    m1, e1 = quantize_multiplier(b, b.node("Div", [s1, doubled]))
    out_scale = b.node("Cast", [b.node("Mul", [_k(b, float(1 << 20), np.float32), out.scale])], to=DOUBLE)
    mo, eo = quantize_multiplier(b, b.node("Div", [doubled, out_scale]))
    flat_shape = b.node("Shape", [ins[0]])
    size = b.node("Size", [ins[0]])
    index = b.node("Range", [_k(b, 0), size, _k(b, 1)])
    handled = b.node("Sub", [size, b.node("Mod", [size, _k(b, 8)], fmod=0)])
    tail = b.node("GreaterOrEqual", [index, handled])

    def scaled(x, params, m, e):
        v = b.node("Reshape", [_i64(b, x), _k(b, [-1])])
        v = b.node("Mul", [b.node("Sub", [v, params.zero]), _k(b, 1 << 20)])
        v = srdhm(b, v, m)
        right = b.node("Neg", [e])
        return b.node("Where", [tail, rounding_divide_by_pot(b, v, right), arithmetic_shift_right(b, v, right)])

    a, c = scaled(ins[0], q0, m0, e0), scaled(ins[1], q1, m1, e1)
    res = b.node("Add" if kind == 0 else "Sub", [a, c])
    res = rounding_divide_by_pot(b, srdhm(b, res, mo), b.node("Neg", [eo]))
    y = saturate_u8(b, b.node("Add", [res, out.zero]))
    return [_set_q(b, b.node("Reshape", [y, flat_shape]), out)]


@Q8_READERS.register("Activation")
def _activation(b, op, args, ins):
    kind = args.s("activation", "NOOP")
    params = _q(b, ins[0])
    zero = b.node("Cast", [params.zero], to=UINT8)
    if kind == "RELU":
        return [_set_q(b, b.node("Max", [ins[0], zero]), params)]
    if kind == "RELUX":
        limit = _value(params.scale)
        if limit is None:
            raise ValueError("uint8 ReLUX of a dynamically quantized input is not modelled")
        # Quantize<uint8_t>(limit, scale, zero): Saturate(roundf(limit / scale + zero)), float32
        v = np.float32(np.float32(args.f("max_limit", 0.0)) / np.float32(limit)) + np.float32(_value(params.zero))
        q = int(np.clip(np.sign(v) * np.floor(np.abs(v) + np.float32(0.5)), 0, 255))
        return [_set_q(b, b.node("Min", [b.node("Max", [ins[0], zero]), _k(b, q, np.uint8)]), params)]
    if kind == "SIGMOID":
        # arm/q8/activation.cc: e^(i*s) / (e^(i*s) + e^(z*s)), truncated to uint8 at scale 1/255
        out = const_q(b, np.float32(1.0) / np.float32(255), 0)
        e_is = b.node("Exp", [b.node("Mul", [params.scale, b.node("Cast", [ins[0]], to=FLOAT)])])
        e_zs = b.node("Exp", [b.node("Mul", [params.scale, b.node("Cast", [params.zero], to=FLOAT)])])
        sigmoid = b.node("Div", [e_is, b.node("Add", [e_is, e_zs])])
        y = b.node("Floor", [b.node("Div", [sigmoid, out.scale])])  # static_cast of a value >= 0
        return [_set_q(b, saturate_u8(b, _i64(b, y)), out)]
    raise ValueError(f"uint8 activation '{kind}' not modelled")


@Q8_READERS.register("Concat")
def _concat(b, op, args, ins):
    """concat.cc uint8: an input with the output's scale and zero point is copied, any other
    ``Saturate(roundf(q * (s_in / s_out) + (-z_in * scale + z_out)))`` in float32; the axis
    is the NHWC tensor's own (FormatAxis, no remapping for uint8)."""
    out = _op_q(b, op)
    so, zo = np.float32(_value(out.scale)), int(_value(out.zero))
    parts = []
    for x in ins:
        q = _q(b, x)
        si, zi = _value(q.scale), _value(q.zero)
        if si is None:
            raise ValueError("uint8 Concat of a dynamically quantized input is not modelled")
        si, zi = np.float32(si), int(zi)
        if si == so and zi == zo:
            parts.append(x)
            continue
        scale = np.float32(si / so)
        offset = np.float32(np.float32(-zi) * scale + np.float32(zo))
        v = b.node("Add", [b.node("Mul", [b.node("Cast", [x], to=FLOAT), _k(b, scale, np.float32)]),
                           _k(b, offset, np.float32)])
        parts.append(saturate_u8(b, _i64(b, _round_half_away(b, v))))
    rank = len(op.output_shape[0].dims) if op.output_shape else None
    axis = args.i("axis", 3)
    if rank is not None and axis < 0:
        axis += rank
    return [_set_q(b, b.node("Concat", parts, axis=axis), out)]


@Q8_READERS.register("Pooling")
def _pooling(b, op, args, ins):
    params = _q(b, ins[0])
    kernel = args.ints("kernels")
    attrs = dict(kernel_shape=kernel, strides=args.ints("strides"), pads=_pads(args),
                 ceil_mode=int(args.i("round_mode", 1) == 1))
    x = b.node("Transpose", [ins[0]], perm=TO_NCHW)
    if args.i("pooling_type", 1) == 2:
        y = b.node("MaxPool", [x], **attrs)
    else:
        xf = b.node("Cast", [x], to=FLOAT)
        area = float(kernel[0] * kernel[1])
        total = _i64(b, b.node("Round", [b.node("Mul", [b.node("AveragePool", [xf], count_include_pad=1, **attrs),
                                                        _k(b, area, np.float32)])]))
        ones = b.node("Add", [b.node("Mul", [xf, _k(b, 0.0, np.float32)]), _k(b, 1.0, np.float32)])
        count = _i64(b, b.node("Round", [b.node("Mul", [b.node("AveragePool", [ones], count_include_pad=1, **attrs),
                                                        _k(b, area, np.float32)])]))
        y = b.node("Cast", [_floor_div(b, b.node("Add", [total, _floor_div(b, count, _k(b, 2))]), count)], to=UINT8)
    return [_set_q(b, b.node("Transpose", [y], perm=TO_NHWC), params)]


@Q8_READERS.register("Reduce")
def _reduce(b, op, args, ins):
    params = _q(b, ins[0])
    kind = args.i("reduce_type", 0)
    axes = args.ints("axis", [])
    keep = args.i("keepdims", 0)
    axes_t = _k(b, sorted(axes)) if axes else None
    x = _i64(b, ins[0])
    if kind == 0:
        total = b.node("ReduceSum", [x] + ([axes_t] if axes_t is not None else []), keepdims=keep)
        dims = b.node("Shape", [x])
        n = b.node("ReduceProd", [b.node("Gather", [dims, axes_t], axis=0) if axes_t is not None else dims],
                   keepdims=0)
        y = _floor_div(b, b.node("Add", [total, _floor_div(b, n, _k(b, 2))]), n)
    elif kind in (1, 2):
        y = b.node("ReduceMin" if kind == 1 else "ReduceMax", [x], keepdims=keep,
                   **({"axes": sorted(axes)} if axes else {}))
    else:
        raise ValueError(f"uint8 Reduce type {kind} not modelled")
    return [_set_q(b, b.node("Cast", [y], to=UINT8), params)]
