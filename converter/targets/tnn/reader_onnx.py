"""Turn a parsed TNN network into ONNX with TNN's layer semantics, for onnxruntime to execute.

Each ``_layer_*`` function consumes the parameter fields in the order of the TNN parser it cites
(with the parser's defaults) and reproduces what TNN's layer computes: output-size formulas from
``source/tnn/layer/*_layer.cc`` and arithmetic from ``source/tnn/device/cpu/acc/*``.  Shapes are
tracked layer by layer (as TNN's InferOutputShape does) because several layers (pooling,
deconvolution, reshape) define their padding or shape from the input shape.  Every reader
function registers under its layer type id in ``reader_builder.LAYER_READERS`` (this module,
``reader_shape.py`` and ``reader_extra.py``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...errors import BadInput
from ...ir.graph import CANONICAL_OPSET
from .reader import ParsedNet, ProtoLayer
from . import reader_extra, reader_shape  # noqa: F401  (they fill LAYER_READERS)
from .reader_builder import LAYER_READERS, NP_TYPES, Builder, as_float, resource_of

# -- convolution family ---------------------------------------------------------------------------

def _conv_fields(f):
    """conv_layer_interpreter.cc InterpretProto, in order, with its defaults."""
    group, ic, oc = f.int(0), f.int(0), f.int(0)
    kh, kw = f.int(0), f.int(0)
    sh, sw = f.int(0), f.int(0)
    ph, pw = f.int(0), f.int(0)
    has_bias, pad_type = f.int(0), f.int(0)
    dh, dw = f.int(1), f.int(1)
    activation = f.int(0)
    return group, ic, oc, (kh, kw), (sh, sw), (ph, pw), has_bias, pad_type, (dh, dw), activation


def _activation(b: Builder, x: gs.Variable, activation: int, output: gs.Variable) -> None:
    # layer_param.h ActivationType: 0 none, 1 ReLU, 2 ReLU6, 0x100 SIGMOID_MUL
    if activation == 0:
        b.op("Identity", [x], output)
    elif activation == 1:
        b.op("Relu", [x], output)
    elif activation == 2:
        b.op("Clip", [x, b.const(np.float32(0)), b.const(np.float32(6))], output)
    elif activation == 0x100:
        b.op("Mul", [x, b.op("Sigmoid", [x])], output)
    else:
        raise BadInput(f"TNN model: unknown activation_type {activation}")


@LAYER_READERS.register(1)
def _layer_conv(b: Builder, layer: ProtoLayer) -> None:
    group, ic, oc, k, s, p, _, pad_type, d, act = _conv_fields(layer.fields)
    res = resource_of(b, layer)
    x = b.get(layer.inputs[0])
    h, w = x.shape[2:]
    ext = [d[i] * (k[i] - 1) + 1 for i in (0, 1)]
    if pad_type == -1:  # conv_layer.cc: explicit symmetric pads
        pads = [p[0], p[1], p[0], p[1]]
    elif pad_type in (0, 1):  # SAME / VALID, TF formulas in conv_layer.cc
        outs = [math.ceil(v / s[i]) if pad_type == 0 else math.ceil((v - ext[i] + 1) / s[i]) for i, v in enumerate((h, w))]
        along = [(outs[i] - 1) * s[i] + ext[i] - (h, w)[i] for i in (0, 1)]
        pads = [along[0] // 2, along[1] // 2, max(along[0] - along[0] // 2, 0), max(along[1] - along[1] // 2, 0)]
    else:
        raise BadInput(f"TNN model: ConvLayer dont support pad type {pad_type}")
    weight = as_float(res["filter"]).reshape(oc, ic, k[0], k[1])
    inputs = [x, b.const(weight)] + ([b.const(as_float(res["bias"]).reshape(-1))] if "bias" in res else [])
    y = b.op("Conv", inputs, group=group, kernel_shape=list(k), strides=list(s), dilations=list(d), pads=pads)
    _activation(b, y, act, b.out(layer.outputs[0]))


@LAYER_READERS.register(22)
def _layer_deconv(b: Builder, layer: ProtoLayer) -> None:
    group, ic, oc, k, s, p, _, pad_type, d, act = _conv_fields(layer.fields)
    res = resource_of(b, layer)
    x = b.get(layer.inputs[0])
    ext = [d[i] * (k[i] - 1) + 1 for i in (0, 1)]
    if pad_type == -1:  # deconv_layer.cc: out = s*(in-1) + k_ext - 2*pad
        pads = [p[0], p[1], p[0], p[1]]
    elif pad_type in (0, 3):  # SAME: out = in*s; pad_type 3 swaps begin/end (deconv_layer.cc)
        along = [max(ext[i] - s[i], 0) if pad_type == 3 else ext[i] - s[i] for i in (0, 1)]
        top = [a // 2 for a in along]
        down = [along[i] - top[i] for i in (0, 1)]
        begin, end = (down, top) if pad_type == 3 else (top, down)
        pads = [begin[0], begin[1], end[0], end[1]]
    else:
        raise BadInput(f"TNN model: DeconvLayer pad type {pad_type} is not read by edgeconv")
    weight = as_float(res["filter"]).reshape(ic * group, oc // group, k[0], k[1])
    inputs = [x, b.const(weight)] + ([b.const(as_float(res["bias"]).reshape(-1))] if "bias" in res else [])
    y = b.op("ConvTranspose", inputs, group=group, kernel_shape=list(k), strides=list(s), dilations=list(d),
             pads=pads)
    _activation(b, y, act, b.out(layer.outputs[0]))


@LAYER_READERS.register(4)
def _layer_pooling(b: Builder, layer: ProtoLayer) -> None:
    f = layer.fields  # pooling_layer_interpreter.cc
    pool_type = f.int(0)
    kh, kw = f.int(0), f.int(0)
    sh, sw = f.int(0), f.int(0)
    ph, pw = f.int(0), f.int(0)
    index_h, index_w = f.int(-1), f.int(-1)
    if index_w == -1:
        index_w = index_h
    pad_type, ceil_mode = f.int(0), f.int(0)
    adaptive = f.int(0)
    x = b.get(layer.inputs[0])
    dims = x.shape
    if adaptive:
        raise BadInput("TNN model: adaptive pooling is not read by edgeconv")
    # pooling_layer.cc PoolingLayerRuntimeKernelHeight/Width: 0 = whole plane, index = a dim.
    kh = dims[index_h] if index_h != -1 else (dims[2] if kh == 0 else kh)
    kw = dims[index_w] if index_w != -1 else (dims[3] if kw == 0 else kw)
    if pad_type != -1:
        raise BadInput(f"TNN model: pooling pad_type {pad_type} is not read by edgeconv")
    sizes, k, st, pads = dims[2:], (kh, kw), (sh, sw), (ph, pw)
    outs, ends = [], []
    for i in (0, 1):
        value = (sizes[i] + 2 * pads[i] - k[i]) / st[i] + 1
        out = int(math.ceil(value) if ceil_mode == 1 else math.floor(value))
        outs.append(out)
        ends.append(max((out - 1) * st[i] + k[i] - sizes[i] - pads[i], 0))
    onnx_pads = [ph, pw, ends[0], ends[1]]
    op = "MaxPool" if pool_type == 0 else "AveragePool"
    extra = {} if pool_type == 0 else {"count_include_pad": 0}
    b.op(op, [x], b.out(layer.outputs[0]), kernel_shape=[kh, kw], strides=[sh, sw], pads=onnx_pads, **extra)


@LAYER_READERS.register(19)
def _layer_inner_product(b: Builder, layer: ProtoLayer) -> None:
    f = layer.fields  # inner_product_layer_interpreter.cc: all four fields required
    num_output, _has_bias, transpose, axis = f.int(), f.int(), f.int(), f.int()
    if transpose:
        raise BadInput("TNN model: transposed InnerProduct is not read by edgeconv")
    res = resource_of(b, layer)
    x = b.get(layer.inputs[0])
    weight = as_float(res["weight"]).reshape(num_output, -1)
    bias = as_float(res["bias"]).reshape(-1)
    if bias.size == 0:
        bias = np.zeros(num_output, np.float32)
    flat = b.op("Flatten", [x], axis=axis)
    out_shape = list(x.shape[:axis]) + [num_output]
    y = b.op("Gemm", [flat, b.const(weight), b.const(bias)], transB=1)
    b.op("Reshape", [y, b.const(np.array(out_shape, np.int64))], b.out(layer.outputs[0]))


# -- element-wise ---------------------------------------------------------------------------------

_BINARY_OPS = {38: "Add", 108: "Sub", 42: "Mul", 175: "Div", 137: "Max", 140: "Min"}


def _element_shape(weight: np.ndarray, input_shape: list[int]) -> list[int]:
    """multidir_broadcast_layer.cc: a weight stored without dims is placed by its count."""
    count, rank = weight.size, len(input_shape)
    shape = [1] * rank
    if count == 1:
        return shape
    if count == input_shape[1]:
        shape[1] = count
    elif count == int(np.prod(input_shape[1:])):
        shape[1:] = input_shape[1:]
    elif rank >= 4 and count == input_shape[3]:
        shape[3] = count
    elif count == int(np.prod(input_shape[2:])):
        shape[2:] = input_shape[2:]
    else:
        raise BadInput("TNN model: unsupported broadcast type")
    return shape


def _layer_binary(b: Builder, layer: ProtoLayer) -> None:
    index = layer.fields.int(1)  # weight_input_index, default 1
    op = _BINARY_OPS[layer.type]
    out = b.out(layer.outputs[0])
    if len(layer.inputs) >= 2:
        b.op(op, [b.get(n) for n in layer.inputs[:2]], out)
        return
    if index not in (0, 1):
        raise BadInput("TNN model: unsupported weight_input_index")
    x = b.get(layer.inputs[0])
    res = resource_of(b, layer)
    weight = as_float(res["element"])
    if not res["element_dims"]:
        weight = weight.reshape(_element_shape(weight, list(x.shape)))
    weight = b.const(weight.astype(x.dtype) if x.dtype is not None else weight)
    b.op(op, [weight, x] if index == 0 else [x, weight], out)


@LAYER_READERS.register(105)
def _layer_matmul(b: Builder, layer: ProtoLayer) -> None:
    position = layer.fields.int(-1)  # mat_mul_layer_interpreter.cc (MatMulLayerParam default -1)
    out = b.out(layer.outputs[0])
    if len(layer.inputs) >= 2:
        b.op("MatMul", [b.get(n) for n in layer.inputs[:2]], out)
        return
    weight = b.const(as_float(resource_of(b, layer)["weight"]))
    x = b.get(layer.inputs[0])
    b.op("MatMul", [weight, x] if position == 0 else [x, weight], out)


_UNARY_OPS = {5: "Relu", 23: "Sigmoid", 39: "Tanh", 141: "Exp", 184: "Log", 41: "Abs", 70: "Neg",
              130: "Sqrt", 186: "Floor", 195: "Ceil", 180: "Sin", 178: "Cos", 182: "Tan", 181: "Asin",
              179: "Acos", 183: "Atan", 185: "Reciprocal", 174: "Softplus", 320: "Softsign",
              176: "Sign", 307: "Erf"}


def _layer_unary(b: Builder, layer: ProtoLayer) -> None:
    b.op(_UNARY_OPS[layer.type], [b.get(layer.inputs[0])], b.out(layer.outputs[0]))


@LAYER_READERS.register(125, 171)
def _layer_clip(b: Builder, layer: ProtoLayer) -> None:
    if layer.type == 125:  # ReLU6: no interpreter, no params
        low, high = 0.0, 6.0
    else:
        low, high = layer.fields.float(0.0), layer.fields.float(0.0)  # clip_layer_interpreter.cc
    x = b.get(layer.inputs[0])
    b.op("Clip", [x, b.const(np.float32(low)), b.const(np.float32(high))], b.out(layer.outputs[0]))


@LAYER_READERS.register(132)
def _layer_elu(b: Builder, layer: ProtoLayer) -> None:
    alpha = layer.fields.float(1.0)  # elu_layer_interpreter.cc (EluLayerParam alpha = 1)
    b.op("Elu", [b.get(layer.inputs[0])], b.out(layer.outputs[0]), alpha=alpha)


@LAYER_READERS.register(187)
def _layer_selu(b: Builder, layer: ProtoLayer) -> None:
    alpha, gamma = layer.fields.float(1.67326), layer.fields.float(1.0507)  # selu_layer_interpreter.cc
    b.op("Selu", [b.get(layer.inputs[0])], b.out(layer.outputs[0]), alpha=alpha, gamma=gamma)


@LAYER_READERS.register(35)
def _layer_prelu(b: Builder, layer: ProtoLayer) -> None:
    shared = 1 if layer.fields.int(0) == 1 else 0  # prelu_layer_interpreter.cc: channel_shared
    slope = as_float(resource_of(b, layer)["slope"]).reshape(-1)
    x = b.get(layer.inputs[0])
    # cpu_prelu_layer_acc.cc: slope[channel] along dim 1, or slope[0] when shared
    shape = [1] * len(x.shape)
    if not shared:
        shape[1] = slope.size
    else:
        slope = slope[:1]
    b.op("PRelu", [x, b.const(slope.reshape(shape))], b.out(layer.outputs[0]))


@LAYER_READERS.register(172)
def _layer_hard_sigmoid(b: Builder, layer: ProtoLayer) -> None:
    alpha, beta = layer.fields.float(0.2), layer.fields.float(0.5)
    b.op("HardSigmoid", [b.get(layer.inputs[0])], b.out(layer.outputs[0]), alpha=alpha, beta=beta)


@LAYER_READERS.register(173)
def _layer_hard_swish(b: Builder, layer: ProtoLayer) -> None:
    # cpu_hard_swish_layer_acc.cc: y = x0 * clip(x1 * alpha + beta, 0, 1), x1 = x0 for one input
    alpha, beta = layer.fields.float(1.0), layer.fields.float(0.0)
    x0 = b.get(layer.inputs[0])
    x1 = b.get(layer.inputs[1]) if len(layer.inputs) > 1 else x0
    gate = b.op("HardSigmoid", [x1], alpha=alpha, beta=beta)
    b.op("Mul", [x0, gate], b.out(layer.outputs[0]))


@LAYER_READERS.register(69)
def _layer_power(b: Builder, layer: ProtoLayer) -> None:
    f = layer.fields  # pow_layer_interpreter.cc: exponent scale shift; y = (shift + scale*x)^exponent
    exponent, scale, shift = f.float(1.0), f.float(1.0), f.float(0.0)
    x = b.get(layer.inputs[0])
    base = b.op("Add", [b.op("Mul", [x, b.const(np.float32(scale))]), b.const(np.float32(shift))])
    b.op("Pow", [base, b.const(np.float32(exponent))], b.out(layer.outputs[0]))


@LAYER_READERS.register(21, 330)
def _layer_softmax(b: Builder, layer: ProtoLayer) -> None:
    axis = layer.fields.int(1)  # softmax/log_softmax_layer_interpreter.cc: default 1
    x = b.get(layer.inputs[0])
    axis = (axis + len(x.shape)) % len(x.shape)
    op = "Softmax" if layer.type == 21 else "LogSoftmax"
    b.op(op, [x], b.out(layer.outputs[0]), axis=axis)


_REDUCE_OPS = {169: "ReduceMean", 133: "ReduceSum", 177: "ReduceMax", 192: "ReduceMin", 193: "ReduceProd",
               188: "ReduceL1", 189: "ReduceL2", 190: "ReduceLogSum", 191: "ReduceLogSumExp",
               194: "ReduceSumSquare"}


def _layer_reduce(b: Builder, layer: ProtoLayer) -> None:
    keep = layer.fields.int()  # reduce_op_interpreter.cc: keep_dims, then every token is an axis
    axes = layer.fields.rest_ints()
    op = _REDUCE_OPS[layer.type]
    x = b.get(layer.inputs[0])
    if op == "ReduceSum":
        b.op(op, [x, b.const(np.array(axes, np.int64))], b.out(layer.outputs[0]), keepdims=keep)
    else:
        b.op(op, [x], b.out(layer.outputs[0]), axes=axes, keepdims=keep)


# -- normalization --------------------------------------------------------------------------------

@LAYER_READERS.register(2)
def _layer_batch_norm(b: Builder, layer: ProtoLayer) -> None:
    res = resource_of(b, layer)  # batch_norm_layer_interpreter.cc: scale, bias (zeros if empty)
    x = b.get(layer.inputs[0])
    scale = as_float(res["scale"]).reshape(-1)
    bias = as_float(res["bias"]).reshape(-1)
    bias = bias if bias.size else np.zeros_like(scale)
    shape = [1, -1] + [1] * (len(x.shape) - 2)
    scaled = b.op("Mul", [x, b.const(scale.reshape(shape))])
    b.op("Add", [scaled, b.const(bias.reshape(shape))], b.out(layer.outputs[0]))


@LAYER_READERS.register(43)
def _layer_instance_norm(b: Builder, layer: ProtoLayer) -> None:
    _channels, eps = layer.fields.int(0), layer.fields.float(1e-5)  # instance_norm_layer_interpreter.cc
    res = resource_of(b, layer)
    scale = as_float(res["scale"]).reshape(-1)
    bias = as_float(res["bias"]).reshape(-1)
    bias = bias if bias.size else np.zeros_like(scale)
    b.op("InstanceNormalization", [b.get(layer.inputs[0]), b.const(scale), b.const(bias)],
         b.out(layer.outputs[0]), epsilon=eps)


@LAYER_READERS.register(326)
def _layer_layer_norm(b: Builder, layer: ProtoLayer) -> None:
    reduce_dims, eps = layer.fields.int(0), layer.fields.float(1e-5)  # layer_norm_layer_interpreter.cc
    if len(layer.inputs) < 3:
        raise BadInput("TNN model: LayerNormLayer has no input blob of scale or bias")
    x, scale, bias = (b.get(n) for n in layer.inputs[:3])
    # cpu_layer_norm_layer_acc.cc: the trailing len(scale.dims) dims are normalized
    reduce_dims = len(scale.shape) if scale.shape is not None else reduce_dims
    b.op("LayerNormalization", [x, scale, bias], b.out(layer.outputs[0]), axis=len(x.shape) - reduce_dims,
         epsilon=eps)


LAYER_READERS.register(*_BINARY_OPS)(_layer_binary)
LAYER_READERS.register(*_UNARY_OPS)(_layer_unary)
LAYER_READERS.register(*_REDUCE_OPS)(_layer_reduce)


def to_onnx(net: ParsedNet) -> onnx.ModelProto:
    b = Builder(net)
    graph_inputs = []
    for name, (dims, data_type) in net.inputs.items():
        if data_type not in NP_TYPES:
            raise BadInput(f"TNN model: input '{name}' has unsupported data type {data_type}")
        var = gs.Variable(name, dtype=NP_TYPES[data_type], shape=list(dims))
        b.tensors[name] = var
        graph_inputs.append(var)
    for layer in net.layers:
        convert = LAYER_READERS.get(layer.type)
        if convert is None:
            raise BadInput(f"TNN model: layer type {layer.type_str} is not read by edgeconv")
        start = len(b.nodes)
        convert(b, layer)
        b.infer(start)
    outputs = [b.get(name) for name in net.outputs]
    graph = gs.Graph(nodes=b.nodes, inputs=graph_inputs, outputs=outputs, opset=CANONICAL_OPSET)
    model = gs.export_onnx(graph.cleanup(remove_unused_graph_inputs=False).toposort(), do_type_check=False)
    model.producer_name = "edgeconv-tnn-reader"
    model.ir_version = 8  # opset 17's IR version; newer onnx packages stamp one onnxruntime may not know
    return model


def load_as_onnx(proto_path: str | Path, model_path: str | Path):
    from .reader_int8 import dequantize_int8, quantize_blobs

    from .reader import read

    net = read(proto_path, model_path)
    scales = dequantize_int8(net)
    model = to_onnx(net)
    return quantize_blobs(model, scales) if scales else model
