"""Element-wise, activation, softmax and reduction layers: ONNX op -> TNN layer parameters.

Each function cites the TNN parser (``source/tnn/interpreter/tnn/layer_interpreter/``) whose
field order it follows.  Layers without an interpreter (ReLU, ReLU6, Tanh, Exp, Abs, Sqrt, Sign)
take no parameters and must not have a resource block.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from .context import ExportContext
from .registry import OPS

FLT_MAX = float(np.finfo(np.float32).max)

_BINARY = {"Add": "Add", "Sub": "Sub", "Mul": "Mul", "Div": "Div", "Max": "Maximum", "Min": "Minimum"}


@OPS.register(*_BINARY)
def binary(ctx: ExportContext, node: gs.Node) -> None:
    """``weight_input_index`` (add/sub/mul/div/max/min_layer_interpreter.cc, default 1): the position
    of the operand held in the .tnnmodel; -1 when both operands are blobs (then no resource).
    The resource is ``RawBuffer element_handle`` with the constant's own shape, which
    MultidirBroadcastLayer broadcasts numpy-style (multidir_broadcast_layer.cc EXPAND)."""
    if len(node.inputs) != 2:
        raise ctx.unsupported(f"{len(node.inputs)} operands; TNN's {_BINARY[node.op]} takes two")
    a, b = node.inputs
    const_a, const_b = ctx.const(a), ctx.const(b)
    out = ctx.blob(node.outputs[0])
    type_ = _BINARY[node.op]
    if const_a is None and const_b is None:
        ctx.emit(type_, [ctx.blob(a), ctx.blob(b)], [out], [-1])
        return
    index, blob, weight = (1, a, const_b) if const_b is not None else (0, b, const_a)
    if ctx.const(blob) is not None:
        raise ctx.unsupported("both operands are constants (fold constants first)")
    dims = weight.shape if weight.ndim else (1,)
    ctx.emit(type_, [ctx.blob(blob)], [out], [index], [("raw", ctx.raw(weight, dims=dims))])


_UNARY = {
    "Relu": "ReLU", "Sigmoid": "Sigmoid", "Tanh": "Tanh", "Exp": "Exp", "Log": "Log", "Abs": "Abs",
    "Neg": "Neg", "Sqrt": "Sqrt", "Floor": "Floor", "Ceil": "Ceil", "Sin": "Sin", "Cos": "Cos",
    "Tan": "Tan", "Asin": "Asin", "Acos": "Acos", "Atan": "Atan", "Reciprocal": "Reciprocal",
    "Softplus": "Softplus", "Softsign": "Softsign", "Sign": "Sign", "Erf": "Erf",
}


@OPS.register(*_UNARY)
def unary(ctx: ExportContext, node: gs.Node) -> None:
    """No parameters (unary_op_layer_interpreter.h reads none; ReLU/Tanh/Exp/Abs/Sqrt/Sign have
    no interpreter at all)."""
    ctx.emit(_UNARY[node.op], [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])])


@OPS.register("Clip")
def clip(ctx: ExportContext, node: gs.Node) -> None:
    """``min max`` as floats (clip_layer_interpreter.cc GET_FLOAT_2); [0, 6] is ReLU6, which has
    no parameters."""
    bounds = []
    for i, default in ((1, -FLT_MAX), (2, FLT_MAX)):
        tensor = node.inputs[i] if len(node.inputs) > i else None
        value = ctx.const(tensor)
        if tensor is not None and tensor.name and value is None:
            raise ctx.unsupported("Clip bounds must be constants")
        if value is not None and np.size(value) != 1:
            raise ctx.unsupported("Clip bounds must be scalars")
        bounds.append(default if value is None else float(np.reshape(value, -1)[0]))  # () or (1,)
    src, out = ctx.blob(node.inputs[0]), ctx.blob(node.outputs[0])
    if bounds == [0.0, 6.0]:
        ctx.emit("ReLU6", [src], [out])
    else:
        ctx.emit("Clip", [src], [out], [np.float32(bounds[0]), np.float32(bounds[1])])


@OPS.register("Elu")
def elu(ctx: ExportContext, node: gs.Node) -> None:
    """``alpha`` (elu_layer_interpreter.cc)."""
    alpha = np.float32(node.attrs.get("alpha", 1.0))
    ctx.emit("Elu", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], [alpha])


@OPS.register("Selu")
def selu(ctx: ExportContext, node: gs.Node) -> None:
    """``alpha gamma`` (selu_layer_interpreter.cc)."""
    alpha = np.float32(node.attrs.get("alpha", 1.67326319217681884765625))
    gamma = np.float32(node.attrs.get("gamma", 1.05070102214813232421875))
    ctx.emit("Selu", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], [alpha, gamma])


@OPS.register("LeakyRelu")
def leaky_relu(ctx: ExportContext, node: gs.Node) -> None:
    """PReLU with one shared slope: ``channel_shared has_filler`` (prelu_layer_interpreter.cc);
    resource ``string name ; RawBuffer slope`` (float, as onnx_converter_prelu.cc writes it)."""
    alpha = np.float32(node.attrs.get("alpha", 0.01))
    name = ctx.layer_name()
    ctx.emit("PReLU", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], [1, 0],
             [("str", name), ("raw", ctx.raw(np.array([alpha], np.float32)))], name=name)


@OPS.register("HardSigmoid")
def hard_sigmoid(ctx: ExportContext, node: gs.Node) -> None:
    """``alpha beta`` (hard_sigmoid_layer_interpreter.cc); ONNX defaults 0.2, 0.5."""
    params = [np.float32(node.attrs.get("alpha", 0.2)), np.float32(node.attrs.get("beta", 0.5))]
    ctx.emit("HardSigmoid", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], params)


@OPS.register("HardSwish")
def hard_swish(ctx: ExportContext, node: gs.Node) -> None:
    """``alpha beta`` (hard_swish_layer_interpreter.cc): y = x * clip(alpha*x + beta, 0, 1)
    (cpu_hard_swish_layer_acc.cc); ONNX HardSwish is alpha = 1/6, beta = 0.5."""
    params = [np.float32(1.0 / 6.0), np.float32(0.5)]
    ctx.emit("HardSwish", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], params)


@OPS.register("Pow")
def power(ctx: ExportContext, node: gs.Node) -> None:
    """``exponent scale shift`` (pow_layer_interpreter.cc): y = (shift + scale * x) ^ exponent."""
    exponent = ctx.const(node.inputs[1])
    if exponent is None or exponent.size != 1 or ctx.const(node.inputs[0]) is not None:
        raise ctx.unsupported("TNN's Power needs a blob base and one constant exponent")
    params = [np.float32(exponent.reshape(())), np.float32(1.0), np.float32(0.0)]
    ctx.emit("Power", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], params)


@OPS.register("Softmax", "LogSoftmax")
def softmax(ctx: ExportContext, node: gs.Node) -> None:
    """``axis`` (softmax_layer_interpreter.cc / log_softmax_layer_interpreter.cc, default 1).
    Always written: ONNX opset >= 13 defaults to axis -1, TNN's parser to 1 (the default that
    onnx2tnn wrongly keeps).  TNN normalizes over that single axis (cpu_softmax_layer_acc.cc)."""
    rank = ctx.rank(node.inputs[0])
    opset = getattr(ctx.graph, "opset", 17) or 17
    axis = node.attrs.get("axis", -1 if opset >= 13 else 1)
    axis = ctx.positive_axis(axis, rank)
    if opset < 13 and axis != rank - 1:
        raise ctx.unsupported("opset < 13 Softmax flattens from its axis; TNN's Softmax is single-axis")
    type_ = "Softmax" if node.op == "Softmax" else "LogSoftmax"
    ctx.emit(type_, [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], [axis])


_REDUCE = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


@OPS.register(*_REDUCE)
def reduce(ctx: ExportContext, node: gs.Node) -> None:
    """``keep_dims axis0 axis1 ...`` (reduce_op_interpreter.cc: every remaining token is an axis)."""
    rank = ctx.rank(node.inputs[0])
    axes = node.attrs.get("axes")
    if len(node.inputs) > 1 and node.inputs[1].name:
        value = ctx.const(node.inputs[1])
        if value is None:
            raise ctx.unsupported("reduction axes must be constant")
        axes = value.reshape(-1).tolist()
    if not axes:
        if node.attrs.get("noop_with_empty_axes", 0):
            raise ctx.unsupported("noop_with_empty_axes reduction")
        axes = list(range(rank))
    axes = sorted({ctx.positive_axis(int(a), rank) for a in axes})
    keep = int(node.attrs.get("keepdims", 1))
    ctx.emit(node.op, [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], [keep, *axes])
