"""Operators of opsets 7-12 whose attribute became an input or whose meaning changed before
opset 13: Softmax's 2-D coercion, Clip's bounds, TopK's k, Dropout's ratio."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...ir.graph import attr, static_shape, tensor_rank
from .base import adapter, positive_axes, set_inputs


def _softmax_of_13(rw, node: gs.Node) -> None:
    """Softmax/LogSoftmax/Hardmax-1/11 → -13: the older ones flatten the input to 2-D at
    ``axis`` (default 1) and normalize over everything after it; -13 normalizes over one axis.

    before: x ─► Softmax(axis=a) ─► y                  (a the last axis)
    after:  x ─► Softmax(axis=-1) ─► y

    before: x ─► Softmax(axis=a) ─► y                  (a not the last axis, or the rank unknown)
    after:  x ─► Flatten(axis=a) ─► Softmax(axis=-1) ─► Reshape(shape of x) ─► y
    """
    x = node.inputs[0]
    axis = int(attr(node, "axis", 1))
    rank = tensor_rank(x)
    if rank is not None and positive_axes([axis], rank)[0] == rank - 1:
        node.attrs["axis"] = -1
        return
    flat = rw.emit("Flatten", [x], {"axis": axis})
    normed = rw.emit(node.op, [flat], {"axis": -1})
    shape = static_shape(x)
    target = rw.ints("shape", shape) if shape is not None else rw.emit("Shape", [x], dtype=np.int64)
    rw.out("Reshape", [normed, target])


for _op in ("Softmax", "LogSoftmax", "Hardmax"):
    adapter(_op, 1, 11, name=f"{_op.lower()}_of_13")(_softmax_of_13)


@adapter("Clip", 6)
def clip_bounds_as_inputs(rw, node: gs.Node) -> None:
    """Clip-6 (opsets 6-10) → -13: ``min`` and ``max`` become inputs.

    before: x ─► Clip(x; min, max) ─► y
    after:  x ─► Clip(x, min, max) ─► y
    """
    low, high = node.attrs.pop("min", None), node.attrs.pop("max", None)
    inputs = [node.inputs[0], None if low is None else rw.scalar(float(low)),
              None if high is None else rw.scalar(float(high))]
    set_inputs(node, inputs)


@adapter("TopK", 1)
def topk_k_as_input(rw, node: gs.Node) -> None:
    """TopK-1 (opsets 1-9) → -11: ``k`` becomes an input (largest, sorted: -1's behaviour).

    before: x ─► TopK(x; k, axis) ─► values, indices
    after:  x ─► TopK(x, k=[k]; axis) ─► values, indices
    """
    k = int(node.attrs.pop("k"))
    set_inputs(node, [node.inputs[0], rw.ints("k", [k])])


@adapter("Dropout", 7, 10)
def dropout_of_13(rw, node: gs.Node) -> None:
    """Dropout-7/10 → -13: inference mode (the default) passes data through whatever the ratio;
    the ratio attribute goes (-12 made it an input).

    before: x ─► Dropout(x; ratio) ─► y[, mask]
    after:  x ─► Dropout(x) ─► y[, mask]
    """
    node.attrs.pop("ratio", None)


@adapter("Mod", 28)
def mod_of_13(rw, node: gs.Node) -> None:
    """Mod-28 → -13: -28 defines fmod=0 for floats too (A − floor(A/B)·B), which -13 refused;
    integers and fmod=1 are -13's.

    before: Mod(a, b; fmod=0) ─► y          (floats)
    after:  Sub(a, Mul(Floor(Div(a, b)), b)) ─► y
    """
    a, b = node.inputs[:2]
    if int(attr(node, "fmod", 0)) or str(a.dtype) not in ("float32", "float16", "float64"):
        return
    rw.out("Sub", [a, rw.emit("Mul", [rw.emit("Floor", [rw.emit("Div", [a, b])]), b])])
