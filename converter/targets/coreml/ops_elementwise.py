"""Element-wise ONNX ops and activations -> MIL (``elementwise_unary/binary.py``, ``activation.py``
op specs in coremltools ``converters/mil/mil/ops/defs/iOS15/``)."""

from __future__ import annotations

import numpy as np

from ...graph import attr, static_shape
from ...errors import Unsupported
from .mil_registry import maps, output_shape

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "real_div", "Pow": "pow",
           "Max": "maximum", "Min": "minimum", "Sum": "add", "Equal": "equal", "Greater": "greater",
           "Less": "less"}


@maps(*_BINARY)
def _binary(ctx, node, out):
    if len(node.inputs) != 2:
        raise Unsupported(f"node '{node.name}' ({node.op}): only two operands are mapped")
    fn = getattr(ctx.mb, _BINARY[node.op])
    return fn(x=ctx.value(node.inputs[0]), y=ctx.value(node.inputs[1]), name=out)


_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
          "Sqrt": "sqrt", "Abs": "abs", "Erf": "erf", "Floor": "floor",
          "Ceil": "ceil", "Softsign": "softsign", "Softplus": "softplus", "Identity": "identity",
          "Dropout": "identity", "Cos": "cos", "Sin": "sin", "Sign": "sign", "Not": "logical_not",
          "Round": "round"}


@maps(*_UNARY)
def _unary(ctx, node, out):
    return getattr(ctx.mb, _UNARY[node.op])(x=ctx.value(node.inputs[0]), name=out)


@maps("Reciprocal")
def _reciprocal(ctx, node, out):
    """``real_div(1, x)``, not MIL ``inverse``: that computes 1 / (x + epsilon) with epsilon
    defaulting to 1e-4 (iOS15/elementwise_unary.py inverse), off by ~1e-4 relative."""
    return ctx.mb.real_div(x=np.float32(1.0), y=ctx.value(node.inputs[0]), name=out)


@maps("Where")
def _where(ctx, node, out):
    return ctx.mb.select(cond=ctx.value(node.inputs[0]), a=ctx.value(node.inputs[1]),
                         b=ctx.value(node.inputs[2]), name=out)


@maps("Selu")
def _selu(ctx, node, out):
    """selu = gamma * elu(x, alpha)."""
    alpha, gamma = attr(node, "alpha", 1.67326319217681884765625), attr(node, "gamma", 1.05070102214813232421875)
    elu = ctx.mb.elu(x=ctx.value(node.inputs[0]), alpha=np.float32(alpha), name=f"{out}_elu")
    return ctx.mb.mul(x=elu, y=np.float32(gamma), name=out)


@maps("LogSoftmax")
def _log_softmax(ctx, node, out):
    soft = ctx.mb.softmax(x=ctx.value(node.inputs[0]), axis=int(attr(node, "axis", -1)), name=f"{out}_softmax")
    return ctx.mb.log(x=soft, name=out)


@maps("ArgMax", "ArgMin")
def _arg_reduce(ctx, node, out):
    if attr(node, "select_last_index", 0):
        raise Unsupported(f"node '{node.name}' ({node.op}): select_last_index=1 is not mapped")
    fn = ctx.mb.reduce_argmax if node.op == "ArgMax" else ctx.mb.reduce_argmin
    return fn(x=ctx.value(node.inputs[0]), axis=int(attr(node, "axis", 0)),
              keep_dims=bool(attr(node, "keepdims", 1)), name=out)


@maps("Shape")
def _shape(ctx, node, out):
    shape = static_shape(node.inputs[0])
    if shape is None:
        raise Unsupported(f"node '{node.name}' (Shape): input shape must be static for CoreML")
    start, end = attr(node, "start", 0), attr(node, "end", None)
    return np.array(shape[start:end], dtype=np.int64)  # a build-time constant


@maps("ConstantOfShape")
def _constant_of_shape(ctx, node, out):
    shape = ctx.const(node, 0, "shape")
    value = attr(node, "value")
    fill = np.asarray(value.values if value is not None else np.zeros(1, np.float32)).reshape(-1)[0]
    return np.full([int(d) for d in shape], fill)


@maps("Range")
def _range(ctx, node, out):
    start, limit, delta = (ctx.const(node, i, w) for i, w in enumerate(("start", "limit", "delta")))
    return np.arange(start, limit, delta, dtype=np.asarray(start).dtype)


@maps("Tile")
def _tile(ctx, node, out):
    reps = ctx.const(node, 1, "repeats")
    return ctx.mb.tile(x=ctx.value(node.inputs[0]), reps=[int(r) for r in reps], name=out)


@maps("Expand")
def _expand(ctx, node, out):
    """Broadcast to the (static) output shape: tile by out/in after right-aligning the ranks."""
    x = ctx.value(node.inputs[0])
    in_shape, out_shape = static_shape(node.inputs[0]), output_shape(node)
    if in_shape is None:
        raise Unsupported(f"node '{node.name}' (Expand): input shape must be static")
    if len(in_shape) < len(out_shape):
        in_shape = (1,) * (len(out_shape) - len(in_shape)) + tuple(in_shape)
        x = ctx.mb.reshape(x=x, shape=list(in_shape), name=f"{out}_rank")
    return ctx.mb.tile(x=x, reps=[o // i for i, o in zip(in_shape, out_shape)], name=out)


@maps("CumSum")
def _cumsum(ctx, node, out):
    axis = int(ctx.const(node, 1, "axis").reshape(-1)[0])
    return ctx.mb.cumsum(x=ctx.value(node.inputs[0]), axis=axis, exclusive=bool(attr(node, "exclusive", 0)),
                         reverse=bool(attr(node, "reverse", 0)), name=out)


@maps("ReduceL2")
def _reduce_l2(ctx, node, out):
    axes = attr(node, "axes")
    kwargs = dict(x=ctx.value(node.inputs[0]), keep_dims=bool(attr(node, "keepdims", 1)), name=out)
    if axes is not None:
        kwargs["axes"] = [int(a) for a in axes]
    return ctx.mb.reduce_l2_norm(**kwargs)


@maps("SpaceToDepth")
def _space_to_depth(ctx, node, out):
    return ctx.mb.space_to_depth(x=ctx.value(node.inputs[0]), block_size=int(attr(node, "blocksize")), name=out)


@maps("Neg")
def _neg(ctx, node, out):
    return ctx.mb.mul(x=ctx.value(node.inputs[0]), y=np.float32(-1.0), name=out)


@maps("Clip")
def _clip(ctx, node, out):
    low = ctx.optional_const(node, 1)
    high = ctx.optional_const(node, 2)
    low = np.float32(-np.inf if low is None else low)
    high = np.float32(np.inf if high is None else high)
    x = ctx.value(node.inputs[0])
    if low == 0 and high == 6:
        return ctx.mb.relu6(x=x, name=out)
    return ctx.mb.clip(x=x, alpha=low, beta=high, name=out)


@maps("LeakyRelu")
def _leaky_relu(ctx, node, out):
    return ctx.mb.leaky_relu(x=ctx.value(node.inputs[0]), alpha=np.float32(attr(node, "alpha", 0.01)),
                             name=out)


@maps("Elu")
def _elu(ctx, node, out):
    return ctx.mb.elu(x=ctx.value(node.inputs[0]), alpha=np.float32(attr(node, "alpha", 1.0)), name=out)


@maps("HardSigmoid")
def _hard_sigmoid(ctx, node, out):
    return ctx.mb.sigmoid_hard(x=ctx.value(node.inputs[0]), alpha=np.float32(attr(node, "alpha", 0.2)),
                               beta=np.float32(attr(node, "beta", 0.5)), name=out)


@maps("HardSwish")
def _hard_swish(ctx, node, out):
    x = ctx.value(node.inputs[0])
    gate = ctx.mb.sigmoid_hard(x=x, alpha=np.float32(1 / 6), beta=np.float32(0.5), name=f"{out}_gate")
    return ctx.mb.mul(x=x, y=gate, name=out)


@maps("PRelu")
def _prelu(ctx, node, out):
    """MIL ``prelu`` takes one slope per channel (axis 1, rank >= 3); other slope shapes use
    ``max(x, 0) + slope * min(x, 0)``, which is exact too."""
    x = ctx.value(node.inputs[0])
    slope = ctx.const(node, 1, "slope").astype(np.float32)
    shape = static_shape(node.inputs[0])
    if shape and len(shape) >= 3 and slope.ndim <= len(shape):
        aligned = (1,) * (len(shape) - slope.ndim) + slope.shape  # ONNX broadcasts from the right
        if aligned == (1, shape[1]) + (1,) * (len(shape) - 2):
            return ctx.mb.prelu(x=x, alpha=slope.reshape(shape[1]), name=out)
    pos = ctx.mb.relu(x=x, name=f"{out}_pos")
    neg = ctx.mb.minimum(x=x, y=np.float32(0.0), name=f"{out}_negpart")
    return ctx.mb.add(x=pos, y=ctx.mb.mul(x=neg, y=slope, name=f"{out}_neg"), name=out)


@maps("Softmax")
def _softmax(ctx, node, out):
    return ctx.mb.softmax(x=ctx.value(node.inputs[0]), axis=int(attr(node, "axis", -1)), name=out)

