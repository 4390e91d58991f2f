"""Memory layouts as permutations: how NCHW graphs become NHWC TFLite graphs without Transposes.

Every ONNX tensor keeps its logical (ONNX) shape; what changes is the order in which its axes
are stored.  A layout is a permutation ``perm`` of the logical axes, listed in memory order:
``stored = logical.transpose(perm)``.  TFLite's convolutions and pools want NHWC, i.e. the
layout ``NHWC = (0, 2, 3, 1)`` of an NCHW tensor.

Layouts propagate through the graph instead of being undone after each convolution:

* element-wise ops and reductions work on any layout (axes are renumbered, constants are
  transposed at export time);
* an ONNX Transpose is free: only the labels change (:func:`relabel`);
* Reshape/Flatten/Squeeze/Unsqueeze keep a layout whenever the groups of axes they merge or
  split are contiguous in memory (:func:`reshape_layout`); e.g. NHWC ``(n, c, 1, 1)`` flattened
  to ``(n, c)``, or ``(n, a*k, h, w)`` split to ``(n, a, k, h, w)`` stored ``(n, h, w, a, k)``.

A softmax or reduction over a short axis that is innermost (5 classes after an NHWC convolution)
runs where that axis is strided instead (:func:`strided_layout`, measured there): one TRANSPOSE
that makes the reduction several times faster in LiteRT.

A real TRANSPOSE op is written only where an op needs a layout that the data is not in and no
relabelling helps (e.g. BATCH_MATMUL over heads after a head permutation): the model's own
semantics.  Moving only size-1 axes is a RESHAPE, never a TRANSPOSE (:func:`only_unit_axes_move`).
"""

from __future__ import annotations

import math

NHWC = (0, 2, 3, 1)


def identity(rank: int) -> tuple[int, ...]:
    return tuple(range(rank))


def is_identity(perm) -> bool:
    return tuple(perm) == identity(len(perm))


def stored_shape(shape, perm) -> tuple[int, ...]:
    return tuple(int(shape[a]) for a in perm)


def position(perm, axis: int) -> int:
    """Where logical ``axis`` sits in memory."""
    return tuple(perm).index(axis)


def transpose_between(src, dst) -> tuple[int, ...]:
    """The TRANSPOSE ``perm`` that turns data stored in ``src`` order into ``dst`` order."""
    return tuple(tuple(src).index(a) for a in dst)


def only_unit_axes_move(shape, src, dst) -> bool:
    """True when going from ``src`` to ``dst`` moves only size-1 axes: a RESHAPE suffices."""
    keep = [a for a in src if shape[a] != 1]
    return keep == [a for a in dst if shape[a] != 1]


def relabel(perm_in, onnx_perm) -> tuple[int, ...]:
    """Layout of ``Transpose(x, onnx_perm)`` when ``x`` is stored as ``perm_in``: no data moves.

    Output axis ``j`` is input axis ``onnx_perm[j]``, so memory order in output labels is
    ``onnx_perm.index(a)`` for each input axis ``a`` in memory order.
    """
    return tuple(tuple(onnx_perm).index(a) for a in perm_in)


def drop_axes(perm, axes) -> tuple[int, ...]:
    """Layout after removing logical ``axes`` (keepdims=0 reductions, Squeeze, scalar Gather)."""
    axes = set(axes)
    return tuple(a - sum(1 for d in axes if d < a) for a in perm if a not in axes)


def expand_rank(perm, rank: int) -> tuple[int, ...]:
    """Layout of the tensor numpy-broadcast to ``rank`` (new leading size-1 axes stored first)."""
    extra = rank - len(perm)
    return identity(extra) + tuple(a + extra for a in perm)


def axis_last(perm, axis: int) -> tuple[int, ...]:
    """``perm`` with logical ``axis`` moved to the innermost position."""
    return tuple(a for a in perm if a != axis) + (axis,)


def gather_layout(perm, axis: int, index_rank: int) -> tuple[int, ...]:
    """Layout of ``Gather(x, indices, axis)``: the index axes replace ``axis`` in place."""
    out = []
    for a in perm:
        if a < axis:
            out.append(a)
        elif a == axis:
            out.extend(axis + j for j in range(index_rank))
        else:
            out.append(a + index_rank - 1)
    return tuple(out)


def reshape_layout(in_shape, in_perm, out_shape) -> tuple[int, ...] | None:
    """A layout for ``Reshape(x, out_shape)`` that reuses ``x``'s memory as it is, or None.

    The non-unit axes of input and output are grouped into blocks of equal element count (the
    usual reshape factorization).  If every input block is contiguous and in order in memory,
    the output is the same bytes with each input block replaced by its output block; size-1
    output axes can go anywhere and are placed after their logical predecessor.
    """
    in_axes = [a for a, d in enumerate(in_shape) if d != 1]
    out_axes = [b for b, d in enumerate(out_shape) if d != 1]
    if math.prod(in_shape) != math.prod(out_shape):
        return None
    blocks: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(in_axes) and j < len(out_axes):
        bi, bo = [in_axes[i]], [out_axes[j]]
        pi, po = in_shape[in_axes[i]], out_shape[out_axes[j]]
        i, j = i + 1, j + 1
        while pi != po:
            if pi < po:
                if i >= len(in_axes):
                    return None
                bi.append(in_axes[i])
                pi *= in_shape[in_axes[i]]
                i += 1
            else:
                if j >= len(out_axes):
                    return None
                bo.append(out_axes[j])
                po *= out_shape[out_axes[j]]
                j += 1
        blocks.append((bi, bo))
    if i != len(in_axes) or j != len(out_axes):
        return None
    block_of = {a: k for k, (bi, _) in enumerate(blocks) for a in bi}
    stored = [a for a in in_perm if in_shape[a] != 1]
    order: list[int] = []
    pos = 0
    while pos < len(stored):
        bi, bo = blocks[block_of[stored[pos]]]
        if stored[pos : pos + len(bi)] != bi:
            return None
        order.extend(bo)
        pos += len(bi)
    for b, d in enumerate(out_shape):
        if d == 1:
            order.insert(0 if b == 0 else order.index(b - 1) + 1, b)
    return tuple(order)


# -- short reduced axes -------------------------------------------------------------------------
#: A softmax or reduction over a short axis that is innermost in memory runs slowly in LiteRT
#: (XNNPACK works row by row: one short row per outer position, a few elements per kernel call);
#: the same reduction over a strided axis, whose inner rows are long, is vectorized across them.
#: ``benchmarks/bench_short_axis.py`` (LiteRT 2.3, 1 thread) on ``[R, K]`` tensors, R * K = 20480,
#: the strided form paying a TRANSPOSE in (and out, for the softmax):
#:
#: * softmax, SOFTMAX over the innermost K vs TRANSPOSE, REDUCE_MAX, SUB, EXP, SUM, DIV,
#:   TRANSPOSE: 0.10x (K=2), 0.16x (K=5), 0.20x (K=8), 0.44x (K=16), 0.64x (K=20), 0.78x (K=32),
#:   1.31x (K=64); at K=5 it still wins with 64 rows (0.49x), not with 16 (0.94x); K=16 with
#:   64 rows 0.71x, K=32 with 64 rows 0.94x;
#: * REDUCE_MAX / SUM over the innermost K vs TRANSPOSE + the same op over the outer axis:
#:   0.18-0.38x for K <= 8, 0.69x / 1.04x at K=16, 1.5x / 1.7x at K=20.
#:
#: A detection head's class softmax (5 classes per anchor and pixel, ``zoo`` detector): 0.26 ms as
#: REDUCE_MAX, SUB, SOFTMAX over the innermost 5 of ``[1, 32, 32, 4, 5]``, 0.02 ms strided.
SHORT_SOFTMAX_AXIS = 32
SHORT_REDUCED_AXIS = 8
SHORT_AXIS_MIN_ROWS = 64


def innermost(shape, perm, axis: int) -> bool:
    """Is ``axis`` the innermost non-unit axis of ``perm`` (contiguous, stride 1)?"""
    stored = [a for a in perm if shape[a] != 1]
    return bool(stored) and stored[-1] == axis


def short_axis(shape, axis: int, longest: int) -> bool:
    """A reduced ``axis`` short enough (2..``longest``) with enough rows for :func:`strided_layout`."""
    extent = int(shape[axis])
    return 2 <= extent <= longest and math.prod(shape) // extent >= SHORT_AXIS_MIN_ROWS


def strided_layout(shape, perm, axis: int) -> tuple[int, ...]:
    """A layout in which a reduction over ``axis`` (innermost in ``perm``) reads it strided.

    The ONNX layout when ``axis`` is not innermost there (what the model's author wrote, and
    what a non-image graph output is stored in: a detection head's ``[n, anchors, classes, h, w]``
    reduced over classes, 1024-wide rows), else ``perm`` with ``axis`` moved outermost, the other
    axes in their order, so that a kept-dims result comes back to ``perm`` by a RESHAPE.
    """
    ident = identity(len(perm))
    if not innermost(shape, ident, axis):
        return ident
    return (axis,) + tuple(a for a in perm if a != axis)
