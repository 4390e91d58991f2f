"""Pad: attributes to inputs (Pad-2), the ``axes`` input (Pad-18+) and ``wrap`` mode (Pad-19+)."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...ir.graph import attr
from .base import Unadaptable, adapter, constant_ints, positive_axes, rank_of, set_inputs, shape_of, text


@adapter("Pad", 2)
def pad_attributes_as_inputs(rw, node: gs.Node) -> None:
    """Pad-2 (opsets 2-10) → Pad-13: ``pads`` and ``value`` become inputs.

    before: x ─► Pad(pads, value, mode) ─► y
    after:  x ─► Pad(x, pads, value; mode) ─► y
    """
    pads = [int(p) for p in attr(node, "pads", [])]
    value = float(attr(node, "value", 0.0))
    mode = text(node, "mode", "constant")
    node.attrs.clear()
    node.attrs["mode"] = mode
    inputs = [node.inputs[0], rw.ints("pads", pads)]
    if mode == "constant" and value != 0.0:
        inputs.append(rw.const("value", np.asarray(value, dtype=rw.dtype)))
    set_inputs(node, inputs)


@adapter("Pad", 18, 19, 21, 23, 24, 25)
def pad_axes_and_wrap(rw, node: gs.Node) -> None:
    """Pad-18+ → Pad-13: the ``axes`` input folded into full-rank ``pads``; ``wrap`` (torus
    padding, Pad-19) spelled as slices of the far side concatenated on each padded axis.

    before: x ─► Pad(x, pads, value, axes; mode=constant|reflect|edge) ─► y
    after:  x ─► Pad(x, pads over every axis, value; mode) ─► y

    before: x ─► Pad(x, pads; mode=wrap) ─► y
    after:  per padded axis a:  x ─► Concat(Slice(x, [d-before, d)), x, Slice(x, [0, after)); a) ─► … ─► y
    """
    x = node.inputs[0]
    axes = constant_ints(node, 3, "axes")
    mode = text(node, "mode", "constant")
    if axes is None and mode != "wrap":
        set_inputs(node, list(node.inputs[:3]))  # Pad-13 takes the rest as it is
        return
    rank = rank_of(x)
    pads = _full_pads(constant_ints(node, 1, "pads"), axes, rank)
    if mode != "wrap":
        set_inputs(node, [x, rw.ints("pads", pads), node.inputs[2] if len(node.inputs) > 2 else None])
        return
    _wrap(rw, x, pads, shape_of(x))


def _full_pads(pads: list[int], axes: list[int] | None, rank: int) -> list[int]:
    if axes is None:
        return pads
    axes = positive_axes(axes, rank)
    full = [0] * (2 * rank)
    for i, axis in enumerate(axes):
        full[axis], full[axis + rank] = pads[i], pads[i + len(axes)]
    return full


def _wrap(rw, x: gs.Tensor, pads: list[int], shape: tuple[int, ...]) -> None:
    rank = len(shape)
    padded = [a for a in range(rank) if pads[a] or pads[a + rank]]
    if any(p < 0 for p in pads):
        raise Unadaptable("wrap padding with negative pads (a crop) is not supported")
    for a in padded:
        if max(pads[a], pads[a + rank]) > shape[a]:
            raise Unadaptable(f"wrap padding of {max(pads[a], pads[a + rank])} on axis {a} exceeds its size {shape[a]}")
    if not padded:
        rw.out("Identity", [x])
        return
    for i, a in enumerate(padded):
        before, after, size = pads[a], pads[a + rank], shape[a]
        parts = ([rw.slice(x, [size - before], [size], [a])] if before else []) + [x] + \
            ([rw.slice(x, [0], [after], [a])] if after else [])
        last = i == len(padded) - 1
        x = rw.out("Concat", parts, {"axis": a}) if last else rw.emit("Concat", parts, {"axis": a})

