"""Shape operators: Split, Squeeze, Unsqueeze, Slice (attributes that became inputs), Split's
``num_outputs`` (18) and SpaceToDepth's ``mode`` (28)."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from ...ir.graph import attr
from .base import Unadaptable, adapter, positive_axes, rank_of, set_inputs, shape_of, text


@adapter("Split", 18)
def split_num_outputs_as_sizes(rw, node: gs.Node) -> None:
    """Split-18 → Split-13: ``num_outputs`` becomes the ``split`` sizes (ceil(d/n) each, the last
    one smaller when d does not divide: ONNX's rule).

    before: x ─► Split(x; axis, num_outputs=n) ─► y0 … y(n-1)
    after:  x ─► Split(x, split=[c, …, c, d-(n-1)c]; axis) ─► y0 … y(n-1)
    """
    count = node.attrs.pop("num_outputs", None)
    if count is None or (len(node.inputs) > 1 and node.inputs[1].name):
        return
    axis = positive_axes([int(attr(node, "axis", 0))], rank_of(node.inputs[0]))[0]
    size = shape_of(node.inputs[0])[axis]
    chunk = -(-size // int(count))
    sizes = [chunk] * (int(count) - 1) + [size - chunk * (int(count) - 1)]
    if sizes[-1] <= 0:
        raise Unadaptable(f"num_outputs={count} cannot split a dimension of {size}")
    set_inputs(node, [node.inputs[0], rw.ints("split", sizes)])


@adapter("Split", 2, 11)
def split_sizes_as_input(rw, node: gs.Node) -> None:
    """Split-2/11 → Split-13: the ``split`` attribute becomes an input.

    before: x ─► Split(x; axis, split=[2, 3]) ─► y0, y1
    after:  x ─► Split(x, split=[2, 3]; axis) ─► y0, y1
    """
    sizes = node.attrs.pop("split", None)
    if sizes:
        set_inputs(node, [node.inputs[0], rw.ints("split", [int(s) for s in sizes])])


def _axes_as_input(rw, node: gs.Node) -> None:
    """Squeeze/Unsqueeze-1/11 → -13: the ``axes`` attribute becomes an input.

    before: x ─► Unsqueeze(x; axes=[0]) ─► y
    after:  x ─► Unsqueeze(x, axes=[0]) ─► y
    """
    axes = node.attrs.pop("axes", None)
    if axes is not None:
        set_inputs(node, [node.inputs[0], rw.ints("axes", [int(a) for a in axes])])


adapter("Squeeze", 1, 11, name="squeeze_axes_as_input")(_axes_as_input)
adapter("Unsqueeze", 1, 11, name="unsqueeze_axes_as_input")(_axes_as_input)


@adapter("Slice", 1)
def slice_attributes_as_inputs(rw, node: gs.Node) -> None:
    """Slice-1 (opsets 1-9) → Slice-13: ``starts``, ``ends``, ``axes`` become inputs.

    before: x ─► Slice(x; starts, ends, axes) ─► y
    after:  x ─► Slice(x, starts, ends, axes) ─► y
    """
    starts, ends = [int(v) for v in node.attrs.pop("starts")], [int(v) for v in node.attrs.pop("ends")]
    axes = node.attrs.pop("axes", None)
    inputs = [node.inputs[0], rw.ints("starts", starts), rw.ints("ends", ends)]
    if axes is not None:
        inputs.append(rw.ints("axes", [int(a) for a in axes]))
    set_inputs(node, inputs)


@adapter("SpaceToDepth", 28)
def spacetodepth_mode(rw, node: gs.Node) -> None:
    """SpaceToDepth-28 → -13: ``mode=DCR`` is what -13 does; ``CRD`` (channel, then the block's
    row and column) spelled with a reshape and a transpose.

    before: x[N,C,H,W] ─► SpaceToDepth(blocksize=b; mode=CRD) ─► y
    after:  x ─► Reshape[N,C,H/b,b,W/b,b] ─► Transpose(0,1,3,5,2,4) ─► Reshape[N,C·b·b,H/b,W/b] ─► y
    """
    mode = text(node, "mode", "DCR")
    node.attrs.pop("mode", None)
    if mode == "DCR":
        return
    if mode != "CRD":
        raise Unadaptable(f"mode={mode!r} is not one ONNX defines")
    n, c, h, w = shape_of(node.inputs[0])
    b = int(attr(node, "blocksize"))
    blocks = rw.reshape(node.inputs[0], [n, c, h // b, b, w // b, b])
    moved = rw.emit("Transpose", [blocks], {"perm": [0, 1, 3, 5, 2, 4]})
    rw.out("Reshape", [moved, rw.ints("shape", [n, c * b * b, h // b, w // b])])
