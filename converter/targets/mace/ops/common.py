"""Shared constants and helpers of the ONNX -> MACE op converters (see ``__init__``)."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ....errors import Unsupported
from ....ir.graph import attr, constant_value
from ...driver import cannot_express
from ..data_file import DT_FLOAT, DT_INT32  # noqa: F401  (re-exported)
from ..registry import OPS

# include/mace/public/mace.h DataFormat
DF_NONE, DF_NHWC, DF_NCHW, DF_AUTO = 0, 1, 2, 1000
# mace/ops/common/eltwise_type.h
SUM, SUB, PROD, DIV, MIN, MAX, NEG, ABS, SQR_DIFF, POW, EQUAL, FLOOR_DIV, CLIP, SIGN = range(14)
# mace/ops/common/pooling_type.h, reduce_type.h, pad_type.h, conv_pool_2d_util.h RoundType
POOL_AVG, POOL_MAX = 1, 2
REDUCE_MEAN, REDUCE_MIN, REDUCE_MAX, REDUCE_PROD, REDUCE_SUM = range(5)
PAD_CONSTANT, PAD_REFLECT, PAD_SYMMETRIC = 0, 1, 2
ROUND_FLOOR, ROUND_CEIL = 0, 1
FRAMEWORK_ONNX = 2  # mace/core/types.h FrameworkType

#: NCHW axis -> NHWC axis (the order has_data_format kernels read).
NCHW_TO_NHWC_AXIS = {0: 0, 1: 3, 2: 1, 3: 2}


def fail(node: gs.Node, why: str) -> Unsupported:
    """``raise fail(node, "...")``: MACE cannot write this node (the one wording of all targets)."""
    return cannot_express(OPS.title, node, why)


def const_input(node: gs.Node, i: int, what: str) -> np.ndarray:
    value = constant_value(node.inputs[i]) if i < len(node.inputs) else None
    if value is None:
        raise fail(node, f"{what} must be a constant")
    return value


def optional_const(node: gs.Node, i: int) -> np.ndarray | None:
    if i >= len(node.inputs) or node.inputs[i].name == "":
        return None
    return constant_value(node.inputs[i])


def rank_of(em, tensor) -> int:
    return len(em.shape(tensor))


def split_pads(node: gs.Node, pads: list[int]) -> tuple[list[int], list[int]]:
    half = len(pads) // 2
    return pads[:half], pads[half:]


def explicit_pads(em, node: gs.Node, kernel, strides, dilations) -> list[int]:
    """ONNX pads ``[t, l, b, r]``, resolving auto_pad from static shapes."""
    auto_pad = attr(node, "auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad in ("NOTSET", "VALID"):
        return [int(p) for p in attr(node, "pads", [0, 0, 0, 0])] if auto_pad == "NOTSET" else [0] * 4
    h, w = em.shape(node.inputs[0])[2:]
    begin, end = [], []
    for size, k, s, d in zip((h, w), kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return begin + end


def mace_pad_ok(begin: list[int], end: list[int]) -> bool:
    """MACE applies a total pad as top = total >> 1 (``mace/ops/ref/conv_2d.cc:66``,
    ``mace/ops/pooling.cc`` pad_hw = paddings / 2): only begin == total // 2 is expressible."""
    return all(b == (b + e) // 2 for b, e in zip(begin, end))


def pad_nchw_to_nhwc_list(begin: list[int], end: list[int]) -> list[int]:
    """4-D Pad ``paddings`` for has_data_format=1: [before, after] per dim in NHWC order
    (``mace/ops/pad.cc:71-75`` remaps them with {0,1,6,7,2,3,4,5})."""
    per_dim = [(begin[i], end[i]) for i in range(4)]
    out = []
    for d in (0, 2, 3, 1):
        out.extend(per_dim[d])
    return out


def explicit_pad_op(em, node: gs.Node, x: str, begin_hw, end_hw, value: float) -> str:
    n, c, h, w = em.shape(node.inputs[0])
    shape = [n, c, h + begin_hw[0] + end_hw[0], w + begin_hw[1] + end_hw[1]]
    padded = em.tensor(f"{node.name}_pad", shape)
    em.op("Pad", f"{node.name}_pad", [x], [padded], transposable=True, args=[
        ("paddings", "ints", pad_nchw_to_nhwc_list([0, 0, *begin_hw], [0, 0, *end_hw])),
        ("pad_type", "i", PAD_CONSTANT), ("constant_value", "f", value)])
    return padded

