"""ONNX op -> MIL op(s): one small function per ONNX op, registered in ``MAPPINGS``.

Each function takes the build context (``ctx.value(tensor)`` = the MIL Var or constant of an ONNX
tensor, ``ctx.const(node, i, what)`` = an input MIL needs at build time, ``ctx.mb`` = coremltools'
builder) and the node, and returns the MIL Var(s) for the node's outputs, named ``out``.  The MIL
semantics followed are Apple's op specs (``shared/reference/coreml/mil_selected_op_specs.md``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx

from ...errors import Unsupported
from ...graph import attr, static_shape

# --------------------------------------------------------------------------------------------
# One function per ONNX op: (ctx, node) -> MIL Var (or a list of Vars for multi-output ops).
# --------------------------------------------------------------------------------------------

MAPPINGS: dict[str, Callable] = {}


def _maps(*onnx_ops: str):
    def register(fn):
        for op in onnx_ops:
            MAPPINGS[op] = fn
        return fn

    return register


def supported_onnx_ops() -> list[str]:
    return sorted(MAPPINGS)


_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "real_div", "Pow": "pow",
           "Max": "maximum", "Min": "minimum", "Sum": "add", "Equal": "equal", "Greater": "greater",
           "Less": "less"}


@_maps(*_BINARY)
def _binary(ctx, node, out):
    if len(node.inputs) != 2:
        raise Unsupported(f"node '{node.name}' ({node.op}): only two operands are mapped")
    fn = getattr(ctx.mb, _BINARY[node.op])
    return fn(x=ctx.value(node.inputs[0]), y=ctx.value(node.inputs[1]), name=out)


_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
          "Sqrt": "sqrt", "Abs": "abs", "Erf": "erf", "Reciprocal": "inverse", "Floor": "floor",
          "Ceil": "ceil", "Softsign": "softsign", "Softplus": "softplus", "Identity": "identity",
          "Dropout": "identity", "Cos": "cos", "Sin": "sin", "Sign": "sign", "Not": "logical_not",
          "Round": "round"}


@_maps(*_UNARY)
def _unary(ctx, node, out):
    return getattr(ctx.mb, _UNARY[node.op])(x=ctx.value(node.inputs[0]), name=out)


@_maps("Where")
def _where(ctx, node, out):
    return ctx.mb.select(cond=ctx.value(node.inputs[0]), a=ctx.value(node.inputs[1]),
                         b=ctx.value(node.inputs[2]), name=out)


@_maps("Selu")
def _selu(ctx, node, out):
    """selu = gamma * elu(x, alpha)."""
    alpha, gamma = attr(node, "alpha", 1.67326319217681884765625), attr(node, "gamma", 1.05070102214813232421875)
    elu = ctx.mb.elu(x=ctx.value(node.inputs[0]), alpha=np.float32(alpha), name=f"{out}_elu")
    return ctx.mb.mul(x=elu, y=np.float32(gamma), name=out)


@_maps("LogSoftmax")
def _log_softmax(ctx, node, out):
    soft = ctx.mb.softmax(x=ctx.value(node.inputs[0]), axis=int(attr(node, "axis", -1)), name=f"{out}_softmax")
    return ctx.mb.log(x=soft, name=out)


@_maps("ArgMax", "ArgMin")
def _arg_reduce(ctx, node, out):
    if attr(node, "select_last_index", 0):
        raise Unsupported(f"node '{node.name}' ({node.op}): select_last_index=1 is not mapped")
    fn = ctx.mb.reduce_argmax if node.op == "ArgMax" else ctx.mb.reduce_argmin
    return fn(x=ctx.value(node.inputs[0]), axis=int(attr(node, "axis", 0)),
              keep_dims=bool(attr(node, "keepdims", 1)), name=out)


@_maps("Shape")
def _shape(ctx, node, out):
    shape = static_shape(node.inputs[0])
    if shape is None:
        raise Unsupported(f"node '{node.name}' (Shape): input shape must be static for CoreML")
    start, end = attr(node, "start", 0), attr(node, "end", None)
    return np.array(shape[start:end], dtype=np.int64)  # a build-time constant


@_maps("ConstantOfShape")
def _constant_of_shape(ctx, node, out):
    shape = ctx.const(node, 0, "shape")
    value = attr(node, "value")
    fill = np.asarray(value.values if value is not None else np.zeros(1, np.float32)).reshape(-1)[0]
    return np.full([int(d) for d in shape], fill)


@_maps("Range")
def _range(ctx, node, out):
    start, limit, delta = (ctx.const(node, i, w) for i, w in enumerate(("start", "limit", "delta")))
    return np.arange(start, limit, delta, dtype=np.asarray(start).dtype)


@_maps("Tile")
def _tile(ctx, node, out):
    reps = ctx.const(node, 1, "repeats")
    return ctx.mb.tile(x=ctx.value(node.inputs[0]), reps=[int(r) for r in reps], name=out)


@_maps("Expand")
def _expand(ctx, node, out):
    """Broadcast to the (static) output shape: tile by out/in after right-aligning the ranks."""
    x = ctx.value(node.inputs[0])
    in_shape, out_shape = static_shape(node.inputs[0]), _output_shape(node)
    if in_shape is None:
        raise Unsupported(f"node '{node.name}' (Expand): input shape must be static")
    if len(in_shape) < len(out_shape):
        in_shape = (1,) * (len(out_shape) - len(in_shape)) + tuple(in_shape)
        x = ctx.mb.reshape(x=x, shape=list(in_shape), name=f"{out}_rank")
    return ctx.mb.tile(x=x, reps=[o // i for i, o in zip(in_shape, out_shape)], name=out)


@_maps("CumSum")
def _cumsum(ctx, node, out):
    axis = int(ctx.const(node, 1, "axis").reshape(-1)[0])
    return ctx.mb.cumsum(x=ctx.value(node.inputs[0]), axis=axis, exclusive=bool(attr(node, "exclusive", 0)),
                         reverse=bool(attr(node, "reverse", 0)), name=out)


@_maps("ReduceL2")
def _reduce_l2(ctx, node, out):
    axes = attr(node, "axes")
    kwargs = dict(x=ctx.value(node.inputs[0]), keep_dims=bool(attr(node, "keepdims", 1)), name=out)
    if axes is not None:
        kwargs["axes"] = [int(a) for a in axes]
    return ctx.mb.reduce_l2_norm(**kwargs)


@_maps("SpaceToDepth")
def _space_to_depth(ctx, node, out):
    return ctx.mb.space_to_depth(x=ctx.value(node.inputs[0]), block_size=int(attr(node, "blocksize")), name=out)


@_maps("Neg")
def _neg(ctx, node, out):
    return ctx.mb.mul(x=ctx.value(node.inputs[0]), y=np.float32(-1.0), name=out)


@_maps("Clip")
def _clip(ctx, node, out):
    low = ctx.optional_const(node, 1)
    high = ctx.optional_const(node, 2)
    low = np.float32(-np.inf if low is None else low)
    high = np.float32(np.inf if high is None else high)
    x = ctx.value(node.inputs[0])
    if low == 0 and high == 6:
        return ctx.mb.relu6(x=x, name=out)
    return ctx.mb.clip(x=x, alpha=low, beta=high, name=out)


@_maps("LeakyRelu")
def _leaky_relu(ctx, node, out):
    return ctx.mb.leaky_relu(x=ctx.value(node.inputs[0]), alpha=np.float32(attr(node, "alpha", 0.01)),
                             name=out)


@_maps("Elu")
def _elu(ctx, node, out):
    return ctx.mb.elu(x=ctx.value(node.inputs[0]), alpha=np.float32(attr(node, "alpha", 1.0)), name=out)


@_maps("HardSigmoid")
def _hard_sigmoid(ctx, node, out):
    return ctx.mb.sigmoid_hard(x=ctx.value(node.inputs[0]), alpha=np.float32(attr(node, "alpha", 0.2)),
                               beta=np.float32(attr(node, "beta", 0.5)), name=out)


@_maps("HardSwish")
def _hard_swish(ctx, node, out):
    x = ctx.value(node.inputs[0])
    gate = ctx.mb.sigmoid_hard(x=x, alpha=np.float32(1 / 6), beta=np.float32(0.5), name=f"{out}_gate")
    return ctx.mb.mul(x=x, y=gate, name=out)


@_maps("PRelu")
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


@_maps("Softmax")
def _softmax(ctx, node, out):
    return ctx.mb.softmax(x=ctx.value(node.inputs[0]), axis=int(attr(node, "axis", -1)), name=out)


def _spatial_pads(node, rank: int) -> tuple[str, list[int]]:
    """ONNX auto_pad/pads -> MIL (pad_type, pad) where pad is [begin0, end0, begin1, end1, ...]."""
    auto_pad = attr(node, "auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad == "VALID":
        return "valid", [0] * (2 * rank)
    if auto_pad == "SAME_UPPER":
        return "same", [0] * (2 * rank)
    if auto_pad == "SAME_LOWER":
        return "same_lower", [0] * (2 * rank)
    pads = list(attr(node, "pads", [0] * (2 * rank)))
    return "custom", [int(pads[i + j]) for i in range(rank) for j in (0, rank)]


@_maps("Conv")
def _conv(ctx, node, out):
    weight = ctx.const(node, 1, "weight").astype(np.float32)
    rank = weight.ndim - 2
    pad_type, pad = _spatial_pads(node, rank)
    bias = ctx.optional_const(node, 2)
    kwargs = dict(
        x=ctx.value(node.inputs[0]), weight=weight,
        strides=list(attr(node, "strides", [1] * rank)),
        dilations=list(attr(node, "dilations", [1] * rank)),
        groups=int(attr(node, "group", 1)), pad_type=pad_type, name=out,
    )
    if pad_type == "custom":
        kwargs["pad"] = pad
    if bias is not None:
        kwargs["bias"] = bias.astype(np.float32)
    return ctx.mb.conv(**kwargs)


@_maps("ConvTranspose")
def _conv_transpose(ctx, node, out):
    """``output_padding`` becomes a smaller end crop (the extra rows are real deconv outputs, not
    zeros), as coremltools' torch frontend does; it must not exceed the end padding."""
    weight = ctx.const(node, 1, "weight").astype(np.float32)
    rank = weight.ndim - 2
    pad_type, pad = _spatial_pads(node, rank)
    if pad_type != "custom" or attr(node, "output_shape") is not None:
        raise Unsupported(f"node '{node.name}' (ConvTranspose): only explicit pads are mapped")
    output_padding = list(attr(node, "output_padding", [0] * rank))
    for i, extra in enumerate(output_padding):
        if extra > pad[2 * i + 1]:
            raise Unsupported(
                f"node '{node.name}' (ConvTranspose): output_padding {extra} exceeds end pad "
                f"{pad[2 * i + 1]} on spatial axis {i}"
            )
        pad[2 * i + 1] -= int(extra)
    bias = ctx.optional_const(node, 2)
    kwargs = dict(
        x=ctx.value(node.inputs[0]), weight=weight, pad_type="custom", pad=pad,
        strides=list(attr(node, "strides", [1] * rank)),
        dilations=list(attr(node, "dilations", [1] * rank)),
        groups=int(attr(node, "group", 1)), name=out,
    )
    if bias is not None:
        kwargs["bias"] = bias.astype(np.float32)
    return ctx.mb.conv_transpose(**kwargs)


def _pool_kwargs(node) -> dict[str, Any]:
    kernel = list(attr(node, "kernel_shape"))
    rank = len(kernel)
    if any(d != 1 for d in attr(node, "dilations", [1] * rank)):
        raise Unsupported(f"node '{node.name}' ({node.op}): dilated pooling is not in MIL")
    pad_type, pad = _spatial_pads(node, rank)
    kwargs = dict(kernel_sizes=kernel, strides=list(attr(node, "strides", [1] * rank)),
                  pad_type=pad_type, ceil_mode=bool(attr(node, "ceil_mode", 0)))
    if pad_type == "custom":
        kwargs["pad"] = pad
    return kwargs


@_maps("MaxPool")
def _max_pool(ctx, node, out):
    if len(node.outputs) > 1 and node.outputs[1].name:
        raise Unsupported(f"node '{node.name}' (MaxPool): the Indices output is not in MIL")
    return ctx.mb.max_pool(x=ctx.value(node.inputs[0]), name=out, **_pool_kwargs(node))


@_maps("AveragePool")
def _avg_pool(ctx, node, out):
    return ctx.mb.avg_pool(
        x=ctx.value(node.inputs[0]), name=out,
        exclude_padding_from_average=not bool(attr(node, "count_include_pad", 0)),
        **_pool_kwargs(node),
    )


def _spatial_axes(node) -> list[int]:
    shape = static_shape(node.inputs[0])
    if shape is None:
        raise Unsupported(f"node '{node.name}' ({node.op}): input rank must be known")
    return list(range(2, len(shape)))


@_maps("GlobalAveragePool")
def _global_avg_pool(ctx, node, out):
    return ctx.mb.reduce_mean(x=ctx.value(node.inputs[0]), axes=_spatial_axes(node), keep_dims=True,
                              name=out)


@_maps("GlobalMaxPool")
def _global_max_pool(ctx, node, out):
    return ctx.mb.reduce_max(x=ctx.value(node.inputs[0]), axes=_spatial_axes(node), keep_dims=True,
                             name=out)


_REDUCE = {"ReduceMean": "reduce_mean", "ReduceMax": "reduce_max", "ReduceMin": "reduce_min",
           "ReduceSum": "reduce_sum", "ReduceProd": "reduce_prod"}


@_maps(*_REDUCE)
def _reduce(ctx, node, out):
    # Opset 17: ReduceSum takes axes as input 1, the others as an attribute.
    axes = ctx.optional_const(node, 1) if node.op == "ReduceSum" else attr(node, "axes")
    kwargs = dict(x=ctx.value(node.inputs[0]), keep_dims=bool(attr(node, "keepdims", 1)), name=out)
    if axes is not None and len(axes):
        kwargs["axes"] = [int(a) for a in np.asarray(axes).reshape(-1)]
    elif attr(node, "noop_with_empty_axes", 0):
        return ctx.mb.identity(x=kwargs["x"], name=out)
    return getattr(ctx.mb, _REDUCE[node.op])(**kwargs)


@_maps("BatchNormalization")
def _batch_norm(ctx, node, out):
    c = lambda i, what: ctx.const(node, i, what).astype(np.float32)  # noqa: E731
    return ctx.mb.batch_norm(
        x=ctx.value(node.inputs[0]), gamma=c(1, "scale"), beta=c(2, "bias"), mean=c(3, "mean"),
        variance=c(4, "var"), epsilon=np.float32(attr(node, "epsilon", 1e-5)), name=out,
    )


@_maps("InstanceNormalization")
def _instance_norm(ctx, node, out):
    return ctx.mb.instance_norm(
        x=ctx.value(node.inputs[0]), gamma=ctx.const(node, 1, "scale").astype(np.float32),
        beta=ctx.const(node, 2, "bias").astype(np.float32),
        epsilon=np.float32(attr(node, "epsilon", 1e-5)), name=out,
    )


@_maps("LayerNormalization")
def _layer_norm(ctx, node, out):
    if len(node.outputs) > 1 and any(t.name for t in node.outputs[1:]):
        raise Unsupported(f"node '{node.name}' (LayerNormalization): Mean/InvStdDev outputs")
    shape = static_shape(node.inputs[0])
    if shape is None:
        raise Unsupported(f"node '{node.name}' (LayerNormalization): input rank must be known")
    axis = int(attr(node, "axis", -1)) % len(shape)
    kwargs = dict(x=ctx.value(node.inputs[0]), axes=list(range(axis, len(shape))),
                  gamma=ctx.const(node, 1, "scale").astype(np.float32),
                  epsilon=np.float32(attr(node, "epsilon", 1e-5)), name=out)
    bias = ctx.optional_const(node, 2)
    if bias is not None:
        kwargs["beta"] = bias.astype(np.float32)
    return ctx.mb.layer_norm(**kwargs)


@_maps("Gemm")
def _gemm(ctx, node, out):
    """``alpha*A'B' + beta*C`` -> ``linear`` when B and C are constants (the usual dense layer)."""
    if attr(node, "transA", 0):
        raise Unsupported(f"node '{node.name}' (Gemm): transA=1 is not mapped")
    weight = ctx.const(node, 1, "B").astype(np.float32)
    weight = weight if attr(node, "transB", 0) else weight.T  # linear wants [out, in]
    weight = weight * np.float32(attr(node, "alpha", 1.0))
    bias = ctx.optional_const(node, 2)
    kwargs = dict(x=ctx.value(node.inputs[0]), weight=np.ascontiguousarray(weight), name=out)
    if bias is not None:
        bias = np.broadcast_to(bias.astype(np.float32) * np.float32(attr(node, "beta", 1.0)),
                               (weight.shape[0],))
        kwargs["bias"] = np.ascontiguousarray(bias)
    return ctx.mb.linear(**kwargs)


@_maps("MatMul")
def _matmul(ctx, node, out):
    return ctx.mb.matmul(x=ctx.value(node.inputs[0]), y=ctx.value(node.inputs[1]), name=out)


def _output_shape(node) -> list[int]:
    shape = static_shape(node.outputs[0])
    if shape is None:
        raise Unsupported(f"node '{node.name}' ({node.op}): output shape must be static for CoreML")
    return list(shape)


@_maps("Reshape", "Flatten")
def _reshape(ctx, node, out):
    # The normalized graph has static shapes: use the inferred output shape, which already
    # resolves ONNX's 0 (copy) and -1 (infer) entries.
    return ctx.mb.reshape(x=ctx.value(node.inputs[0]), shape=_output_shape(node), name=out)


@_maps("Squeeze")
def _squeeze(ctx, node, out):
    axes = ctx.optional_const(node, 1)
    kwargs = dict(x=ctx.value(node.inputs[0]), name=out)
    if axes is not None:
        kwargs["axes"] = [int(a) for a in axes.reshape(-1)]
    return ctx.mb.squeeze(**kwargs)


@_maps("Unsqueeze")
def _unsqueeze(ctx, node, out):
    axes = ctx.const(node, 1, "axes")
    return ctx.mb.expand_dims(x=ctx.value(node.inputs[0]), axes=[int(a) for a in axes.reshape(-1)],
                              name=out)


@_maps("Transpose")
def _transpose(ctx, node, out):
    perm = attr(node, "perm")
    if perm is None:
        perm = list(reversed(range(len(_output_shape(node)))))
    return ctx.mb.transpose(x=ctx.value(node.inputs[0]), perm=[int(p) for p in perm], name=out)


@_maps("Concat")
def _concat(ctx, node, out):
    return ctx.mb.concat(values=[ctx.value(t) for t in node.inputs], axis=int(attr(node, "axis")),
                         name=out)


@_maps("Split")
def _split(ctx, node, out):
    axis = int(attr(node, "axis", 0))
    sizes = ctx.optional_const(node, 1)
    kwargs = dict(x=ctx.value(node.inputs[0]), axis=axis, name=out)
    if sizes is not None:
        kwargs["split_sizes"] = [int(s) for s in sizes]
    else:
        kwargs["num_splits"] = len(node.outputs)
    return list(ctx.mb.split(**kwargs))


@_maps("Slice")
def _slice(ctx, node, out):
    shape = static_shape(node.inputs[0])
    if shape is None:
        raise Unsupported(f"node '{node.name}' (Slice): input shape must be static")
    starts, ends = ctx.const(node, 1, "starts"), ctx.const(node, 2, "ends")
    axes = ctx.optional_const(node, 3)
    steps = ctx.optional_const(node, 4)
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    begin, end, stride = [0] * len(shape), list(shape), [1] * len(shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        # Python slice semantics resolve ONNX's clamping of out-of-range starts/ends.
        a = int(a) % len(shape)
        lo, hi, step = slice(int(s), int(e), int(st)).indices(shape[a])
        if step < 0:
            raise Unsupported(f"node '{node.name}' (Slice): negative steps are not mapped")
        begin[a], end[a], stride[a] = lo, max(hi, lo), step
    return ctx.mb.slice_by_index(x=ctx.value(node.inputs[0]), begin=begin, end=end, stride=stride,
                                 name=out)


@_maps("Gather")
def _gather(ctx, node, out):
    indices = ctx.const(node, 1, "indices").astype(np.int32)
    return ctx.mb.gather(x=ctx.value(node.inputs[0]), indices=indices, axis=int(attr(node, "axis", 0)),
                         name=out)


@_maps("Pad")
def _pad(ctx, node, out):
    mode = attr(node, "mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    pads = ctx.const(node, 1, "pads").astype(np.int64)
    if len(node.inputs) > 3 and node.inputs[3].name:
        raise Unsupported(f"node '{node.name}' (Pad): the axes input is not mapped")
    value = ctx.optional_const(node, 2)
    rank = len(pads) // 2
    mil_pad = [int(pads[i + j]) for i in range(rank) for j in (0, rank)]
    return ctx.mb.pad(x=ctx.value(node.inputs[0]), pad=mil_pad, mode=mode,
                      constant_val=np.float32(0.0 if value is None else value.reshape(())), name=out)


@_maps("DepthToSpace")
def _depth_to_space(ctx, node, out):
    mode = attr(node, "mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "DCR":
        return ctx.mb.depth_to_space(x=ctx.value(node.inputs[0]), block_size=int(attr(node, "blocksize")),
                                     name=out)
    return ctx.mb.pixel_shuffle(x=ctx.value(node.inputs[0]), upscale_factor=int(attr(node, "blocksize")),
                                name=out)


@_maps("Resize", "Upsample")
def _resize(ctx, node, out):
    """Integer-scale nearest upsampling only (the common decoder case)."""
    mode = attr(node, "mode", "nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    in_shape, out_shape = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if mode != "nearest" or in_shape is None or out_shape is None or len(in_shape) != 4 \
            or in_shape[:2] != out_shape[:2] or any(o % i for i, o in zip(in_shape[2:], out_shape[2:])):
        raise Unsupported(f"node '{node.name}' (Resize): only integer-scale nearest 4-D is mapped")
    sh, sw = (o // i for i, o in zip(in_shape[2:], out_shape[2:]))
    return ctx.mb.upsample_nearest_neighbor(x=ctx.value(node.inputs[0]), scale_factor_height=sh,
                                            scale_factor_width=sw, name=out)


@_maps("Cast")
def _cast(ctx, node, out):
    to = onnx.helper.tensor_dtype_to_np_dtype(int(attr(node, "to")))
    dtype = {np.dtype(np.float32): "fp32", np.dtype(np.float16): "fp16", np.dtype(np.int32): "int32",
             np.dtype(np.int64): "int32", np.dtype(np.bool_): "bool"}.get(np.dtype(to))
    if dtype is None:
        raise Unsupported(f"node '{node.name}' (Cast): no MIL dtype for {np.dtype(to).name}")
    return ctx.mb.cast(x=ctx.value(node.inputs[0]), dtype=dtype, name=out)
