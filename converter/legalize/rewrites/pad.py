"""Edge (replicate) padding as Slice + Concat, for runtimes whose Pad has no edge mode.

TNN's arm and x86 Pad kernels run types 0 (constant) and 1 (reflect) only and fail an edge pad
at Forward ("layer param is not supported: type:2"); MACE's converter maps constant and reflect
only.  Repeating the border row/column is data movement, so the rule is exact: per padded axis,
the first (last) slice of width 1 is concatenated ``begin`` (``end``) times before (after) the
tensor.  Axes are padded one after another, so corners repeat the corner element as ONNX does.
"""

from __future__ import annotations

from ...ir.graph import static_shape
from .base import const_input, rule

#: A border repeated more often than this is left alone (Concat inputs grow with the pad width).
MAX_REPEAT = 64


def _edge_pads(node) -> list[tuple[int, int]] | None:
    """Per axis (begin, end) of an edge Pad with constant, non-negative pads, else None."""
    if node.attrs.get("mode", "constant") != "edge" or len(node.inputs) < 2:
        return None
    shape = static_shape(node.inputs[0])
    pads = const_input(node, 1)
    if shape is None or pads is None or len(pads) != 2 * len(shape):
        return None
    if len(node.inputs) > 3 and node.inputs[3].name:  # opset 18 axes
        return None
    rank = len(shape)
    pairs = [(int(pads[i]), int(pads[i + rank])) for i in range(rank)]
    if any(b < 0 or e < 0 or b > MAX_REPEAT or e > MAX_REPEAT for b, e in pairs):
        return None
    if not any(b or e for b, e in pairs) or any((b or e) and shape[i] < 1 for i, (b, e) in enumerate(pairs)):
        return None
    return pairs


def _is_edge_pad(node, graph):
    if _edge_pads(node) is None:
        return (f"not an edge Pad with constant pads in [0, {MAX_REPEAT}], some non-zero, on a static shape "
                "(negative pads crop; the axes input is not read)")
    return None


@rule("Pad", emits=["Slice", "Concat"], when=_is_edge_pad)
def edge_pad_to_slice_concat(rw, node):
    """before: x ─► Pad(pads=[.., b_i, .., e_i, ..], mode=edge) ─► y
    after:  x ─► Concat([Slice(x, 0:1 on i)] × b_i + [x] + [Slice(x, -1: on i)] × e_i, axis=i)
              ─► ... (each padded axis in turn) ─► y
    """
    pairs = _edge_pads(node)
    padded = [i for i, (b, e) in enumerate(pairs) if b or e]
    x = node.inputs[0]
    dtype = x.dtype  # data movement: any dtype (the rule's default would be float)

    def border(start, stop, axis):
        return rw.emit("Slice", [x, rw.ints("starts", [start]), rw.ints("ends", [stop]), rw.ints("axes", [axis])],
                       dtype=dtype)

    for k, axis in enumerate(padded):
        begin, end = pairs[axis]
        parts = []
        if begin:
            parts += [border(0, 1, axis)] * begin
        parts.append(x)
        if end:
            parts += [border(-1, 2**62, axis)] * end
        last = k == len(padded) - 1
        x = rw.out("Concat", parts, {"axis": axis}) if last else rw.emit("Concat", parts, {"axis": axis}, dtype=dtype)


def _low_rank_pad(node, graph):
    """A constant/reflect Pad of a static tensor of rank 1-3 with constant pads (MACE: 4-D only)."""
    shape = static_shape(node.inputs[0])
    pads = const_input(node, 1)
    if shape is None or not 1 <= len(shape) < 4:
        return "not a Pad of a static tensor of rank 1 to 3"
    if pads is None or len(pads) != 2 * len(shape):
        return "the pads are not constants for every axis"
    if len(node.inputs) > 3 and node.inputs[3].name:  # opset 18 axes
        return "the pads name axes (opset 18 axes input)"
    if node.attrs.get("mode", "constant") not in ("constant", "reflect"):
        return f"mode {node.attrs.get('mode')}"
    return None


@rule("Pad", emits=["Reshape", "Pad", "Reshape"], when=_low_rank_pad)
def pad_rank_to_4(rw, node):
    """The same Pad on the tensor viewed with leading axes of size 1 up to rank 4 (MACE's Pad
    takes exactly 8 pad values, mace/ops/pad.cc:70): exact, data movement only.  MobileBERT pads
    its [1, L, D] embeddings along the sequence.

    before: x [1, L, D] ─► Pad(pads=[0, b, 0, 0, e, 0]) ─► y
    after:  x ─► Reshape([1, 1, L, D]) ─► Pad(pads=[0, 0, b, 0, 0, 0, e, 0]) ─► Reshape([1, L+b+e, D]) ─► y
    """
    x = node.inputs[0]
    shape = list(static_shape(x))
    rank = len(shape)
    pads = [int(p) for p in const_input(node, 1)]
    extra = 4 - rank
    four = rw.reshape(x, [1] * extra + shape)
    wide = [0] * extra + pads[:rank] + [0] * extra + pads[rank:]
    inputs = [four, rw.ints("pads", wide)] + list(node.inputs[2:3])
    padded = rw.emit("Pad", inputs, {k: v for k, v in node.attrs.items()}, dtype=x.dtype)
    out = [d + pads[i] + pads[i + rank] for i, d in enumerate(shape)]
    rw.out("Reshape", [padded, rw.ints("shape", out)])
