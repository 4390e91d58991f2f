"""Scatters: the deprecated Scatter as ScatterElements, and the 'max'/'min' reductions of
ScatterND/ScatterElements-18 (refused: opset 17 has none)."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from .base import Unadaptable, adapter, text


def _reduction_of_16(rw, node: gs.Node) -> None:
    """ScatterND/ScatterElements-18 → -16: reductions none, add and mul are -16's.

    before: ScatterND(data, indices, updates; reduction=add) ─► y
    after:  the same node
    """
    reduction = text(node, "reduction", "none")
    if reduction not in ("none", "add", "mul"):
        raise Unadaptable(f"reduction={reduction!r} has no opset-17 form (opset 16 adds 'none', 'add', 'mul' only)")


adapter("ScatterND", 18, name="scatternd_reduction_of_16")(_reduction_of_16)
adapter("ScatterElements", 18, name="scatterelements_reduction_of_16")(_reduction_of_16)


@adapter("Scatter", 9, 11)
def scatter_as_scatterelements(rw, node: gs.Node) -> None:
    """Scatter-9/11 (deprecated at 11) is ScatterElements under its old name.

    before: Scatter(data, indices, updates; axis) ─► y
    after:  ScatterElements(data, indices, updates; axis) ─► y
    """
    node.op = "ScatterElements"
