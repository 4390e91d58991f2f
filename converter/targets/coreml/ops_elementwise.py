"""Element-wise ONNX ops and activations -> MIL (``elementwise_unary/binary.py``, ``activation.py``
op specs in coremltools ``converters/mil/mil/ops/defs/iOS15/``)."""

from __future__ import annotations

import numpy as np

from ...ir.graph import attr, static_shape
from .mil_registry import OPS, output_shape, unsupported

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "real_div", "Pow": "pow",
           "Max": "maximum", "Min": "minimum", "Sum": "add", "Equal": "equal", "Greater": "greater",
           "Less": "less", "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor"}


@OPS.register(*_BINARY)
def _binary(ctx, node) -> None:
    out = ctx.out
    if len(node.inputs) != 2:
        raise unsupported(node, "only two operands are mapped")
    fn = getattr(ctx.mb, _BINARY[node.op])
    ctx.bind(node, fn(x=ctx.value(node.inputs[0]), y=ctx.value(node.inputs[1]), name=out))


_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
          "Sqrt": "sqrt", "Abs": "abs", "Erf": "erf", "Floor": "floor",
          "Ceil": "ceil", "Softsign": "softsign", "Softplus": "softplus", "Identity": "identity",
          "Dropout": "identity", "Cos": "cos", "Sin": "sin", "Sign": "sign", "Not": "logical_not",
          "Round": "round"}


@OPS.register(*_UNARY)
def _unary(ctx, node) -> None:
    out = ctx.out
    ctx.bind(node, getattr(ctx.mb, _UNARY[node.op])(x=ctx.value(node.inputs[0]), name=out))


@OPS.register("Reciprocal")
def _reciprocal(ctx, node) -> None:
    """``real_div(1, x)``, not MIL ``inverse``: that computes 1 / (x + epsilon) with epsilon
    defaulting to 1e-4 (iOS15/elementwise_unary.py inverse), off by ~1e-4 relative."""
    out = ctx.out
    ctx.bind(node, ctx.mb.real_div(x=np.float32(1.0), y=ctx.value(node.inputs[0]), name=out))


@OPS.register("Where")
def _where(ctx, node) -> None:
    """MIL's select types its output from ``a`` and ``b`` alone
    (apple/coremltools@e0e2f42:coremltools/converters/mil/mil/ops/defs/iOS15/control_flow.py select),
    so where the condition is the bigger operand (an attention mask choosing between 0 and
    -inf) a constant branch is broadcast to the output's shape, a computed one by adding zeros."""
    out = ctx.out
    shape = output_shape(node)
    branches = []
    for k, tensor in ((1, node.inputs[1]), (2, node.inputs[2])):
        value = ctx.value(tensor)
        if list(static_shape(tensor) or []) != shape:
            if isinstance(value, np.ndarray):
                value = np.ascontiguousarray(np.broadcast_to(value, shape))
            elif getattr(value.dtype, "__name__", "") != "bool":
                zeros = np.zeros(shape, np.int32 if value.dtype.__name__.startswith("int") else np.float32)
                value = ctx.mb.add(x=value, y=zeros, name=f"{out}_b{k}")
        branches.append(value)
    ctx.bind(node, ctx.mb.select(cond=ctx.value(node.inputs[0]), a=branches[0], b=branches[1], name=out))


@OPS.register("Selu")
def _selu(ctx, node) -> None:
    """selu = gamma * elu(x, alpha)."""
    out = ctx.out
    alpha, gamma = attr(node, "alpha", 1.67326319217681884765625), attr(node, "gamma", 1.05070102214813232421875)
    elu = ctx.mb.elu(x=ctx.value(node.inputs[0]), alpha=np.float32(alpha), name=f"{out}_elu")
    ctx.bind(node, ctx.mb.mul(x=elu, y=np.float32(gamma), name=out))


@OPS.register("LogSoftmax")
def _log_softmax(ctx, node) -> None:
    out = ctx.out
    soft = ctx.mb.softmax(x=ctx.value(node.inputs[0]), axis=int(attr(node, "axis", -1)), name=f"{out}_softmax")
    ctx.bind(node, ctx.mb.log(x=soft, name=out))


@OPS.register("ArgMax", "ArgMin")
def _arg_reduce(ctx, node) -> None:
    out = ctx.out
    if attr(node, "select_last_index", 0):
        raise unsupported(node, "select_last_index=1 is not mapped")
    fn = ctx.mb.reduce_argmax if node.op == "ArgMax" else ctx.mb.reduce_argmin
    ctx.bind(node, fn(x=ctx.value(node.inputs[0]), axis=int(attr(node, "axis", 0)),
                      keep_dims=bool(attr(node, "keepdims", 1)), name=out))


@OPS.register("Shape")
def _shape(ctx, node) -> None:
    shape = static_shape(node.inputs[0])
    if shape is None:
        raise unsupported(node, "input shape must be static for CoreML")
    start, end = attr(node, "start", 0), attr(node, "end", None)
    ctx.bind(node, np.array(shape[start:end], dtype=np.int64))  # a build-time constant


@OPS.register("ConstantOfShape")
def _constant_of_shape(ctx, node) -> None:
    shape = ctx.const(node, 0, "shape")
    value = attr(node, "value")
    fill = np.asarray(value.values if value is not None else np.zeros(1, np.float32)).reshape(-1)[0]
    ctx.bind(node, np.full([int(d) for d in shape], fill))


@OPS.register("Range")
def _range(ctx, node) -> None:
    start, limit, delta = (ctx.const(node, i, w) for i, w in enumerate(("start", "limit", "delta")))
    ctx.bind(node, np.arange(start, limit, delta, dtype=np.asarray(start).dtype))


@OPS.register("Tile")
def _tile(ctx, node) -> None:
    out = ctx.out
    reps = ctx.const(node, 1, "repeats")
    ctx.bind(node, ctx.mb.tile(x=ctx.value(node.inputs[0]), reps=[int(r) for r in reps], name=out))


@OPS.register("Expand")
def _expand(ctx, node) -> None:
    """Broadcast to the (static) output shape: tile by out/in after right-aligning the ranks."""
    out = ctx.out
    x = ctx.value(node.inputs[0])
    in_shape, out_shape = static_shape(node.inputs[0]), output_shape(node)
    if in_shape is None:
        raise unsupported(node, "input shape must be static")
    if len(in_shape) < len(out_shape):
        in_shape = (1,) * (len(out_shape) - len(in_shape)) + tuple(in_shape)
        x = ctx.mb.reshape(x=x, shape=list(in_shape), name=f"{out}_rank")
    ctx.bind(node, ctx.mb.tile(x=x, reps=[o // i for i, o in zip(in_shape, out_shape)], name=out))


@OPS.register("CumSum")
def _cumsum(ctx, node) -> None:
    out = ctx.out
    axis = int(ctx.const(node, 1, "axis").reshape(-1)[0])
    ctx.bind(node, ctx.mb.cumsum(x=ctx.value(node.inputs[0]), axis=axis, exclusive=bool(attr(node, "exclusive", 0)),
                                 reverse=bool(attr(node, "reverse", 0)), name=out))


@OPS.register("ReduceL2")
def _reduce_l2(ctx, node) -> None:
    out = ctx.out
    axes = attr(node, "axes")
    kwargs = dict(x=ctx.value(node.inputs[0]), keep_dims=bool(attr(node, "keepdims", 1)), name=out)
    if axes is not None:
        kwargs["axes"] = [int(a) for a in axes]
    ctx.bind(node, ctx.mb.reduce_l2_norm(**kwargs))


@OPS.register("SpaceToDepth")
def _space_to_depth(ctx, node) -> None:
    out = ctx.out
    ctx.bind(node, ctx.mb.space_to_depth(x=ctx.value(node.inputs[0]), block_size=int(attr(node, "blocksize")),
                                         name=out))


@OPS.register("Neg")
def _neg(ctx, node) -> None:
    out = ctx.out
    ctx.bind(node, ctx.mb.mul(x=ctx.value(node.inputs[0]), y=np.float32(-1.0), name=out))


@OPS.register("Clip")
def _clip(ctx, node) -> None:
    out = ctx.out
    low = ctx.optional_const(node, 1)
    high = ctx.optional_const(node, 2)
    low = np.float32(-np.inf if low is None else low)
    high = np.float32(np.inf if high is None else high)
    x = ctx.value(node.inputs[0])
    if low == 0 and high == 6:
        ctx.bind(node, ctx.mb.relu6(x=x, name=out))
        return
    ctx.bind(node, ctx.mb.clip(x=x, alpha=low, beta=high, name=out))


@OPS.register("LeakyRelu")
def _leaky_relu(ctx, node) -> None:
    out = ctx.out
    ctx.bind(node, ctx.mb.leaky_relu(x=ctx.value(node.inputs[0]), alpha=np.float32(attr(node, "alpha", 0.01)),
                                     name=out))


@OPS.register("Elu")
def _elu(ctx, node) -> None:
    out = ctx.out
    ctx.bind(node, ctx.mb.elu(x=ctx.value(node.inputs[0]), alpha=np.float32(attr(node, "alpha", 1.0)), name=out))


@OPS.register("HardSigmoid")
def _hard_sigmoid(ctx, node) -> None:
    out = ctx.out
    ctx.bind(node, ctx.mb.sigmoid_hard(x=ctx.value(node.inputs[0]), alpha=np.float32(attr(node, "alpha", 0.2)),
                                       beta=np.float32(attr(node, "beta", 0.5)), name=out))


@OPS.register("HardSwish")
def _hard_swish(ctx, node) -> None:
    out = ctx.out
    x = ctx.value(node.inputs[0])
    gate = ctx.mb.sigmoid_hard(x=x, alpha=np.float32(1 / 6), beta=np.float32(0.5), name=f"{out}_gate")
    ctx.bind(node, ctx.mb.mul(x=x, y=gate, name=out))


@OPS.register("PRelu")
def _prelu(ctx, node) -> None:
    """MIL ``prelu`` takes one slope per channel (axis 1, rank >= 3); other slope shapes use
    ``max(x, 0) + slope * min(x, 0)``, which is exact too."""
    out = ctx.out
    x = ctx.value(node.inputs[0])
    slope = ctx.const(node, 1, "slope").astype(np.float32)
    shape = static_shape(node.inputs[0])
    if shape and len(shape) >= 3 and slope.ndim <= len(shape):
        aligned = (1,) * (len(shape) - slope.ndim) + slope.shape  # ONNX broadcasts from the right
        if aligned == (1, shape[1]) + (1,) * (len(shape) - 2):
            ctx.bind(node, ctx.mb.prelu(x=x, alpha=slope.reshape(shape[1]), name=out))
            return
    pos = ctx.mb.relu(x=x, name=f"{out}_pos")
    neg = ctx.mb.minimum(x=x, y=np.float32(0.0), name=f"{out}_negpart")
    ctx.bind(node, ctx.mb.add(x=pos, y=ctx.mb.mul(x=neg, y=slope, name=f"{out}_neg"), name=out))


@OPS.register("Softmax")
def _softmax(ctx, node) -> None:
    out = ctx.out
    ctx.bind(node, ctx.mb.softmax(x=ctx.value(node.inputs[0]), axis=int(attr(node, "axis", -1)), name=out))

