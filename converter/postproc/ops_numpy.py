"""The numpy kernels of the generated ``postprocess.py``, one function per ONNX op.

This module is real, importable Python (the tests call it directly), and it is also the source
the code generator copies from: ``codegen_py`` emits ``inspect.getsource`` of exactly the
kernels a model uses.  So every kernel must be self-contained: it may use ``np`` and nothing
else from this module.  Semantics follow the ONNX operator spec at opset 17 (the canonical
opset); attribute-like inputs (shape, axes, starts, K, clip bounds) arrive as Python literals
resolved at generation time.
"""

from __future__ import annotations

import numpy as np


def op_add(a, b):
    return np.add(a, b)


def op_sub(a, b):
    return np.subtract(a, b)


def op_mul(a, b):
    return np.multiply(a, b)


def op_div(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if np.issubdtype(a.dtype, np.integer):
        # ONNX integer division truncates toward zero (C semantics); numpy's // floors.
        quotient = np.abs(a) // np.abs(b)
        return (quotient * np.sign(a) * np.sign(b)).astype(a.dtype)
    return np.divide(a, b)


def op_max(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = np.maximum(out, x)
    return out


def op_min(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = np.minimum(out, x)
    return out


def op_greater(a, b):
    return np.greater(a, b)


def op_less(a, b):
    return np.less(a, b)


def op_equal(a, b):
    return np.equal(a, b)


def op_exp(x):
    return np.exp(x)


def op_log(x):
    return np.log(x)


def op_sqrt(x):
    return np.sqrt(x)


def op_neg(x):
    return np.negative(x)


def op_abs(x):
    return np.abs(x)


def op_tanh(x):
    return np.tanh(x)


def op_relu(x):
    return np.maximum(x, np.zeros((), dtype=np.asarray(x).dtype))


def op_sigmoid(x):
    # exp(-|x|) never overflows, so both branches are finite.
    x = np.asarray(x)
    z = np.exp(-np.abs(x))
    one = np.ones((), dtype=x.dtype)
    return np.where(x >= 0, one / (one + z), z / (one + z)).astype(x.dtype)


def op_softmax(x, axis):
    x = np.asarray(x)
    shifted = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return shifted / np.sum(shifted, axis=axis, keepdims=True)


def op_clip(x, min=None, max=None):  # noqa: A002 - ONNX input names
    x = np.asarray(x)
    if min is not None:
        x = np.maximum(x, np.asarray(min, dtype=x.dtype))
    if max is not None:
        x = np.minimum(x, np.asarray(max, dtype=x.dtype))
    return x


def op_cast(x, to):
    return np.asarray(x).astype(np.dtype(to))


def op_identity(x):
    return x


def op_reshape(x, shape, allowzero=0):
    x = np.asarray(x)
    # A 0 copies the input's dimension unless allowzero=1; -1 is inferred by numpy.
    target = [x.shape[i] if (d == 0 and not allowzero) else d for i, d in enumerate(shape)]
    return np.reshape(x, target)


def op_flatten(x, axis=1):
    x = np.asarray(x)
    axis = axis + x.ndim if axis < 0 else axis
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis:], dtype=np.int64))
    return np.reshape(x, (outer, inner))


def op_transpose(x, perm=None):
    return np.transpose(x, perm)


def op_squeeze(x, axes=None):
    x = np.asarray(x)
    if axes is None:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(a + x.ndim if a < 0 else a for a in axes))


def op_unsqueeze(x, axes):
    x = np.asarray(x)
    rank = x.ndim + len(axes)
    for a in sorted(a + rank if a < 0 else a for a in axes):
        x = np.expand_dims(x, a)
    return x


def op_concat(*xs, axis):
    return np.concatenate([np.asarray(x) for x in xs], axis=axis)


def op_split(x, axis, split=None, num_outputs=None):
    x = np.asarray(x)
    axis = axis + x.ndim if axis < 0 else axis
    if split is None:
        size = x.shape[axis] // num_outputs
        split = [size] * num_outputs
    bounds = np.cumsum(split)[:-1]
    return np.split(x, bounds, axis=axis)


def op_slice(x, starts, ends, axes=None, steps=None):
    x = np.asarray(x)
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = axis + x.ndim if axis < 0 else axis
        dim = x.shape[axis]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        # Clamping rules of the ONNX spec: differ for positive and negative steps.
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        x = np.take(x, np.arange(start, end, step, dtype=np.int64), axis=axis)
    return x


def op_gather(x, indices, axis=0):
    x, indices = np.asarray(x), np.asarray(indices)
    axis = axis + x.ndim if axis < 0 else axis
    indices = np.where(indices < 0, indices + x.shape[axis], indices)
    return np.take(x, indices, axis=axis)


def op_reducemax(x, axes=None, keepdims=1):
    return np.max(x, axis=None if axes is None else tuple(axes), keepdims=bool(keepdims))


def op_reducemin(x, axes=None, keepdims=1):
    return np.min(x, axis=None if axes is None else tuple(axes), keepdims=bool(keepdims))


def op_reducesum(x, axes=None, keepdims=1):
    x = np.asarray(x)
    return np.sum(x, axis=None if axes is None else tuple(axes), keepdims=bool(keepdims), dtype=x.dtype)


def op_reducemean(x, axes=None, keepdims=1):
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.integer):
        total = np.sum(x, axis=None if axes is None else tuple(axes), keepdims=bool(keepdims))
        return (total // max(1, x.size // max(1, total.size))).astype(x.dtype)
    return np.mean(x, axis=None if axes is None else tuple(axes), keepdims=bool(keepdims), dtype=x.dtype)


def op_argmax(x, axis=0, keepdims=1, select_last_index=0):
    x = np.asarray(x)
    axis = axis + x.ndim if axis < 0 else axis
    if select_last_index:
        idx = x.shape[axis] - 1 - np.argmax(np.flip(x, axis=axis), axis=axis)
    else:
        idx = np.argmax(x, axis=axis)
    idx = idx.astype(np.int64)
    return np.expand_dims(idx, axis) if keepdims else idx


def op_argmin(x, axis=0, keepdims=1, select_last_index=0):
    x = np.asarray(x)
    axis = axis + x.ndim if axis < 0 else axis
    if select_last_index:
        idx = x.shape[axis] - 1 - np.argmin(np.flip(x, axis=axis), axis=axis)
    else:
        idx = np.argmin(x, axis=axis)
    idx = idx.astype(np.int64)
    return np.expand_dims(idx, axis) if keepdims else idx


def op_topk(x, k, axis=-1, largest=1):
    x = np.asarray(x)
    axis = axis + x.ndim if axis < 0 else axis
    # A stable sort keeps the lower index first among equal values, as the ONNX spec asks.
    keys = -x if largest else x
    order = np.argsort(keys, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, indices, axis=axis), indices


def op_where(condition, a, b):
    return np.where(condition, a, b)


#: ONNX op type -> kernel.  Multi-output kernels return a tuple/list.
KERNELS = {
    "Add": op_add, "Sub": op_sub, "Mul": op_mul, "Div": op_div, "Max": op_max, "Min": op_min,
    "Greater": op_greater, "Less": op_less, "Equal": op_equal,
    "Exp": op_exp, "Log": op_log, "Sqrt": op_sqrt, "Neg": op_neg, "Abs": op_abs, "Tanh": op_tanh,
    "Relu": op_relu, "Sigmoid": op_sigmoid, "Softmax": op_softmax, "Clip": op_clip,
    "Cast": op_cast, "Identity": op_identity,
    "Reshape": op_reshape, "Flatten": op_flatten, "Transpose": op_transpose,
    "Squeeze": op_squeeze, "Unsqueeze": op_unsqueeze, "Concat": op_concat, "Split": op_split,
    "Slice": op_slice, "Gather": op_gather,
    "ReduceMax": op_reducemax, "ReduceMin": op_reducemin, "ReduceSum": op_reducesum,
    "ReduceMean": op_reducemean, "ArgMax": op_argmax, "ArgMin": op_argmin, "TopK": op_topk,
    "Where": op_where,
}
