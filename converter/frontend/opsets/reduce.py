"""Reductions: ``axes`` from attribute to input and back (ReduceSum-13, the rest at 18)."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from ...ir.graph import attr
from .base import adapter, constant_ints, set_inputs

#: Reductions whose ``axes`` became an input at opset 18 (ReduceSum's did at 13).
AXES_INPUT_AT_18 = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                    "ReduceMin", "ReduceProd", "ReduceSumSquare")


def reduce_axes_to_attribute(rw, node: gs.Node) -> None:
    """ReduceX-18+ → ReduceX-13: constant ``axes`` input → attribute; empty or absent axes
    with ``noop_with_empty_axes=1`` → Identity, with 0 → every axis (no attribute).

    before: x ─► ReduceMean(x, axes=[2, 3]; keepdims) ─► y
    after:  x ─► ReduceMean(x; axes=[2, 3], keepdims) ─► y

    before: x ─► ReduceMean(x, axes=[]; noop_with_empty_axes=1) ─► y
    after:  x ─► Identity ─► y
    """
    axes = constant_ints(node, 1, "axes")
    noop = int(attr(node, "noop_with_empty_axes", 0))
    if not axes and noop:
        rw.out("Identity", [node.inputs[0]])
        return
    node.attrs.pop("noop_with_empty_axes", None)
    if axes:
        node.attrs["axes"] = axes
    set_inputs(node, [node.inputs[0]])


for _op in AXES_INPUT_AT_18:
    adapter(_op, *{"ReduceMax": (18, 20), "ReduceMin": (18, 20), "ReduceLogSum": (18, 28),
                   "ReduceLogSumExp": (18, 28)}.get(_op, (18,)), name=f"{_op.lower()}_axes_to_attribute",
            )(reduce_axes_to_attribute)


@adapter("ReduceSum", 1, 11)
def reducesum_axes_as_input(rw, node: gs.Node) -> None:
    """ReduceSum-1/11 → ReduceSum-13: the ``axes`` attribute becomes an input.

    before: x ─► ReduceSum(x; axes=[1], keepdims) ─► y
    after:  x ─► ReduceSum(x, axes=[1]; keepdims) ─► y
    """
    axes = node.attrs.pop("axes", None)
    if axes:
        set_inputs(node, [node.inputs[0], rw.ints("axes", [int(a) for a in axes])])
