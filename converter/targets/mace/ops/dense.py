"""Gemm / MatMul -> MatMul."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ....ir.graph import attr, constant_value
from ..registry import OPS
from .common import const_input, fail, rank_of


@OPS.register("Gemm")
def gemm(em, node: gs.Node) -> None:
    """Gemm -> MatMul (``mace/ops/matmul.cc``: transpose_a/transpose_b, bias [cols] as input 2,
    ``matmul.cc:195-207``).  alpha/beta other than 1 are folded into the constants."""
    alpha, beta = float(attr(node, "alpha", 1.0)), float(attr(node, "beta", 1.0))
    inputs = []
    for i in (0, 1):
        value = constant_value(node.inputs[i])
        if value is not None:
            value = value * alpha if (i == 1 and alpha != 1.0) else value
            inputs.append(em.weight(node.inputs[i].name, value.astype(np.float32)))
        else:
            if i == 1 and alpha != 1.0:  # alpha is folded into a constant B only
                raise fail(node, "alpha != 1 with a non-constant B")
            inputs.append(em.name_of(node.inputs[i]))
    if len(node.inputs) > 2 and node.inputs[2].name:
        bias = const_input(node, 2, "C") * beta
        cols = em.shape(node.outputs[0])[1]
        bias = np.broadcast_to(bias, (cols,)) if bias.ndim <= 1 or bias.shape[0] == 1 else None
        if bias is None:
            raise fail(node, "C must broadcast along rows")
        inputs.append(em.weight(node.inputs[2].name, np.ascontiguousarray(bias.reshape(-1), np.float32)))
    em.op("MatMul", node.name, inputs, [em.name_of(node.outputs[0])], args=[
        ("transpose_a", "i", int(attr(node, "transA", 0))), ("transpose_b", "i", int(attr(node, "transB", 0)))])


@OPS.register("MatMul")
def matmul(em, node: gs.Node) -> None:
    """MatMul -> MatMul (rank >= 2 both sides; ``matmul.cc:50-86``)."""
    if rank_of(em, node.inputs[0]) < 2 or rank_of(em, node.inputs[1]) < 2:
        raise fail(node, "MatMul operands must have rank >= 2")
    inputs = []
    for tensor in node.inputs:
        value = constant_value(tensor)
        inputs.append(em.weight(tensor.name, value) if value is not None else em.name_of(tensor))
    em.op("MatMul", node.name, inputs, [em.name_of(node.outputs[0])],
          args=[("transpose_a", "i", 0), ("transpose_b", "i", 0)])

