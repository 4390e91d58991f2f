"""Indexing, selection and contraction ONNX ops -> MIL: GatherND, ScatterND, OneHot, TopK, NonZero,
Einsum (op specs: coremltools ``converters/mil/mil/ops/defs/iOS16/scatter_gather.py`` gather_nd,
``iOS15/scatter_gather.py`` scatter_nd, ``iOS15/tensor_operation.py`` one_hot / non_zero,
``iOS16/tensor_operation.py`` topk, ``iOS15/linear.py`` einsum)."""

from __future__ import annotations

import numpy as np

from ...ir.graph import attr, constant_value
from ..onnx_attrs import str_attr
from .mil_registry import OPS, gather_any, input_shape, unsupported


def _as_var(ctx, tensor, name: str):
    """A MIL Var for an ONNX tensor (constants become ``const`` ops)."""
    value = ctx.value(tensor)
    return ctx.mb.const(val=value, name=name) if isinstance(value, np.ndarray) else value


def _int32_indices(ctx, node, index: int, dims: list[int], name: str):
    """ONNX index tensors may be negative (counted from the end of ``dims``, along their last
    axis); MIL's gather_nd / scatter_nd document non-negative indices only, so wrap them: a
    constant at build time, a computed tensor with ``select(idx < 0, idx + dim, idx)``."""
    const = constant_value(node.inputs[index])
    dims = np.asarray(dims, dtype=np.int32)
    if const is not None:
        idx = np.asarray(const).astype(np.int32)
        return np.where(idx < 0, idx + dims, idx).astype(np.int32)
    idx = ctx.value(node.inputs[index])
    if str(idx.dtype.__name__) != "int32":
        idx = ctx.mb.cast(x=idx, dtype="int32", name=f"{name}_i32")
    wrapped = ctx.mb.add(x=idx, y=dims, name=f"{name}_wrapped")
    negative = ctx.mb.less(x=idx, y=np.int32(0), name=f"{name}_negative")
    return ctx.mb.select(cond=negative, a=wrapped, b=idx, name=f"{name}_nonneg")


@OPS.register("GatherND")
def _gather_nd(ctx, node) -> None:
    """``gather_nd`` (iOS16) has ONNX's ``batch_dims``; V = K[:-1] + D[batch_dims + K[-1]:]."""
    out = ctx.out
    batch_dims = int(attr(node, "batch_dims", 0))
    depth = input_shape(node, 1)[-1]
    dims = input_shape(node, 0)[batch_dims:batch_dims + depth]
    indices = _int32_indices(ctx, node, 1, dims, out)
    ctx.bind(node, gather_any(ctx, ctx.mb.gather_nd, ctx.value(node.inputs[0]), out, indices=indices,
                              batch_dims=batch_dims))


_SCATTER_MODES = {"none": "update", "add": "add", "mul": "mul", "max": "max", "min": "min"}


@OPS.register("ScatterND")
def _scatter_nd(ctx, node) -> None:
    """ONNX ``reduction`` -> scatter_nd ``mode`` (update/add/mul/max/min are all MIL modes)."""
    out = ctx.out
    reduction = str_attr(node, "reduction", "none")
    if reduction not in _SCATTER_MODES:
        raise unsupported(node, f"reduction '{reduction}' has no scatter_nd mode")
    depth = input_shape(node, 1)[-1]
    indices = _int32_indices(ctx, node, 1, input_shape(node, 0)[:depth], out)
    ctx.bind(node, ctx.mb.scatter_nd(data=ctx.value(node.inputs[0]), indices=indices,
                                     updates=ctx.value(node.inputs[2]), mode=_SCATTER_MODES[reduction], name=out))


@OPS.register("OneHot")
def _one_hot(ctx, node) -> None:
    """ONNX indices may be negative ([-depth, depth)) and non-integer (cast to int); one_hot wants
    int32 in [0, depth), so ``mod(cast(indices), depth)`` (mod is Python's, ``operator.mod`` in
    coremltools' elementwise_binary.py mod)."""
    out = ctx.out
    depth = int(np.asarray(ctx.const(node, 1, "depth")).reshape(-1)[0])
    off, on = (np.asarray(ctx.const(node, 2, "values")).reshape(-1)[:2])
    dtype = np.float32 if off.dtype.kind == "f" else np.int32
    indices = ctx.value(node.inputs[0])
    if isinstance(indices, np.ndarray):
        indices = np.mod(indices.astype(np.int64), depth).astype(np.int32)
    else:
        if str(indices.dtype.__name__) != "int32":
            indices = ctx.mb.cast(x=indices, dtype="int32", name=f"{out}_i32")
        indices = ctx.mb.mod(x=indices, y=np.int32(depth), name=f"{out}_wrapped")
    ctx.bind(node, ctx.mb.one_hot(indices=indices, one_hot_vector_size=np.int32(depth),
                                  axis=int(attr(node, "axis", -1)), on_value=dtype(on), off_value=dtype(off),
                                  name=out))


@OPS.register("TopK")
def _topk(ctx, node) -> None:
    """Values and int32 indices; ``sorted=0`` leaves the order to the runtime in ONNX, so the
    sorted MIL result is one valid answer."""
    out = ctx.out
    k = int(np.asarray(ctx.const(node, 1, "K")).reshape(-1)[0])
    values, indices = ctx.mb.topk(x=ctx.value(node.inputs[0]), k=k, axis=int(attr(node, "axis", -1)),
                                  ascending=not bool(attr(node, "largest", 1)), sort=True,
                                  return_indices=True, name=out)
    ctx.bind(node, [values, indices])


@OPS.register("NonZero")
def _non_zero(ctx, node) -> None:
    """MIL non_zero returns [N, rank] (one row per element); ONNX wants [rank, N]."""
    out = ctx.out
    rows = ctx.mb.non_zero(x=ctx.value(node.inputs[0]), name=f"{out}_rows")
    ctx.bind(node, ctx.mb.transpose(x=rows, perm=[1, 0], name=out))


@OPS.register("Einsum")
def _einsum(ctx, node) -> None:
    """coremltools' own einsum lowering (``frontend/_utils.py`` build_einsum_mil, used by its
    torch and TensorFlow frontends): the MIL ``einsum`` op for the two equations it covers,
    transposes / matmul / reduce_sum for the rest."""
    out = ctx.out
    from coremltools.converters.mil.frontend._utils import build_einsum_mil

    equation = str_attr(node, "equation", "")
    if "..." in equation:
        raise unsupported(node, "ellipsis ('...') equations are not mapped")
    operands = [_as_var(ctx, t, f"{out}_in{i}") for i, t in enumerate(node.inputs)]
    ctx.bind(node, build_einsum_mil(operands, equation, out))
