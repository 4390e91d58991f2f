"""Shape, layout, slicing and casting ONNX ops -> MIL (op specs in coremltools
``converters/mil/mil/ops/defs/iOS15/{tensor_transformation,tensor_operation,scatter_gather}.py``)."""

from __future__ import annotations

import numpy as np
import onnx

from ...ir.graph import attr, constant_value, static_shape
from .mil_registry import OPS, gather_any, output_shape, unsupported

@OPS.register("Reshape", "Flatten")
def _reshape(ctx, node) -> None:
    out = ctx.out
    # The normalized graph has static shapes: use the inferred output shape, which already
    # resolves ONNX's 0 (copy) and -1 (infer) entries.
    ctx.bind(node, ctx.mb.reshape(x=ctx.value(node.inputs[0]), shape=output_shape(node), name=out))


@OPS.register("Squeeze")
def _squeeze(ctx, node) -> None:
    out = ctx.out
    axes = ctx.optional_const(node, 1)
    kwargs = dict(x=ctx.value(node.inputs[0]), name=out)
    if axes is not None:
        kwargs["axes"] = [int(a) for a in axes.reshape(-1)]
    ctx.bind(node, ctx.mb.squeeze(**kwargs))


@OPS.register("Unsqueeze")
def _unsqueeze(ctx, node) -> None:
    out = ctx.out
    axes = ctx.const(node, 1, "axes")
    ctx.bind(node, ctx.mb.expand_dims(x=ctx.value(node.inputs[0]), axes=[int(a) for a in axes.reshape(-1)],
                                      name=out))


@OPS.register("Transpose")
def _transpose(ctx, node) -> None:
    out = ctx.out
    perm = attr(node, "perm")
    if perm is None:
        perm = list(reversed(range(len(output_shape(node)))))
    ctx.bind(node, ctx.mb.transpose(x=ctx.value(node.inputs[0]), perm=[int(p) for p in perm], name=out))


@OPS.register("Concat")
def _concat(ctx, node) -> None:
    out = ctx.out
    ctx.bind(node, ctx.mb.concat(values=[ctx.value(t) for t in node.inputs], axis=int(attr(node, "axis")),
                                 name=out))


@OPS.register("Split")
def _split(ctx, node) -> None:
    out = ctx.out
    axis = int(attr(node, "axis", 0))
    sizes = ctx.optional_const(node, 1)
    kwargs = dict(x=ctx.value(node.inputs[0]), axis=axis, name=out)
    if sizes is not None:
        kwargs["split_sizes"] = [int(s) for s in sizes]
    else:
        kwargs["num_splits"] = len(node.outputs)
    ctx.bind(node, list(ctx.mb.split(**kwargs)))


@OPS.register("Slice")
def _slice(ctx, node) -> None:
    out = ctx.out
    shape = static_shape(node.inputs[0])
    if shape is None:
        raise unsupported(node, "input shape must be static")
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
            raise unsupported(node, "negative steps are not mapped")
        begin[a], end[a], stride[a] = lo, max(hi, lo), step
    ctx.bind(node, ctx.mb.slice_by_index(x=ctx.value(node.inputs[0]), begin=begin, end=end, stride=stride,
                                         name=out))


@OPS.register("Gather")
def _gather(ctx, node) -> None:
    """Constant indices, or computed ones (an embedding lookup of token ids: an int64 model input
    is an int32 placeholder): MIL's gather takes int32 indices in [-D[axis], D[axis]), as ONNX's
    (apple/coremltools@e0e2f42:coremltools/converters/mil/mil/ops/defs/iOS15/scatter_gather.py)."""
    out = ctx.out
    if constant_value(node.inputs[1]) is None:
        indices = ctx.value(node.inputs[1])
        if str(indices.dtype.__name__) != "int32":
            indices = ctx.mb.cast(x=indices, dtype="int32", name=f"{out}_i32")
    else:
        indices = ctx.const(node, 1, "indices").astype(np.int32)
    ctx.bind(node, gather_any(ctx, ctx.mb.gather, ctx.value(node.inputs[0]), out, indices=indices,
                              axis=int(attr(node, "axis", 0))))


@OPS.register("Pad")
def _pad(ctx, node) -> None:
    out = ctx.out
    mode = attr(node, "mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    pads = ctx.const(node, 1, "pads").astype(np.int64)
    if len(node.inputs) > 3 and node.inputs[3].name:
        raise unsupported(node, "the axes input is not mapped")
    value = ctx.optional_const(node, 2)
    rank = len(pads) // 2
    mil_pad = [int(pads[i + j]) for i in range(rank) for j in (0, rank)]
    if mode == "edge":
        # MIL's name for ONNX edge; it repeats at most D[i] elements per side
        # (apple/coremltools@e0e2f42:coremltools/converters/mil/mil/ops/defs/iOS15/tensor_operation.py#L457).
        mode = "replicate"
        dims = list(node.inputs[0].shape or [])
        if len(dims) == rank and any(isinstance(d, int) and p > d for i, d in enumerate(dims) for p in mil_pad[2 * i:2 * i + 2]):
            raise unsupported(node, "edge padding wider than its axis (MIL replicate pads at most D[i])")
    ctx.bind(node, ctx.mb.pad(x=ctx.value(node.inputs[0]), pad=mil_pad, mode=mode,
                              constant_val=np.float32(0.0 if value is None else value.reshape(())), name=out))


@OPS.register("DepthToSpace")
def _depth_to_space(ctx, node) -> None:
    out = ctx.out
    mode = attr(node, "mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "DCR":
        ctx.bind(node, ctx.mb.depth_to_space(x=ctx.value(node.inputs[0]), block_size=int(attr(node, "blocksize")),
                                             name=out))
        return
    ctx.bind(node, ctx.mb.pixel_shuffle(x=ctx.value(node.inputs[0]), upscale_factor=int(attr(node, "blocksize")),
                                        name=out))

@OPS.register("Cast")
def _cast(ctx, node) -> None:
    out = ctx.out
    to = onnx.helper.tensor_dtype_to_np_dtype(int(attr(node, "to")))
    dtype = {np.dtype(np.float32): "fp32", np.dtype(np.float16): "fp16", np.dtype(np.int32): "int32",
             np.dtype(np.int64): "int32", np.dtype(np.bool_): "bool"}.get(np.dtype(to))
    if dtype is None:
        raise unsupported(node, f"no MIL dtype for {np.dtype(to).name}")
    ctx.bind(node, ctx.mb.cast(x=ctx.value(node.inputs[0]), dtype=dtype, name=out))
