"""Read a MACE ``.pb`` + ``.data`` back into ONNX, interpreting every op the way MACE's CPU
float runtime does, so the files can be executed in onnxruntime.

Written from MACE's kernels, not from our writer: argument defaults are MACE's
(``GetOptionalArg`` defaults in ``mace/ops/*.cc``; e.g. Pooling ``round_mode`` CEIL, Reduce
``keepdims`` false, Concat/Split ``axis`` 3, Softmax ``axis`` 1, Deconv2D ``framework_type`` 0
= TensorFlow), tensors are NCHW as on CPU (``net_def_adapter.cc GetDefaultDataFormat``), 4-D
NHWC ``input_info``/``output_info`` are transposed at the boundary (``net_def_adapter.cc:
190-223``), and ``has_data_format`` args are remapped the way each CPU kernel does.
An op or argument value we have not modelled raises ``ValueError`` instead of guessing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from . import reader_extra_ops  # noqa: F401  (reader_extra_ops fills OP_READERS)
from .reader_uint8 import Q8_READERS, register_constant
from ._generated import mace_pb2
from .reader_builder import (NHWC_TO_NCHW_AXIS, OP_READERS, Args, Builder, apply_activation, fused_activation,
                             rank_of)

_NP = {1: np.float32, 3: np.float16, 4: np.int32, 2: np.uint8}
_ONNX_DTYPE = {1: np.float32, 4: np.int32}
_ACT_KINDS = ("NOOP", "RELU", "RELUX", "PRELU", "TANH", "SIGMOID", "LEAKYRELU", "ELU", "HARDSIGMOID")


def read(pb_path: str | Path, data_path: str | Path, tensor_names: dict[str, str] | None = None) -> onnx.ModelProto:
    """The ONNX rendering of the files; ``tensor_names``, when given, is filled with
    {MACE op output name: the ONNX tensor holding its value here} (for per-layer verification)."""
    multi = mace_pb2.MultiNetDef()
    multi.ParseFromString(Path(pb_path).read_bytes())
    if len(multi.net_def) != 1:
        raise ValueError(f"expected one NetDef in the MultiNetDef, found {len(multi.net_def)}")
    net = multi.net_def[0]
    net_args = Args(net)
    if net_args.i("runtime_type", None) is None:
        raise ValueError("NetDef has no runtime_type argument (serial_engine.cc:190-193 refuses it)")
    blob = Path(data_path).read_bytes()
    if net.data_size:  # serial_engine.cc:264-268: 0 means the whole file
        blob = blob[net.data_offset: net.data_offset + net.data_size]
    from .reader_hexagon import is_hexagon, read_hexagon

    if is_hexagon(net):  # a DSP net: Hexagon NN nodes wired by node_id (reader_hexagon.py)
        return read_hexagon(net, blob)
    b = Builder()
    for t in net.tensors:
        np_dtype = np.dtype(_NP[t.data_type]).newbyteorder("<")
        end = t.offset + t.data_size * np_dtype.itemsize
        if t.offset % 4 and t.data_type != 2:
            raise ValueError(f"tensor {t.name} at unaligned offset {t.offset}")
        if end > len(blob):
            raise ValueError(f"tensor {t.name} overruns .data")
        value = np.frombuffer(blob[t.offset:end], dtype=np_dtype).reshape(list(t.dims))
        if t.data_type == 3:  # DT_HALF weights are expanded to float on CPU
            value = value.astype(np.float32)
        b.values[t.name] = gs.Constant(t.name, value.astype(value.dtype.newbyteorder("=")))
        register_constant(b, t, value)

    graph_inputs = []
    for info in net.input_info:
        dims = list(info.dims)
        var = gs.Variable(info.name, dtype=_ONNX_DTYPE[info.data_type], shape=dims)
        graph_inputs.append(var)
        if info.data_format == 1 and len(dims) == 4:
            b.values[info.name] = b.node("Transpose", [var], perm=[0, 3, 1, 2])
            b.values[info.name].shape = [dims[0], dims[3], dims[1], dims[2]]
        else:
            b.values[info.name] = var
    for op in net.op:
        # T = DT_UINT8: MACE's quantized CPU kernel (reader_uint8.py)
        table = Q8_READERS if Args(op).i("T", 1) == 2 else OP_READERS
        handler = table.get(op.type)
        if handler is None:
            raise ValueError(f"reader does not model MACE op type '{op.type}'"
                             + (" with T = DT_UINT8" if table is Q8_READERS else ""))
        outs = handler(b, op, Args(op), [b.values[i] for i in op.input])
        for k, (name, value) in enumerate(zip(op.output, outs)):
            # Only the rank of output_shape is used (AUTO ops write 4-D shapes NHWC).
            if k < len(op.output_shape) and isinstance(value, gs.Variable):
                value.shape = [f"{name}_d{j}" for j in range(len(op.output_shape[k].dims))]
            b.values[name] = value
            if tensor_names is not None and isinstance(value, gs.Variable):
                tensor_names[name] = value.name
    graph_outputs = []
    for info in net.output_info:
        value = b.values[info.name]
        if info.data_format == 1 and len(info.dims) == 4:
            value = b.node("Transpose", [value], perm=[0, 2, 3, 1])
        out = gs.Variable(info.name, dtype=_ONNX_DTYPE[info.data_type], shape=list(info.dims))
        b.node("Identity", [value], out=out)
        graph_outputs.append(out)
    graph = gs.Graph(nodes=b.nodes, inputs=graph_inputs, outputs=graph_outputs, opset=17)
    graph.cleanup().toposort()
    boundary = {t.name for t in graph_inputs + graph_outputs}
    for tensor in graph.tensors().values():  # no value_info: onnxruntime infers the shapes
        if isinstance(tensor, gs.Variable) and tensor.name not in boundary:
            tensor.shape, tensor.dtype = None, None
    model = gs.export_onnx(graph)
    model.ir_version = 8  # opset 17's IR version; onnxruntime may lag the onnx package
    return model


# ------------------------------------------------------------------ helpers

def _total_to_pads(total):
    """MACE pads total//2 at the start (ref/conv_2d.cc:66, pooling.cc pad_hw = paddings / 2)."""
    return [total[0] // 2, total[1] // 2, total[0] - total[0] // 2, total[1] - total[1] // 2]


def _need_padding_values(op, args):
    values = args.ints("padding_values")
    if not values:
        raise ValueError(f"{op.type} '{op.name}' without padding_values (padding type) is not modelled")
    return values


# ------------------------------------------------------------------ op handlers

@OP_READERS.register("Conv2D", "DepthwiseConv2d")
def _conv2d(b, op, args, ins):
    strides = args.ints("strides")
    dilations = args.ints("dilations", [1, 1])
    filt = ins[1].values
    group = 1
    weight = ins[1]
    if op.type == "DepthwiseConv2d":  # filter [multiplier, C, kh, kw]
        m, c = filt.shape[:2]
        weight = b.const(filt.transpose(1, 0, 2, 3).reshape(c * m, 1, *filt.shape[2:]), "dw")
        group = c
    y = b.node("Conv", [ins[0], weight] + ins[2:3], strides=strides, dilations=dilations,
               pads=_total_to_pads(_need_padding_values(op, args)), group=group,
               kernel_shape=list(filt.shape[2:]))
    return [fused_activation(b, args, y)]


@OP_READERS.register("Deconv2D", "DepthwiseDeconv2d")
def _deconv2d(b, op, args, ins):
    if args.i("framework_type", 0) == 0:
        # deconv_2d.cc:74-82: TF form, input 2 is an output shape and input 3 the bias.
        raise ValueError(f"Deconv2D '{op.name}' has framework_type TENSORFLOW; TF form not modelled")
    group = args.i("group", 1)
    if op.type == "Deconv2D" and group != 1:
        raise ValueError("grouped Deconv2D not modelled")
    # Deconv2D filter [O, I, kh, kw]; DepthwiseDeconv2d [O/group, I, kh, kw], element
    # [p, g*I/group + q] (ref/depthwise_deconv_2d.cc GroupDeconv2d k_offset); both -> ONNX [I, O/group, ...].
    filt = ins[1].values
    weight = b.const(filt.transpose(1, 0, 2, 3), "deconv_w")
    y = b.node("ConvTranspose", [ins[0], weight] + ins[2:3], strides=args.ints("strides"), group=group,
               pads=_total_to_pads(_need_padding_values(op, args)), kernel_shape=list(filt.shape[2:]))
    return [fused_activation(b, args, y)]


@OP_READERS.register("Activation")
def _activation(b, op, args, ins):
    return [apply_activation(b, args.s("activation", "NOOP"), args, ins[0], ins[1] if len(ins) > 1 else None)]


_ELTWISE_BINARY = {0: "Add", 1: "Sub", 2: "Mul", 3: "Div", 4: "Min", 5: "Max", 9: "Pow"}


@OP_READERS.register("Eltwise")
def _eltwise(b, op, args, ins):
    kind = args.i("type", 14)
    coeff = args.floats("coeff", [])
    if kind == 12:  # CLIP: coeff = [min, max]
        return [b.node("Clip", [ins[0], b.const(np.float32(coeff[0])), b.const(np.float32(coeff[1]))])]
    if kind == 6:
        return [b.node("Neg", [ins[0]])]
    if kind == 7:
        return [b.node("Abs", [ins[0]])]
    if kind == 13:  # SIGN: (0 < x) - (x < 0), eltwise.h:27-29
        return [b.node("Sign", [ins[0]])]
    if kind not in _ELTWISE_BINARY and kind != 10:
        raise ValueError(f"Eltwise type {kind} not modelled")
    if coeff:
        raise ValueError("Eltwise with coeff not modelled")
    operands = list(ins)
    if len(operands) == 1:  # eltwise.cc: the missing operand is scalar_input at its index
        # eltwise.cc casts scalar_input to the op's T (an int32 Eltwise multiplies by an int)
        value = args.f("scalar_input", 1.0)
        scalar = b.const(np.int32(value) if args.i("T", 1) == 4 else np.float32(value), "scalar")
        operands.insert(args.i("scalar_input_index", 1), scalar)
    has_df = args.i("has_data_format", 0)
    shapes = [rank_of(t, "Eltwise") for t in operands]
    if has_df and 4 in shapes:
        # A 4-D constant of an AUTO op is stored NHWC; the CPU runtime transposes it to NCHW at
        # load (flows/cpu/transpose_const.cc: dims {0, 3, 1, 2}).
        operands = [b.const(np.ascontiguousarray(t.values.transpose(0, 3, 1, 2)))
                    if isinstance(t, gs.Constant) and t.values.ndim == 4 else t for t in operands]
    if has_df and 4 in shapes and 1 in shapes:
        # eltwise.cc:1064-1075: a 1-D operand of a 4-D input broadcasts per channel.
        operands = [b.node("Reshape", [t, b.const(np.array([-1, 1, 1], np.int64))]) if r == 1 else t
                    for t, r in zip(operands, shapes)]
    if kind == 10:  # EQUAL writes int32 0/1 (eltwise.cc:990-992, no bool tensors)
        return [b.node("Cast", [b.node("Equal", operands)], to=onnx.TensorProto.INT32)]
    return [b.node(_ELTWISE_BINARY[kind], operands)]


@OP_READERS.register("Pooling")
def _pooling(b, op, args, ins):
    kind = args.i("pooling_type", 1)
    attrs = dict(kernel_shape=args.ints("kernels"), strides=args.ints("strides"),
                 pads=_total_to_pads(_need_padding_values(op, args)),
                 ceil_mode=int(args.i("round_mode", 1) == 1))
    if kind == 2:
        return [b.node("MaxPool", [ins[0]], dilations=args.ints("dilations", [1, 1]), **attrs)]
    if args.ints("dilations", [1, 1]) != [1, 1]:
        raise ValueError("dilated average pooling not modelled")
    return [b.node("AveragePool", [ins[0]], count_include_pad=0, **attrs)]


_REDUCE = {0: "ReduceMean", 1: "ReduceMin", 2: "ReduceMax", 3: "ReduceProd", 4: "ReduceSum"}


@OP_READERS.register("Reduce")
def _reduce(b, op, args, ins):
    axes = args.ints("axis", [])
    rank = rank_of(ins[0], "Reduce")
    axes = [a % rank for a in axes] if axes else list(range(rank))
    if args.i("has_data_format", 0) and rank == 4:
        axes = [NHWC_TO_NCHW_AXIS[a] for a in axes]
    keep = args.i("keepdims", 0)
    name = _REDUCE[args.i("reduce_type", 0)]
    if name == "ReduceSum":
        return [b.node(name, [ins[0], b.const(np.array(sorted(axes), np.int64))], keepdims=keep)]
    return [b.node(name, [ins[0]], axes=sorted(axes), keepdims=keep)]


@OP_READERS.register("MatMul")
def _matmul(b, op, args, ins):
    a, m = ins[0], ins[1]
    for flag, idx in (("transpose_a", 0), ("transpose_b", 1)):
        if args.i(flag, 0):
            t = ins[idx]
            rank = rank_of(t, "MatMul")
            perm = list(range(rank - 2)) + [rank - 1, rank - 2]
            if idx == 0:
                a = b.node("Transpose", [t], perm=perm)
            else:
                m = b.node("Transpose", [t], perm=perm)
    y = b.node("MatMul", [a, m])
    if len(ins) > 2:  # matmul.cc:195-207: bias [cols] added to every row
        y = b.node("Add", [y, ins[2]])
    return [y]


@OP_READERS.register("Reshape")
def _reshape(b, op, args, ins):
    dims = args.ints("dim", [])
    if not dims:
        raise ValueError("Reshape from a shape tensor not modelled")
    if args.i("has_data_format", 0) and len(dims) == 4:  # reshape.cc: NHWC dim -> NCHW on CPU
        dims = [dims[0], dims[3], dims[1], dims[2]]
    return [b.node("Reshape", [ins[0], b.const(np.array(dims, np.int64))])]


@OP_READERS.register("Transpose")
def _transpose(b, op, args, ins):
    return [b.node("Transpose", [ins[0]], perm=args.ints("dims"))]


@OP_READERS.register("Concat")
def _concat(b, op, args, ins):
    axis = args.i("axis", 3)
    rank = rank_of(ins[0], "Concat")
    if args.i("has_data_format", 0) and rank == 4:
        axis = NHWC_TO_NCHW_AXIS[axis % 4]
    return [b.node("Concat", ins, axis=axis)]


@OP_READERS.register("Softmax")
def _softmax(b, op, args, ins):
    rank = rank_of(ins[0], "Softmax")
    channel = rank == 4 and args.i("axis", 1) == 1  # softmax.cc isNCHW() && axis_ == 1
    return [b.node("LogSoftmax" if args.i("use_log", 0) else "Softmax", [ins[0]],
                   axis=1 if channel else rank - 1)]


@OP_READERS.register("Pad")
def _pad(b, op, args, ins):
    paddings = args.ints("paddings")
    if len(paddings) != 8:
        raise ValueError("Pad needs exactly 8 paddings (pad.cc:70)")
    if args.i("has_data_format", 0):
        paddings = [paddings[i] for i in (0, 1, 6, 7, 2, 3, 4, 5)]
    pad_type = args.i("pad_type", 0)
    mode = {0: "constant", 1: "reflect"}.get(pad_type)
    if mode is None:
        raise ValueError(f"pad_type {pad_type} not modelled")
    onnx_pads = paddings[0::2] + paddings[1::2]
    value = b.const(np.float32(args.f("constant_value", 0.0)))
    return [b.node("Pad", [ins[0], b.const(np.array(onnx_pads, np.int64)), value], mode=mode)]


@OP_READERS.register("Slice")
def _slice(b, op, args, ins):
    axes, starts, ends = args.ints("axes"), args.ints("starts"), args.ints("ends")
    if not (len(axes) == len(starts) == len(ends) == 1):
        raise ValueError("Slice on exactly one axis (slice.cc)")
    return [b.node("Slice", [ins[0]] + [b.const(np.array(v, np.int64)) for v in (starts, ends, axes)])]


@OP_READERS.register("Cast")
def _cast(b, op, args, ins):
    src = args.i("T", 1)
    if src not in (1, 4) or len(op.output_type) != 1:
        raise ValueError("Cast needs T (source) in {float, int32} and one output_type")
    to = {1: onnx.TensorProto.FLOAT, 4: onnx.TensorProto.INT32}[op.output_type[0]]
    return [b.node("Cast", [ins[0]], to=to)]


@OP_READERS.register("BatchNorm")
def _batch_norm(b, op, args, ins):
    if len(ins) != 3:
        raise ValueError("BatchNorm with mean/var inputs not modelled")
    shape = b.const(np.array([-1, 1, 1], np.int64))
    y = b.node("Mul", [ins[0], b.node("Reshape", [ins[1], shape])])
    y = b.node("Add", [y, b.node("Reshape", [ins[2], shape])])
    return [fused_activation(b, args, y)]
