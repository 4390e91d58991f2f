"""Convolution arithmetic in numpy, shared by the CoreML program executor
(``targets/coreml/kernels.py``, which runs exported files op by op) and the closed-form fit of the
``retrain`` rewrite (``rewrites/retrain.py``, which needs a convolution's input columns and a
transposed convolution's outputs): one window view, one im2col, one scatter-form transposed
convolution.  Layouts are ONNX's: ``x`` is ``[N, C, *spatial]``, a convolution weight
``[O, C/groups, *kernel]``, a transposed one ``[C, O/groups, *kernel]``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np


def windows(x: np.ndarray, kernel, strides, dilations) -> np.ndarray:
    """View ``[N, C, *out, *kernel]`` of an already padded ``x``: the dilated window at each
    strided position."""
    spatial = len(kernel)
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    view = np.lib.stride_tricks.sliding_window_view(x, extents, axis=tuple(range(2, 2 + spatial)))
    index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides) + tuple(
        slice(None, None, d) for d in dilations)
    return view[index]


def conv_columns(x: np.ndarray, kernel, strides, dilations, groups: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """im2col with channels first: ``([N, groups, C/groups * prod(kernel), prod(out)], out)`` of
    an already padded ``x``.  Row order is that of a weight reshaped to
    ``[groups, O/groups, C/groups * prod(kernel)]``, so a convolution is one matrix product per
    group (BLAS: 2-4x faster than einsum over the window view for ResNet/MobileNet layers)."""
    spatial = len(kernel)
    view = windows(x, kernel, strides, dilations)  # [N, C, *out, *K]
    out = tuple(view.shape[2:2 + spatial])
    order = (0, 1, *range(2 + spatial, 2 + 2 * spatial), *range(2, 2 + spatial))
    cols = np.ascontiguousarray(view.transpose(order)).reshape(x.shape[0], groups, -1, math.prod(out))
    return cols, out


def conv_transpose_full(x: np.ndarray, w: np.ndarray, strides, dilations, groups: int,
                        dtype=np.float32) -> np.ndarray:
    """A transposed convolution without padding, output padding or bias, in scatter form: every
    input position ``p`` adds ``w[c, o, k] * x[n, c, p]`` to ``y[n, o, p*stride + k*dilation]``.
    ``[N, O, *full]`` with ``full = (in - 1) * stride + (kernel - 1) * dilation + 1``."""
    in_sizes, kernel = x.shape[2:], w.shape[2:]
    c_in, c_out = x.shape[1] // groups, w.shape[1]
    full = [(i - 1) * s + (k - 1) * d + 1 for i, s, k, d in zip(in_sizes, strides, kernel, dilations)]
    y = np.zeros((x.shape[0], c_out * groups, *full), dtype=dtype)
    for g in range(groups):
        xg = x[:, g * c_in:(g + 1) * c_in].astype(dtype, copy=False)
        for tap in itertools.product(*(range(k) for k in kernel)):
            wk = w[(slice(g * c_in, (g + 1) * c_in), slice(None)) + tap].astype(dtype, copy=False)
            contribution = np.moveaxis(np.tensordot(xg, wk, axes=([1], [0])), -1, 1)
            where = (slice(None), slice(g * c_out, (g + 1) * c_out)) + tuple(
                slice(t * d, t * d + (i - 1) * s + 1, s) for t, d, i, s in zip(tap, dilations, in_sizes, strides))
            y[where] += contribution
    return y
