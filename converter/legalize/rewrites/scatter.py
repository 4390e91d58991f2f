"""ScatterND with constant indices as a selection (exact: every output element is copied from the
data or from the updates, nothing is computed).

With the indices known at export time, each element of the output has a known source: an element
of ``data`` or one of ``updates``.  Concatenating the two and gathering with a constant index
list is therefore the same tensor, bit for bit.  When the scattered positions are whole slabs
along one axis (YOLOv8-pose's keypoint decoding, ``y[:, 2::3] = y[:, 2::3].sigmoid()``, traced to
ScatterND), the selection is a Concat of ``data`` and the updates along that axis and a Gather of
its slabs; otherwise the flattened form gathers element by element (bounded:
:data:`MAX_FLAT_ELEMENTS`).  TNN's ARM CPU has no ScatterND layer and MACE's ONNX converter none
at all (3 custom layers on YOLOv8n-pose).

Declined: indices that are not constants, a reduction (``add``/``mul``/...), repeated indices
(ONNX leaves their order undefined), shapes that are not static.  The rule reads the index values
to choose the slab axis (a constant of any size): the legalizer re-checks what it emits.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import attr, static_shape
from .base import const_input, rule

#: The largest output the flattened form builds an element-wise index list for.
MAX_FLAT_ELEMENTS = 1 << 20


def source_map(data_shape, indices: np.ndarray, updates_shape) -> np.ndarray | str:
    """For every output element, the flat index of its source in ``Concat(data.flat,
    updates.flat)``; a reason string when the scatter is not a pure selection."""
    k = indices.shape[-1]
    total = int(np.prod(data_shape))
    src = np.arange(total, dtype=np.int64).reshape(data_shape)
    idx = indices.reshape(-1, k).astype(np.int64)
    dims = np.asarray(data_shape[:k], dtype=np.int64)
    if np.any(idx < -dims) or np.any(idx >= dims):
        return "an index is out of range"
    idx = idx % dims
    if len(np.unique(np.ravel_multi_index(tuple(idx.T), tuple(dims)))) != len(idx):
        return "indices repeat (ONNX leaves the order of their updates undefined)"
    upd = np.arange(int(np.prod(updates_shape)), dtype=np.int64) + total
    src[tuple(idx.T)] = upd.reshape((len(idx),) + tuple(data_shape[k:]))
    return src


def slab_axis(src: np.ndarray, data_shape, n_updates: int):
    """(axis, Gather indices, slab count) when the updates replace whole slabs along one axis in
    row-major order, so that Concat(data, updates as slabs) + Gather is ``src``; else None."""
    total = int(np.prod(data_shape))
    for axis, size in enumerate(data_shape):
        lead = np.moveaxis(src, axis, 0).reshape(size, -1)[:, 0]
        from_updates = lead >= total
        slabs = int(from_updates.sum())
        per_slab = total // size
        if slabs == 0 or slabs * per_slab != n_updates:
            continue
        slab_shape = list(data_shape)
        slab_shape[axis] = slabs
        order = np.unravel_index(lead[from_updates] - total, slab_shape)[axis]
        gather = np.where(from_updates, 0, np.arange(size))
        gather[from_updates] = size + order
        cat = np.concatenate([np.arange(total).reshape(data_shape),
                              (np.arange(n_updates) + total).reshape(slab_shape)], axis=axis)
        if np.array_equal(np.take(cat, gather, axis=axis), src):
            return axis, gather.astype(np.int64), slab_shape
    return None


def _selection(node):
    """(data shape, source map) or a reason string."""
    reduction = attr(node, "reduction", "none")
    if (reduction.decode() if isinstance(reduction, bytes) else reduction) != "none":
        return "ScatterND with a reduction"
    indices = const_input(node, 1)
    data, updates = static_shape(node.inputs[0]), static_shape(node.inputs[2])
    if indices is None:
        return "indices are not a constant"
    if data is None or updates is None:
        return "data or updates shape is not static"
    src = source_map(data, indices, updates)
    return src if isinstance(src, str) else (data, src)


def _slabs_ok(node, graph):
    sel = _selection(node)
    if isinstance(sel, str):
        return sel
    if slab_axis(sel[1], sel[0], int(np.prod(static_shape(node.inputs[2])))) is None:
        return "the updates are not whole slabs along one axis"
    return None


def _flat_ok(node, graph):
    sel = _selection(node)
    if isinstance(sel, str):
        return sel
    return None if sel[1].size <= MAX_FLAT_ELEMENTS else f"more than {MAX_FLAT_ELEMENTS} elements"


@rule("ScatterND", emits=["Reshape", "Concat", "Gather"], when=_slabs_ok)
def scatternd_to_concat_gather(rw, node):
    """before: data[B, 51, A], updates[B, 17, A] ─► ScatterND(indices: channels 2, 5, …, 50) ─► y
    after:  Concat(data, Reshape(updates → [B, 17, A]); axis 1) ─► Gather(axis 1, [0, 1, 51, 3, 4, 52, …]) ─► y
    """
    data, src = _selection(node)
    axis, gather, slab_shape = slab_axis(src, data, int(np.prod(static_shape(node.inputs[2]))))
    updates = node.inputs[2]
    if list(static_shape(updates)) != slab_shape:
        updates = rw.reshape(updates, slab_shape)
    both = rw.emit("Concat", [node.inputs[0], updates], {"axis": axis})
    rw.out("Gather", [both, rw.ints("slabs", gather)], {"axis": axis})


@rule("ScatterND", emits=["Reshape", "Concat", "Gather"], when=_flat_ok, cost=5)
def scatternd_to_flat_gather(rw, node):
    """before: data[S], updates[U] ─► ScatterND(constant indices) ─► y[S]
    after:  Concat(Reshape(data → [-1]), Reshape(updates → [-1])) ─► Gather(source of each element) ─► Reshape[S] ─► y
    """
    data, src = _selection(node)
    both = rw.emit("Concat", [rw.reshape(node.inputs[0], [-1]), rw.reshape(node.inputs[2], [-1])], {"axis": 0})
    picked = rw.emit("Gather", [both, rw.ints("sources", src.reshape(-1))], {"axis": 0})
    rw.reshape(picked, data, outputs=rw.outputs[:1])
