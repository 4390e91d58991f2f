"""Convolution, pooling, reductions, normalization and dense ONNX ops -> MIL (op specs in coremltools
``converters/mil/mil/ops/defs/iOS15/{conv,pool,reduction,normalization,linear}.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...ir.graph import attr, static_shape
from .mil_registry import OPS, unsupported

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


@OPS.register("Conv")
def _conv(ctx, node) -> None:
    out = ctx.out
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
    ctx.bind(node, ctx.mb.conv(**kwargs))


@OPS.register("ConvTranspose")
def _conv_transpose(ctx, node) -> None:
    """``output_padding`` becomes a smaller end crop (the extra rows are real deconv outputs, not
    zeros), as coremltools' torch frontend does; it must not exceed the end padding."""
    out = ctx.out
    weight = ctx.const(node, 1, "weight").astype(np.float32)
    rank = weight.ndim - 2
    pad_type, pad = _spatial_pads(node, rank)
    if pad_type != "custom" or attr(node, "output_shape") is not None:
        raise unsupported(node, "only explicit pads are mapped")
    output_padding = list(attr(node, "output_padding", [0] * rank))
    for i, extra in enumerate(output_padding):
        if extra > pad[2 * i + 1]:
            raise unsupported(node, f"output_padding {extra} exceeds end pad {pad[2 * i + 1]} on spatial axis {i}")
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
    ctx.bind(node, ctx.mb.conv_transpose(**kwargs))


def _pool_kwargs(node) -> dict[str, Any]:
    kernel = list(attr(node, "kernel_shape"))
    rank = len(kernel)
    if any(d != 1 for d in attr(node, "dilations", [1] * rank)):
        raise unsupported(node, "dilated pooling is not in MIL")
    pad_type, pad = _spatial_pads(node, rank)
    kwargs = dict(kernel_sizes=kernel, strides=list(attr(node, "strides", [1] * rank)),
                  pad_type=pad_type, ceil_mode=bool(attr(node, "ceil_mode", 0)))
    if pad_type == "custom":
        kwargs["pad"] = pad
    return kwargs


@OPS.register("MaxPool")
def _max_pool(ctx, node) -> None:
    out = ctx.out
    if len(node.outputs) > 1 and node.outputs[1].name:
        raise unsupported(node, "the Indices output is not in MIL")
    ctx.bind(node, ctx.mb.max_pool(x=ctx.value(node.inputs[0]), name=out, **_pool_kwargs(node)))


@OPS.register("AveragePool")
def _avg_pool(ctx, node) -> None:
    out = ctx.out
    ctx.bind(node, ctx.mb.avg_pool(
        x=ctx.value(node.inputs[0]), name=out,
        exclude_padding_from_average=not bool(attr(node, "count_include_pad", 0)),
        **_pool_kwargs(node),
    ))


def _spatial_axes(node) -> list[int]:
    shape = static_shape(node.inputs[0])
    if shape is None:
        raise unsupported(node, "input rank must be known")
    return list(range(2, len(shape)))


@OPS.register("GlobalAveragePool")
def _global_avg_pool(ctx, node) -> None:
    out = ctx.out
    ctx.bind(node, ctx.mb.reduce_mean(x=ctx.value(node.inputs[0]), axes=_spatial_axes(node), keep_dims=True,
                                      name=out))


@OPS.register("GlobalMaxPool")
def _global_max_pool(ctx, node) -> None:
    out = ctx.out
    ctx.bind(node, ctx.mb.reduce_max(x=ctx.value(node.inputs[0]), axes=_spatial_axes(node), keep_dims=True,
                                     name=out))


_REDUCE = {"ReduceMean": "reduce_mean", "ReduceMax": "reduce_max", "ReduceMin": "reduce_min",
           "ReduceSum": "reduce_sum", "ReduceProd": "reduce_prod"}


@OPS.register(*_REDUCE)
def _reduce(ctx, node) -> None:
    out = ctx.out
    # Opset 17: ReduceSum takes axes as input 1, the others as an attribute.
    axes = ctx.optional_const(node, 1) if node.op == "ReduceSum" else attr(node, "axes")
    kwargs = dict(x=ctx.value(node.inputs[0]), keep_dims=bool(attr(node, "keepdims", 1)), name=out)
    if axes is not None and len(axes):
        kwargs["axes"] = [int(a) for a in np.asarray(axes).reshape(-1)]
    elif attr(node, "noop_with_empty_axes", 0):
        ctx.bind(node, ctx.mb.identity(x=kwargs["x"], name=out))
        return
    ctx.bind(node, getattr(ctx.mb, _REDUCE[node.op])(**kwargs))


@OPS.register("BatchNormalization")
def _batch_norm(ctx, node) -> None:
    out = ctx.out
    c = lambda i, what: ctx.const(node, i, what).astype(np.float32)  # noqa: E731
    ctx.bind(node, ctx.mb.batch_norm(
        x=ctx.value(node.inputs[0]), gamma=c(1, "scale"), beta=c(2, "bias"), mean=c(3, "mean"),
        variance=c(4, "var"), epsilon=np.float32(attr(node, "epsilon", 1e-5)), name=out,
    ))


@OPS.register("InstanceNormalization")
def _instance_norm(ctx, node) -> None:
    out = ctx.out
    ctx.bind(node, ctx.mb.instance_norm(
        x=ctx.value(node.inputs[0]), gamma=ctx.const(node, 1, "scale").astype(np.float32),
        beta=ctx.const(node, 2, "bias").astype(np.float32),
        epsilon=np.float32(attr(node, "epsilon", 1e-5)), name=out,
    ))


@OPS.register("LayerNormalization")
def _layer_norm(ctx, node) -> None:
    out = ctx.out
    if len(node.outputs) > 1 and any(t.name for t in node.outputs[1:]):
        raise unsupported(node, "Mean/InvStdDev outputs")
    shape = static_shape(node.inputs[0])
    if shape is None:
        raise unsupported(node, "input rank must be known")
    axis = int(attr(node, "axis", -1)) % len(shape)
    kwargs = dict(x=ctx.value(node.inputs[0]), axes=list(range(axis, len(shape))),
                  gamma=ctx.const(node, 1, "scale").astype(np.float32),
                  epsilon=np.float32(attr(node, "epsilon", 1e-5)), name=out)
    bias = ctx.optional_const(node, 2)
    if bias is not None:
        kwargs["beta"] = bias.astype(np.float32)
    ctx.bind(node, ctx.mb.layer_norm(**kwargs))


@OPS.register("Gemm")
def _gemm(ctx, node) -> None:
    """``alpha*A'B' + beta*C`` -> ``linear`` when B and C are constants (the usual dense layer)."""
    out = ctx.out
    if attr(node, "transA", 0):
        raise unsupported(node, "transA=1 is not mapped")
    weight = ctx.const(node, 1, "B").astype(np.float32)
    weight = weight if attr(node, "transB", 0) else weight.T  # linear wants [out, in]
    weight = weight * np.float32(attr(node, "alpha", 1.0))
    bias = ctx.optional_const(node, 2)
    kwargs = dict(x=ctx.value(node.inputs[0]), weight=np.ascontiguousarray(weight), name=out)
    if bias is not None:
        bias = np.broadcast_to(bias.astype(np.float32) * np.float32(attr(node, "beta", 1.0)),
                               (weight.shape[0],))
        kwargs["bias"] = np.ascontiguousarray(bias)
    ctx.bind(node, ctx.mb.linear(**kwargs))


@OPS.register("MatMul")
def _matmul(ctx, node) -> None:
    out = ctx.out
    ctx.bind(node, ctx.mb.matmul(x=ctx.value(node.inputs[0]), y=ctx.value(node.inputs[1]), name=out))



@OPS.register("LRN")
def _lrn(ctx, node) -> None:
    """``local_response_norm``: x / (k + alpha/size * sum of squares over ``size`` channels)^beta,
    ONNX's formula.  The MIL spec does not say where an even-sized window sits (ONNX puts the
    extra channel after the center), so only odd sizes are mapped."""
    out = ctx.out
    size = int(attr(node, "size"))
    if size % 2 == 0:
        raise unsupported(node, f"even size {size} (window placement unspecified in MIL)")
    ctx.bind(node, ctx.mb.local_response_norm(
        x=ctx.value(node.inputs[0]), size=size, alpha=np.float32(attr(node, "alpha", 1e-4)),
        beta=np.float32(attr(node, "beta", 0.75)), k=np.float32(attr(node, "bias", 1.0)), name=out))


@OPS.register("LpNormalization")
def _lp_normalization(ctx, node) -> None:
    """x / ||x||_p along one axis.  Not MIL ``l2_norm``: that one normalizes the last three axes
    together and adds epsilon under the root (iOS15/normalization.py l2_norm); ``reduce_l2_norm`` /
    ``reduce_l1_norm`` over the ONNX axis then ``real_div`` is ONNX's formula exactly."""
    out = ctx.out
    p = int(attr(node, "p", 2))
    if p not in (1, 2):
        raise unsupported(node, f"p={p} (ONNX allows 1 or 2)")
    x = ctx.value(node.inputs[0])
    reduce = ctx.mb.reduce_l2_norm if p == 2 else ctx.mb.reduce_l1_norm
    norm = reduce(x=x, axes=[int(attr(node, "axis", -1))], keep_dims=True, name=f"{out}_norm")
    ctx.bind(node, ctx.mb.real_div(x=x, y=norm, name=out))
