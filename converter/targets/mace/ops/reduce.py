"""Reductions -> Reduce."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from ....ir.graph import attr
from ..registry import OPS
from .common import (NCHW_TO_NHWC_AXIS, REDUCE_MAX, REDUCE_MEAN, REDUCE_MIN, REDUCE_PROD, REDUCE_SUM,
                     const_input, fail, rank_of)


def _reduce(em, node: gs.Node, kind: int, axes: list[int], keepdims: bool) -> None:
    """Reduce (``mace/ops/reduce.cc:39-110``): ``axis`` ints, ``keepdims`` default false; with
    has_data_format on 4-D input the axes are read in NHWC order and remapped."""
    rank = rank_of(em, node.inputs[0])
    axes = sorted(a % rank for a in axes) if axes else list(range(rank))
    if rank == 4:
        axes = sorted(NCHW_TO_NHWC_AXIS[a] for a in axes)
    em.op("Reduce", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          transposable=rank == 4, args=[("reduce_type", "i", kind), ("axis", "ints", axes),
                                        ("keepdims", "i", int(keepdims))])


_REDUCE = {"ReduceMean": REDUCE_MEAN, "ReduceMin": REDUCE_MIN, "ReduceMax": REDUCE_MAX,
           "ReduceProd": REDUCE_PROD, "ReduceSum": REDUCE_SUM}


@OPS.register(*_REDUCE)
def reduce(em, node: gs.Node) -> None:
    """ReduceX; opset-13 ReduceSum takes axes as an input (MACE's converter ignores it)."""
    if node.op == "ReduceSum" and len(node.inputs) > 1 and node.inputs[1].name:
        axes = [int(a) for a in const_input(node, 1, "axes").reshape(-1)]
    else:
        axes = [int(a) for a in attr(node, "axes", [])]
    if not axes and int(attr(node, "noop_with_empty_axes", 0)):
        raise fail(node, "noop_with_empty_axes")
    _reduce(em, node, _REDUCE[node.op], axes, bool(attr(node, "keepdims", 1)))


@OPS.register("GlobalAveragePool", "GlobalMaxPool")
def global_pool(em, node: gs.Node) -> None:
    """GlobalAveragePool/GlobalMaxPool -> Reduce MEAN/MAX over every spatial axis, keepdims (as
    MACE's converter for 4-D: H, W).  A 3-D pool (R3D's [N, C, D, H, W]) reduces D, H and W:
    ``reduce.cc`` merges adjacent reduced axes before its 1-4-D kernels."""
    rank = rank_of(em, node.inputs[0])
    _reduce(em, node, REDUCE_MEAN if node.op == "GlobalAveragePool" else REDUCE_MAX, list(range(2, rank)), True)

