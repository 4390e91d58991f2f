"""Expand (a broadcast to a given shape) without Expand (exact: every element is copied or
multiplied by one).

MACE's ONNX converter comments Expand out (XiaoMi/mace@0fc55a5:tools/python/transform/
onnx_converter.py#L98) and TNN's OpenCL/Metal have no Expand layer, yet torch exports one for
every ``tensor.expand``: a class token expanded to the batch (XCiT), an attention bias or a
positional encoding expanded before an Add (EdgeNeXt, Swin-V2), YOLO's anchor grids.  In order
of preference:

* an Expand that changes nothing (its input already has the output shape) is removed;
* an Expand whose every reader is a broadcasting elementwise op, whose output keeps its shape
  when it reads the unexpanded input, is removed (the reader broadcasts anyway);
* else the broadcast is a Mul by a tensor of ones holding only the broadcast axes;
* or a Tile of the input (rank-aligned by a Reshape first).
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import static_shape
from .base import all_of, can_bypass, const_input, is_float, rule

#: Elementwise ops that broadcast their inputs the same way Expand does (numpy rules).
BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "PRelu",
                          "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Where", "And", "Or"})


def _shapes(node, out_tensor=None):
    """(input shape, output shape), both static, or a reason string (``out_tensor``: the output,
    when the rewrite has detached it from the node)."""
    x = static_shape(node.inputs[0])
    out = static_shape(node.outputs[0] if out_tensor is None else out_tensor)
    if x is None or out is None:
        return "input or output shape is not static"
    if const_input(node, 1) is None:
        return "target shape is not a constant"
    return x, out


def _aligned(x, out):
    """``x``'s shape padded on the left with ones to the rank of ``out``."""
    return (1,) * (len(out) - len(x)) + tuple(x)


def _noop(node, graph):
    shapes = _shapes(node)
    if isinstance(shapes, str):
        return shapes
    if tuple(shapes[0]) != tuple(shapes[1]):
        return "Expand changes the shape"
    return can_bypass(node, graph)


def _readers_broadcast(node, graph):
    shapes = _shapes(node)
    if isinstance(shapes, str):
        return shapes
    out = node.outputs[0]
    if any(t is out for t in graph.outputs) or not out.outputs:
        return "the expanded tensor is a graph output"
    for reader in out.outputs:
        if reader.op not in BROADCASTING:
            return f"read by {reader.op}, which does not broadcast"
        others = [static_shape(t) for t in reader.inputs if t is not out]
        result = static_shape(reader.outputs[0])
        if result is None or any(s is None for s in others):
            return f"shapes around {reader.op} are not static"
        try:
            got = np.broadcast_shapes(shapes[0], *others)
        except ValueError:
            return f"{reader.op} does not broadcast the unexpanded input"
        if tuple(got) != tuple(result):
            return f"{reader.op} would give shape {list(got)} without the Expand, not {list(result)}"
    return None


def _broadcast_ok(node, graph):
    shapes = _shapes(node)
    if isinstance(shapes, str):
        return shapes
    if len(shapes[0]) > len(shapes[1]):
        return "output rank below input rank"
    return None if is_float(node.inputs[0]) else "input is not a float tensor"


@rule("Expand", emits=[], when=_noop, cost=0)
def remove_noop_expand(rw, node):
    """before: x[S] ─► Expand(shape → S) ─► y ─► …          after: x ─► …"""
    rw.bypass(node.inputs[0])


@rule("Expand", emits=[], when=_readers_broadcast, cost=0)
def remove_broadcast_expand(rw, node):
    """The readers broadcast the unexpanded input to the same result.

    before: x[1, C, 1, 1] ─► Expand[N, C, H, W] ─► e ─► Add(e, z[N, C, H, W]) ─► y
    after:  x[1, C, 1, 1] ───────────────────────────► Add(x, z[N, C, H, W]) ─► y
    """
    out, x = rw.outputs[0], node.inputs[0]
    for reader in list(out.outputs):
        for i, t in enumerate(reader.inputs):
            if t is out:
                reader.inputs[i] = x


@rule("Expand", emits=["Mul"], when=all_of(_broadcast_ok))
def expand_to_mul_ones(rw, node):
    """A product with ones broadcasts exactly as Expand does (x·1 = x for every float, ±0, ±inf
    and NaN included); the ones hold only the axes that broadcast.

    before: x[1, C, 1, W] ─► Expand[N, C, H, W] ─► y
    after:  x ─► Mul(x, ones[N, 1, H, 1]) ─► y
    """
    x, out = _shapes(node, rw.outputs[0])
    ones_shape = [o if a == 1 else 1 for a, o in zip(_aligned(x, out), out)]
    rw.out("Mul", [node.inputs[0], rw.const("ones", np.ones(ones_shape))])


@rule("Expand", emits=["Reshape", "Tile"], when=all_of(_broadcast_ok))
def expand_to_tile(rw, node):
    """before: x[C, 1] ─► Expand[N, C, W] ─► y
    after:  x ─► Reshape[1, C, 1] ─► Tile(repeats [N, 1, W]) ─► y
    """
    x, out = _shapes(node, rw.outputs[0])
    aligned = _aligned(x, out)
    src = node.inputs[0] if len(aligned) == len(x) else rw.reshape(node.inputs[0], aligned)
    repeats = [o if a == 1 else 1 for a, o in zip(aligned, out)]
    rw.out("Tile", [src, rw.ints("repeats", repeats)])
