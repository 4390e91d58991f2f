"""Fully connected layers in their three spellings (Gemm, MatMul + Add, 1×1 Conv) and
Flatten ↔ Reshape: targets accept different ones."""

from __future__ import annotations

import numpy as np

from ...ir.graph import attr, static_shape, tensor_rank
from .base import const_input, float_input, present, rule


def _gemm_plain_a(node, graph):
    if attr(node, "transA", 0):
        return "Gemm transposes A"
    if const_input(node, 1) is None:
        return "B is not a constant"
    if present(node, 2) and const_input(node, 2) is None:
        return "C is not a constant"
    return float_input(node, graph)


def _gemm_weight(node):
    """B as a (K, M) matrix with alpha folded in."""
    b = const_input(node, 1)
    if attr(node, "transB", 0):
        b = b.T
    return (b.astype(np.float64) * float(attr(node, "alpha", 1.0))).astype(b.dtype)


def _gemm_bias(node):
    if not present(node, 2):
        return None
    c = const_input(node, 2)
    return (c.astype(np.float64) * float(attr(node, "beta", 1.0))).astype(c.dtype)


@rule("Gemm", emits=["MatMul", "Add"], when=_gemm_plain_a)
def gemm_to_matmul_add(rw, node):
    """before: Gemm(A, B, C; alpha, beta, transB) ─► Y
    after:  MatMul(A, alpha·Bᵀ?) ─► Add(·, beta·C) ─► Y      (no Add when C is absent)
    """
    a = node.inputs[0]
    bias = _gemm_bias(node)
    w = rw.const("W", _gemm_weight(node), dtype=const_input(node, 1).dtype)
    if bias is None:
        rw.out("MatMul", [a, w])
    else:
        rw.out("Add", [rw.emit("MatMul", [a, w]), rw.const("C", bias, dtype=bias.dtype)])


def _gemm_channel_bias(node, graph):
    why = _gemm_plain_a(node, graph)
    if why:
        return why
    bias = _gemm_bias(node)
    m = _gemm_weight(node).shape[1]
    if bias is not None and bias.size not in (1, m):
        return "C is not a per-output-channel bias"
    return None


@rule("Gemm", emits=["Reshape", "Conv"], when=_gemm_channel_bias)
def gemm_to_conv1x1(rw, node):
    """A fully connected layer is a 1×1 convolution on a 1×1 image.

    before: A[N,K] ─► Gemm(B, C) ─► Y[N,M]
    after:  A ─► Reshape[N,K,1,1] ─► Conv(W[M,K,1,1], C) ─► Reshape[N,M] ─► Y
    """
    w = _gemm_weight(node)
    k, m = w.shape
    ins = [rw.reshape(node.inputs[0], [0, k, 1, 1]), rw.const("W", w.T.reshape(m, k, 1, 1), dtype=w.dtype)]
    bias = _gemm_bias(node)
    if bias is not None:
        ins.append(rw.const("B", np.broadcast_to(bias.reshape(-1), (m,)), dtype=bias.dtype))
    rw.reshape(rw.emit("Conv", ins, {"kernel_shape": [1, 1]}), [0, m], outputs=rw.outputs[:1])


def _matmul_2d_const(node, graph):
    if tensor_rank(node.inputs[0]) != 2:
        return "A is not a 2-D tensor"
    b = const_input(node, 1)
    if b is None or b.ndim != 2:
        return "B is not a 2-D constant"
    return float_input(node, graph)


@rule("MatMul", emits=["Gemm"], when=_matmul_2d_const)
def matmul_to_gemm(rw, node):
    """before: MatMul(A[N,K], B[K,M]) ─► Y          after: Gemm(A, B) ─► Y"""
    rw.out("Gemm", list(node.inputs[:2]))


def _bias_add(node, graph):
    """The single reader of the MatMul output: an Add of a per-channel constant."""
    why = _matmul_2d_const(node, graph)
    if why:
        return why
    y = node.outputs[0]
    if len(y.outputs) != 1 or any(t is y for t in graph.outputs):
        return "MatMul output has other readers"
    add = y.outputs[0]
    if add.op != "Add":
        return "not followed by Add"
    other = add.inputs[1] if add.inputs[0] is y else add.inputs[0]
    c = other.values if hasattr(other, "values") else None
    m = const_input(node, 1).shape[1]
    if c is None or np.asarray(c).size not in (1, m) or np.asarray(c).ndim > 2:
        return "Add is not a per-channel constant bias"
    return None


@rule("MatMul", emits=["Gemm"], when=_bias_add, cost=0)
def matmul_add_to_gemm(rw, node):
    """before: MatMul(A, B) ─► Add(·, c) ─► Y          after: Gemm(A, B, c) ─► Y"""
    add = rw.outputs[0].outputs[0]
    other = add.inputs[1] if add.inputs[0] is rw.outputs[0] else add.inputs[0]
    m = const_input(node, 1).shape[1]
    c = np.broadcast_to(np.asarray(other.values).reshape(-1), (m,))
    y = add.outputs[0]
    add.outputs.clear()
    add.inputs.clear()
    rw.emit("Gemm", list(node.inputs[:2]) + [rw.const("C", c, dtype=other.values.dtype)], outputs=[y])


def _flatten_axis(node):
    rank = tensor_rank(node.inputs[0])
    a = int(attr(node, "axis", 1))
    return a + rank if (a < 0 and rank is not None) else a


def _flatten_expressible(node, graph):
    a = _flatten_axis(node)
    if a < 0:
        return "input rank unknown"
    if a <= 1:
        return None
    shape = static_shape(node.inputs[0])
    return None if shape is not None else "leading dimensions are not static"


@rule("Flatten", emits=["Reshape"], when=_flatten_expressible)
def flatten_to_reshape(rw, node):
    """before: Flatten(x; axis) ─► y          after: Reshape(x, [∏ x.shape[:axis], −1]) ─► y"""
    a = _flatten_axis(node)
    x = node.inputs[0]
    if a == 0:
        lead = 1
    elif a == 1:
        lead = 0  # Reshape's 0 copies the batch dimension, whatever it is
    else:
        lead = int(np.prod(static_shape(x)[:a]))
    rw.reshape(x, [lead, -1], outputs=rw.outputs[:1])


def _reshape_is_flatten(node, graph):
    if _flatten_split(node) is None:
        return "not a 2-D reshape of a static shape that Flatten expresses"
    return None


def _flatten_split(node, output=None):
    src, dst = static_shape(node.inputs[0]), static_shape(output or node.outputs[0])
    if src is None or dst is None or len(dst) != 2 or const_input(node, 1) is None:
        return None
    for a in range(len(src) + 1):
        if int(np.prod(src[:a])) == dst[0] and int(np.prod(src[a:])) == dst[1]:
            return a
    return None


@rule("Reshape", emits=["Flatten"], when=_reshape_is_flatten)
def reshape_to_flatten(rw, node):
    """before: Reshape(x[N,C,H,W], [N, C·H·W]) ─► y          after: Flatten(x; axis=1) ─► y"""
    rw.out("Flatten", [node.inputs[0]], {"axis": _flatten_split(node, rw.outputs[0])})
