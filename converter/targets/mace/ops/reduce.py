"""Reductions -> Reduce."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ....graph import attr, constant_value
from .common import *  # noqa: F401,F403
from .common import _const, _fail, _rank


def _reduce(em, node: gs.Node, kind: int, axes: list[int], keepdims: bool) -> None:
    """Reduce (``mace/ops/reduce.cc:39-110``): ``axis`` ints, ``keepdims`` default false; with
    has_data_format on 4-D input the axes are read in NHWC order and remapped."""
    rank = _rank(em, node.inputs[0])
    axes = sorted(a % rank for a in axes) if axes else list(range(rank))
    if rank == 4:
        axes = sorted(NCHW_TO_NHWC_AXIS[a] for a in axes)
    em.op("Reduce", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          transposable=rank == 4, args=[("reduce_type", "i", kind), ("axis", "ints", axes),
                                        ("keepdims", "i", int(keepdims))])


_REDUCE = {"ReduceMean": REDUCE_MEAN, "ReduceMin": REDUCE_MIN, "ReduceMax": REDUCE_MAX,
           "ReduceProd": REDUCE_PROD, "ReduceSum": REDUCE_SUM}


def reduce(em, node: gs.Node) -> None:
    """ReduceX; opset-13 ReduceSum takes axes as an input (MACE's converter ignores it)."""
    if node.op == "ReduceSum" and len(node.inputs) > 1 and node.inputs[1].name:
        axes = [int(a) for a in _const(node, 1, "axes").reshape(-1)]
    else:
        axes = [int(a) for a in attr(node, "axes", [])]
    if not axes and int(attr(node, "noop_with_empty_axes", 0)):
        raise _fail(node, "noop_with_empty_axes")
    _reduce(em, node, _REDUCE[node.op], axes, bool(attr(node, "keepdims", 1)))


def global_pool(em, node: gs.Node) -> None:
    """GlobalAveragePool/GlobalMaxPool -> Reduce MEAN/MAX over H,W keepdims (as MACE's converter)."""
    _reduce(em, node, REDUCE_MEAN if node.op == "GlobalAveragePool" else REDUCE_MAX, [2, 3], True)

