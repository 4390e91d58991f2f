"""The MACE reader for a Hexagon DSP net (``hexagon.py`` writes it): each Hexagon NN node
re-expressed in ONNX integer arithmetic, so the file runs in onnxruntime where no DSP exists.

Read the way ``hexagon_dsp_wrapper.cc SetupGraph`` hands the net to nnlib, not by names:
constant tensors are const nodes by ``node_id`` (an int32 tensor without data is a NULL tensor
whose dims carry the value: window, strides), each op's inputs are its ``node_input``
``(node_id, output_port)`` pairs, ``QuantizeINPUT_f_to_8`` takes the ``input_info`` tensors
(NHWC float) and ``DequantizeOUTPUT_8tof`` gives the ``output_info`` ones.

Every uint8 tensor travels with its float range ``(min, max)`` (ports 1 and 2); its scale is
``(max - min) / 255`` and its zero point nnlib's ``quantize_uint8(0, min, max)`` (float32).  The quantized ops, as Hexagon NN
defines them (nnlib's kernels ship as binaries in MACE, XiaoMi/nnlib is their source; where its HVX kernels'
fixed-point steps are not modelled the arithmetic below is their stated semantics, in double,
rounding half away from zero):

* QuantizeINPUT_f_to_8: the range of the actual input, widened to hold 0, zero point rounded,
  ``q = sat(round(x / scale + zero))`` (nnlib's ``op_quantize.c`` autoquantize reaches the same
  codes through HVX fixed-point scaling; a value on a rounding boundary may land one step off);
* Supernode_8x8p32to8 / DepthwiseSupernode_8x8p32to8: ``acc = sum((x - x_zp) (w - w_zp))``
  (int32, padding filled with ``x_zp``; nnlib's ``nn_pad_compute_outsize_padding``: VALID none,
  SAME_CAFFE the odd pixel before), plus the int32 bias re-scaled from its range
  ``(max - min) / (2^32 - 1)`` to ``x_scale * w_scale``, then requantized to the node's
  ``out_min/out_max``: ``sat(round(acc * x_scale * w_scale / out_scale) + out_zp)`` (a ReLU is
  the range starting at 0);
* QuantizedAdd_8p8to8 / QuantizedSub_8p8to8: both operands dequantized, added, requantized to
  ``out_min/out_max`` (a ``[1, 1, 1, C]`` constant broadcasts over depth);
* QuantizedMaxPool_8 (padding never wins), QuantizedAvgPool_8 (mean of the valid elements,
  rounded), QuantizedRelu_8 / QuantizedReluX_8 (``op_relu.c``: ``max(q, q(0))``, ReluX also
  ``min(., q(max_val))`` with nnlib's ``quantize_uint8``), QuantizedReshape keep the
  input's range; QuantizedMean_8 requantizes the mean to ``out_min/out_max``;
  QuantizedSigmoid_8 writes ``[0, 1]``; QuantizedConcat_8 the union of its inputs' ranges;
* DequantizeOUTPUT_8tof: ``scale * (q - zp)`` (float32).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..registry import OpRegistry
from .reader_builder import Builder

HEXAGON_READERS = OpRegistry("mace-reader-hexagon", title="MACE reader (Hexagon DSP)")
INT64, UINT8, FLOAT, DOUBLE = (onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.FLOAT,
                               onnx.TensorProto.DOUBLE)
TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]
NN_PAD_NA, NN_PAD_VALID, NN_PAD_SAME_CAFFE = 0, 2, 5
_NP = {1: np.dtype("<f4"), 2: np.dtype("u1"), 4: np.dtype("<i4")}


def is_hexagon(net) -> bool:
    return any(op.type == "QuantizeINPUT_f_to_8" for op in net.op)


class Ctx:
    """What a handler sees: the builder, the op, and the static shapes of its inputs."""

    def __init__(self, b: Builder, net, shapes: dict):
        self.b, self.net, self.shapes = b, net, shapes
        self.op = None
        self.in_shapes: list = []


def _k(b, value, dtype=np.float64):
    return b.const(np.array(value, dtype))


def _d(b, x):
    return b.node("Cast", [x], to=DOUBLE)


def _round(b, x):
    """Round half away from zero (double)."""
    return b.node("Mul", [b.node("Sign", [x]), b.node("Floor", [b.node("Add", [b.node("Abs", [x]), _k(b, 0.5)])])])


def _sat(b, x):
    """A double holding an integer -> uint8, saturated to [0, 255]."""
    return b.node("Cast", [b.node("Min", [b.node("Max", [x, _k(b, 0.0)]), _k(b, 255.0)])], to=UINT8)


def _scalar(b, t):
    return b.node("Reshape", [_d(b, t), _k(b, [], np.int64)])


def quantize_uint8(b, value, lo, hi):
    """nnlib ``quantize.h quantize_uint8(val, min, max)``, float32: ``roundf((val - min) *
    (255 / max(0.0001, max - min)))`` saturated; returned as a double scalar."""
    f32 = np.float32
    lo32, hi32 = (b.node("Cast", [_scalar(b, t)], to=FLOAT) for t in (lo, hi))
    span = b.node("Max", [b.node("Sub", [hi32, lo32]), _k(b, 0.0001, f32)])
    resize = b.node("Div", [_k(b, 255.0, f32), span])
    value_f = b.node("Mul", [b.node("Sub", [b.node("Cast", [value], to=FLOAT), lo32]), resize])
    q = _round(b, _d(b, value_f))
    return b.node("Min", [b.node("Max", [q, _k(b, 0.0)]), _k(b, 255.0)])


def qparams(b, lo, hi):
    """(scale, zero point) as double scalars from a uint8 range: the zero point is
    ``quantize_uint8(0, min, max)`` as nnlib's kernels take it."""
    scale = b.node("Div", [b.node("Sub", [_scalar(b, hi), _scalar(b, lo)]), _k(b, 255.0)])
    return scale, quantize_uint8(b, _k(b, 0.0), lo, hi)


def _real(b, q, lo, hi):
    scale, zero = qparams(b, lo, hi)
    return b.node("Mul", [b.node("Sub", [_d(b, q), zero]), scale])


def _requantize(b, real, lo, hi):
    scale, zero = qparams(b, lo, hi)
    return _sat(b, b.node("Add", [_round(b, b.node("Div", [real, scale])), zero]))


def _pads(ctx, kernel, strides):
    """nnlib ``nn_pad_compute_outsize_padding`` for the op's padding type, [top, left, bottom, right]."""
    _, h, w, _ = ctx.in_shapes[0]
    before, after = [], []
    for size, k, s in zip((h, w), kernel, strides):
        if ctx.op.padding == NN_PAD_VALID:
            before.append(0), after.append(0)
            continue
        if ctx.op.padding != NN_PAD_SAME_CAFFE:
            raise ValueError(f"Hexagon padding type {ctx.op.padding} not modelled")
        pad_n = max(0, ((size + s - 1) // s - 1) * s - (size - k))
        first = (pad_n + 1) >> 1 if pad_n > 0 else 0
        before.append(first), after.append(pad_n - first)
    return before + after


def _shape_only(t) -> list[int]:
    if not isinstance(t, list):
        raise ValueError("expected a shape-only constant (window / strides)")
    return t


@HEXAGON_READERS.register("Supernode_8x8p32to8", "DepthwiseSupernode_8x8p32to8")
def _supernode(ctx, ins):
    b, op = ctx.b, ctx.op
    x, w, x_lo, x_hi, w_lo, w_hi, strides, bias, b_lo, b_hi, o_lo, o_hi = ins
    strides = _shape_only(strides)[1:3]
    filt = w.values
    if op.type == "Supernode_8x8p32to8":  # HWIO -> OIHW
        oihw, group = filt.transpose(3, 2, 0, 1), 1
    else:  # HWCM -> [C * M, 1, kh, kw]
        kh, kw, c, m = filt.shape
        oihw, group = filt.transpose(2, 3, 0, 1).reshape(c * m, 1, kh, kw), c
    x_scale, x_zero = qparams(b, x_lo, x_hi)
    w_scale, w_zero = qparams(b, w_lo, w_hi)
    x_zero_u8 = b.node("Cast", [x_zero], to=UINT8)
    xp = b.node("Transpose", [x], perm=TO_NCHW)
    pads = _pads(ctx, list(filt.shape[:2]), strides)
    if any(pads):
        xp = b.node("Pad", [xp, _k(b, [0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]], np.int64), x_zero_u8])
    acc = b.node("ConvInteger", [xp, b.const(np.ascontiguousarray(oihw), "filter"), x_zero_u8,
                                 b.node("Cast", [w_zero], to=UINT8)],
                 strides=strides, kernel_shape=list(filt.shape[:2]), group=group)
    acc_scale = b.node("Mul", [x_scale, w_scale])
    bias_scale = b.node("Div", [b.node("Sub", [_scalar(b, b_hi), _scalar(b, b_lo)]), _k(b, 4294967295.0)])
    bias_acc = _round(b, b.node("Mul", [_d(b, bias), b.node("Div", [bias_scale, acc_scale])]))
    total = b.node("Add", [_d(b, b.node("Transpose", [acc], perm=TO_NHWC)), bias_acc])
    return [_requantize(b, b.node("Mul", [total, acc_scale]), o_lo, o_hi), o_lo, o_hi]


@HEXAGON_READERS.register("QuantizedAdd_8p8to8", "QuantizedSub_8p8to8")
def _add_sub(ctx, ins):
    b = ctx.b
    a, c, a_lo, a_hi, c_lo, c_hi, o_lo, o_hi = ins
    real = b.node("Add" if ctx.op.type == "QuantizedAdd_8p8to8" else "Sub",
                  [_real(b, a, a_lo, a_hi), _real(b, c, c_lo, c_hi)])
    return [_requantize(b, real, o_lo, o_hi), o_lo, o_hi]


@HEXAGON_READERS.register("QuantizedMaxPool_8", "QuantizedAvgPool_8")
def _pool(ctx, ins):
    b = ctx.b
    x, lo, hi, window, strides = ins
    kernel, strides = _shape_only(window)[1:3], _shape_only(strides)[1:3]
    attrs = dict(kernel_shape=kernel, strides=strides, pads=_pads(ctx, kernel, strides))
    xc = b.node("Transpose", [x], perm=TO_NCHW)
    if ctx.op.type == "QuantizedMaxPool_8":
        y = b.node("MaxPool", [xc], **attrs)
    else:
        mean = b.node("AveragePool", [b.node("Cast", [xc], to=FLOAT)], count_include_pad=0, **attrs)
        y = _sat(b, _round(b, _d(b, mean)))
    return [b.node("Transpose", [y], perm=TO_NHWC), lo, hi]


@HEXAGON_READERS.register("QuantizedMean_8")
def _mean(ctx, ins):
    b = ctx.b
    x, lo, hi, axes, o_lo, o_hi = ins
    axes = [int(a) for a in np.asarray(axes.values).ravel()]
    mean = b.node("ReduceMean", [_real(b, x, lo, hi)], axes=sorted(axes), keepdims=1)
    return [_requantize(b, mean, o_lo, o_hi), o_lo, o_hi]


@HEXAGON_READERS.register("QuantizedRelu_8", "QuantizedReluX_8")
def _relu(ctx, ins):
    b = ctx.b
    x, lo, hi = ins[:3]
    scale, zero = qparams(b, lo, hi)
    y = b.node("Max", [x, b.node("Cast", [zero], to=UINT8)])
    if ctx.op.type == "QuantizedReluX_8":  # op_relu.c: min(max(q, q(0)), q(max_val))
        y = b.node("Min", [y, b.node("Cast", [quantize_uint8(b, _scalar(b, ins[3]), lo, hi)], to=UINT8)])
    return [y, lo, hi]


@HEXAGON_READERS.register("QuantizedSigmoid_8")
def _sigmoid(ctx, ins):
    b = ctx.b
    x, lo, hi = ins
    y = b.node("Sigmoid", [_real(b, x, lo, hi)])
    return [_sat(b, _round(b, b.node("Mul", [y, _k(b, 255.0)]))), _k(b, 0.0, np.float32), _k(b, 1.0, np.float32)]


@HEXAGON_READERS.register("QuantizedReshape")
def _reshape(ctx, ins):
    b = ctx.b
    x, shape, lo, hi = ins
    return [b.node("Reshape", [x, b.const(np.asarray(shape.values, np.int64).ravel())]), lo, hi]


@HEXAGON_READERS.register("QuantizedConcat_8")
def _concat(ctx, ins):
    b = ctx.b
    n = (len(ins) - 1) // 3
    axis = int(np.asarray(ins[0].values).ravel()[0])
    xs, los, his = ins[1:1 + n], ins[1 + n:1 + 2 * n], ins[1 + 2 * n:]
    lo = b.node("Min", [_scalar(b, t) for t in los])
    hi = b.node("Max", [_scalar(b, t) for t in his])
    parts = [_requantize(b, _real(b, x, x_lo, x_hi), lo, hi) for x, x_lo, x_hi in zip(xs, los, his)]
    return [b.node("Concat", parts, axis=axis), b.node("Cast", [lo], to=FLOAT), b.node("Cast", [hi], to=FLOAT)]


def _quantize_input(b, x):
    zero_f = _k(b, 0.0)
    xd = _d(b, x)
    lo = b.node("Min", [b.node("ReduceMin", [xd], keepdims=0), zero_f])
    hi = b.node("Max", [b.node("ReduceMax", [xd], keepdims=0), zero_f])
    scale = b.node("Div", [b.node("Sub", [hi, lo]), _k(b, 255.0)])
    zero = _round(b, b.node("Div", [b.node("Neg", [lo]), scale]))
    q = _sat(b, _round(b, b.node("Add", [zero, b.node("Div", [xd, scale])])))
    lo = b.node("Cast", [b.node("Mul", [b.node("Neg", [zero]), scale])], to=FLOAT)
    hi = b.node("Cast", [b.node("Mul", [b.node("Sub", [_k(b, 255.0), zero]), scale])], to=FLOAT)
    return [q, lo, hi]


def read_hexagon(net, blob: bytes) -> onnx.ModelProto:
    b = Builder()
    values: dict[tuple[int, int], object] = {}
    shapes: dict[tuple[int, int], list[int]] = {}
    for t in net.tensors:
        dtype = _NP.get(t.data_type)
        if dtype is None:
            raise ValueError(f"Hexagon const {t.name} has data type {t.data_type}")
        if t.data_size == 0:  # a NULL tensor: its dims are the value
            values[(t.node_id, 0)] = list(t.dims)
            continue
        end = t.offset + t.data_size * dtype.itemsize
        if end > len(blob):
            raise ValueError(f"tensor {t.name} overruns .data")
        value = np.frombuffer(blob[t.offset:end], dtype=dtype).reshape(list(t.dims)).astype(dtype.newbyteorder("="))
        if value.dtype == np.float32 and value.size == 1:
            value = value.reshape(())
        values[(t.node_id, 0)] = gs.Constant(f"{t.name}__t{t.node_id}", value)
    graph_inputs, graph_outputs = [], []
    ctx = Ctx(b, net, shapes)
    for op in net.op:
        ctx.op = op
        for port, shape in enumerate(op.output_shape):
            shapes[(op.node_id, port)] = list(shape.dims)
        ins = []
        for ni in op.node_input:
            key = (ni.node_id, ni.output_port)
            if key not in values:
                raise ValueError(f"Hexagon op '{op.name}' reads node {ni.node_id} port {ni.output_port}, "
                                 "which nothing before it writes")
            ins.append(values[key])
        ctx.in_shapes = [shapes.get((ni.node_id, ni.output_port)) for ni in op.node_input]
        if op.type == "QuantizeINPUT_f_to_8":
            outs = []
            for info in net.input_info:
                var = gs.Variable(info.name, dtype=np.float32, shape=list(info.dims))
                graph_inputs.append(var)
                outs.extend(_quantize_input(b, var))
        elif op.type == "DequantizeOUTPUT_8tof":
            if len(ins) != 3 * len(net.output_info):
                raise ValueError("DequantizeOUTPUT_8tof needs (data, min, max) for every output_info")
            for k, info in enumerate(net.output_info):
                y = _real(b, *ins[3 * k:3 * k + 3])
                out = gs.Variable(info.name, dtype=np.float32, shape=list(info.dims))
                b.node("Cast", [y], out=out, to=FLOAT)
                graph_outputs.append(out)
            outs = []
        else:
            handler = HEXAGON_READERS.get(op.type)
            if handler is None:
                raise ValueError(f"reader does not model Hexagon NN op '{op.type}'")
            outs = handler(ctx, ins)
        for port, value in enumerate(outs):
            values[(op.node_id, port)] = value
    graph = gs.Graph(nodes=b.nodes, inputs=graph_inputs, outputs=graph_outputs, opset=17)
    graph.cleanup().toposort()
    boundary = {t.name for t in graph_inputs + graph_outputs}
    for tensor in graph.tensors().values():
        if isinstance(tensor, gs.Variable) and tensor.name not in boundary:
            tensor.shape, tensor.dtype = None, None
    model = gs.export_onnx(graph)
    model.ir_version = 8
    return model
