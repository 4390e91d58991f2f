"""Indexing ops -> Split / StridedSlice / Gather / Tile / ArgMax / Cumsum."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ....ir.graph import attr, constant_value
from ..registry import OPS
from .common import DT_FLOAT, DT_INT32, NCHW_TO_NHWC_AXIS, NEG, const_input, fail, optional_const, rank_of


@OPS.register("Split")
def split(em, node: gs.Node) -> None:
    """Split (``mace/ops/split.cc:36-75``): ``axis`` (default 3; negative allowed; NHWC-ordered
    for a 4-D input with has_data_format), equal split unless input 1 gives int32 sizes
    (1-D, one per output)."""
    rank = rank_of(em, node.inputs[0])
    axis = int(attr(node, "axis", 0)) % rank
    sizes = [em.shape(t)[axis] for t in node.outputs]
    if len(node.outputs) < 2:
        raise fail(node, "MACE Split needs at least two outputs (split.cc:50)")
    inputs = [em.name_of(node.inputs[0])]
    if len(set(sizes)) > 1:
        inputs.append(em.weight(f"{node.name}_size_splits", np.array(sizes, np.int32)))
    em.op("Split", node.name, inputs, [em.name_of(t) for t in node.outputs], transposable=rank == 4,
          T=em.mace_dtype(node.inputs[0]),
          args=[("axis", "i", NCHW_TO_NHWC_AXIS[axis] if rank == 4 else axis)])


@OPS.register("Slice")
def slice_(em, node: gs.Node) -> None:
    """Slice -> StridedSlice (``mace/ops/strided_slice.cc:165-231``): begin/end/strides are int32
    tensors (inputs 1-3) over every dim; MACE clamps begin/end after adding the dim to negative
    values (``format_indices``), so ONNX's clamping is resolved here from the static shape and a
    negative-step slice that runs to the front sets the dim's ``end_mask`` bit (an end of -1
    would mean dim-1).  One op covers multi-axis and negative-step slices (MACE's ``Slice`` is
    one axis, positive steps).  Rank 1..4 (the kernel's loops)."""
    shape = em.shape(node.inputs[0])
    rank = len(shape)
    if not 1 <= rank <= 4:
        raise fail(node, f"StridedSlice of rank {rank} (MACE's kernel loops cover 1..4)")
    starts = [int(v) for v in const_input(node, 1, "starts").reshape(-1)]
    ends = [int(v) for v in const_input(node, 2, "ends").reshape(-1)]
    axes = optional_const(node, 3)
    axes = [int(a) % rank for a in axes.reshape(-1)] if axes is not None else list(range(len(starts)))
    steps = optional_const(node, 4)
    steps = [int(s) for s in steps.reshape(-1)] if steps is not None else [1] * len(starts)
    begin, end, stride, end_mask = [0] * rank, list(shape), [1] * rank, 0
    for axis, start, stop, step in zip(axes, starts, ends, steps):
        dim = shape[axis]
        start, stop = (start + dim if start < 0 else start), (stop + dim if stop < 0 else stop)
        if step > 0:
            begin[axis], end[axis] = min(max(start, 0), dim), min(max(stop, 0), dim)
        else:
            begin[axis], end[axis] = min(max(start, 0), dim - 1), min(max(stop, -1), dim - 1)
            if end[axis] == -1:
                end[axis], end_mask = 0, end_mask | (1 << axis)
        stride[axis] = step
    if any(d == 0 for d in em.shape(node.outputs[0])):
        raise fail(node, "empty slice (strided_slice.cc:233-236 requires every output dim > 0)")
    inputs = [em.name_of(node.inputs[0])] + [em.weight(f"{node.name}_{what}", np.array(v, np.int32))
                                             for what, v in (("begin", begin), ("end", end), ("strides", stride))]
    em.op("StridedSlice", node.name, inputs, [em.name_of(node.outputs[0])], T=em.mace_dtype(node.inputs[0]),
          args=[("begin_mask", "i", 0), ("end_mask", "i", end_mask), ("ellipsis_mask", "i", 0),
                ("new_axis_mask", "i", 0), ("shrink_axis_mask", "i", 0)])


@OPS.register("Gather")
def gather(em, node: gs.Node) -> None:
    """Gather (``mace/ops/gather.cc:23-84``): params, int32 indices, ``axis`` (default 0,
    negative allowed); output = params[:axis] + indices.shape + params[axis+1:].  MACE does not
    wrap negative indices (gather.cc:65 only asserts idx < dim), so constant indices are
    wrapped here; runtime indices must be non-negative.  Float params only (CPU float/bf16)."""
    rank = rank_of(em, node.inputs[0])
    axis = int(attr(node, "axis", 0)) % rank
    if em.mace_dtype(node.inputs[0]) != DT_FLOAT:
        raise fail(node, "MACE registers Gather for float params only (gather.cc:86-99)")
    indices = constant_value(node.inputs[1])
    if indices is not None:
        dim = em.shape(node.inputs[0])[axis]
        wrapped = np.where(indices < 0, indices + dim, indices).astype(np.int32)
        index_name = em.weight(f"{node.inputs[1].name}_int32", wrapped)
    else:
        index_name = em.name_of(node.inputs[1])
    em.op("Gather", node.name, [em.name_of(node.inputs[0]), index_name], [em.name_of(node.outputs[0])],
          args=[("axis", "i", axis)])


@OPS.register("Tile")
def tile(em, node: gs.Node) -> None:
    """Tile (``mace/ops/tile.cc``): input 1 is int32 ``multiples``, one per dim.  has_data_format
    is never written (tile.cc swaps multiples[1..3] for any rank when it is set).  CPU only."""
    repeats = const_input(node, 1, "repeats").reshape(-1).astype(np.int32)
    em.op("Tile", node.name, [em.name_of(node.inputs[0]), em.weight(f"{node.name}_multiples", repeats)],
          [em.name_of(node.outputs[0])])


@OPS.register("ArgMax", "ArgMin")
def arg_max(em, node: gs.Node) -> None:
    """ArgMax/ArgMin -> ArgMax (``mace/ops/argmax.cc``): ``axis``, ``keepdims`` (default true),
    ``argmin``; int32 output.  Ties: it partial-sorts (value, index) pairs with
    std::greater (argmax -> LAST index) or std::less (argmin -> FIRST index), so ONNX
    ``select_last_index`` values that disagree are expressed as ArgMax of the negated input
    (Eltwise NEG) with the other flag.  For axis 0 the kernel sets axis_dist = 1 (argmax.cc
    ``if (axis_value != 0) ... else``), which is only right for rank 1, so a leading 1 is
    reshaped in first and axis 1 reduced."""
    shape = em.shape(node.inputs[0])
    axis = int(attr(node, "axis", 0)) % len(shape)
    keepdims = int(attr(node, "keepdims", 1))
    last = int(attr(node, "select_last_index", 0))
    want_min = node.op == "ArgMin"
    x = em.name_of(node.inputs[0])
    if want_min == bool(last):  # kernel's tie rule is wrong way round: negate, flip min/max
        neg = em.tensor(f"{node.name}_neg", shape)
        em.op("Eltwise", f"{node.name}_neg", [x], [neg], args=[("type", "i", NEG)])
        x, want_min = neg, not want_min
    out = em.name_of(node.outputs[0])
    if axis == 0 and len(shape) > 1:
        lifted = em.tensor(f"{node.name}_lift", [1, *shape])
        em.op("Reshape", f"{node.name}_lift", [x], [lifted], args=[("dim", "ints", [1, *shape])])
        reduced_shape = [1] + ([1] if keepdims else []) + list(shape[1:])
        reduced = em.tensor(f"{node.name}_argmax", reduced_shape)
        em.op("ArgMax", node.name, [lifted], [reduced], output_types=[DT_INT32], args=[
            ("axis", "i", 1), ("keepdims", "i", keepdims), ("argmin", "i", int(want_min))])
        em.op("Reshape", f"{node.name}_drop", [reduced], [out], T=DT_INT32,
              args=[("dim", "ints", em.shape(node.outputs[0]))])
        return
    em.op("ArgMax", node.name, [x], [out], output_types=[DT_INT32], args=[
        ("axis", "i", axis), ("keepdims", "i", keepdims), ("argmin", "i", int(want_min))])


@OPS.register("CumSum")
def cumsum(em, node: gs.Node) -> None:
    """CumSum -> Cumsum (``mace/ops/cumsum.cc``): ``axis`` (negative allowed), ``exclusive``,
    ``reverse`` args with ONNX's meaning; float only (CPU)."""
    axis = int(const_input(node, 1, "axis").reshape(-1)[0]) % rank_of(em, node.inputs[0])
    if em.mace_dtype(node.inputs[0]) != DT_FLOAT:
        raise fail(node, "MACE registers Cumsum for float only")
    em.op("Cumsum", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])], args=[
        ("axis", "i", axis), ("exclusive", "i", int(attr(node, "exclusive", 0))),
        ("reverse", "i", int(attr(node, "reverse", 0)))])
