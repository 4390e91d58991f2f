"""Element-wise ops -> Eltwise."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ....ir.graph import constant_value
from ..registry import OPS
from .common import ABS, DIV, DT_INT32, EQUAL, MAX, MIN, NEG, POW, PROD, SIGN, SUB, SUM, fail, rank_of

_ELTWISE = {"Add": SUM, "Sub": SUB, "Mul": PROD, "Div": DIV, "Min": MIN, "Max": MAX, "Pow": POW}


@OPS.register(*_ELTWISE)
def eltwise(em, node: gs.Node) -> None:
    _binary(em, node, _ELTWISE[node.op])


def _binary(em, node: gs.Node, kind: int, output_types=None) -> None:
    """Binary ONNX op -> Eltwise (``mace/ops/eltwise.cc:954-1120``).

    A scalar constant operand is dropped from the inputs and carried as ``scalar_input`` with
    ``scalar_input_index`` = its position (SUB/DIV swap on index 0).  With has_data_format a
    4-D input broadcasts a 1-D [C] operand per channel (``eltwise.cc:1064-1075``), so ONNX
    [1,C,1,1] constants are stored as [C]; other operands must have the same rank and broadcast
    only over size-1 dims (tail-aligned, numpy style, as ONNX)."""
    if len(node.inputs) != 2:
        raise fail(node, "Eltwise takes exactly two inputs")
    out_rank = len(em.shape(node.outputs[0]))
    values = [constant_value(t) for t in node.inputs]
    args = [("type", "i", kind)]
    inputs = []
    for i, (tensor, value) in enumerate(zip(node.inputs, values)):
        if value is not None and value.size == 1 and values[1 - i] is None:
            args += [("scalar_input", "f", float(value.reshape(-1)[0])), ("scalar_input_index", "i", i)]
            continue
        if value is not None:
            shape = tuple(value.shape)
            out_shape = tuple(em.shape(node.outputs[0]))
            full = (1,) * (out_rank - len(shape)) + shape
            if values[1 - i] is None and tuple(em.shape(node.inputs[1 - i])) != out_shape != full:
                # both operands broadcast, along different axes: mace_run's CPU Eltwise gets that
                # wrong ([1,1,L,1] x [1,1,1,L]: only the first row), so the constant is written
                # out at the output's shape and only the other operand broadcasts
                value, full = np.broadcast_to(value.reshape(full), out_shape), out_shape
            if out_rank == 4 and full == (1, out_shape[1], 1, 1):
                inputs.append(em.weight(tensor.name, value.reshape(-1)))
                continue
            if out_rank == 4:
                inputs.append(em.weight(tensor.name, _nhwc_operand(em, node, value.reshape(full), out_shape)))
                continue
            value = value.reshape(full)
            inputs.append(em.weight(tensor.name, value))
            continue
        if rank_of(em, tensor) != out_rank:
            raise fail(node, "operands of different rank")
        inputs.append(em.name_of(tensor))
    if len(inputs) == 0:
        raise fail(node, "both operands are constant (fold constants first)")
    em.op("Eltwise", node.name, inputs, [em.name_of(node.outputs[0])], transposable=out_rank == 4, args=args,
          T=em.mace_dtype(node.inputs[0]), output_types=output_types)


def _nhwc_operand(em, node: gs.Node, value, out_shape):
    """A 4-D constant operand that is not per-channel (LayerNorm's gamma over the last axis of a
    channels-last [N, H, W, C] tensor, a layer-scale vector), as MACE reads it: in NHWC order,
    which the CPU runtime transposes back to NCHW at load (``mace/flows/cpu/transpose_const.cc``,
    dims {0, 3, 1, 2}) and broadcasts over size-1 dims (``eltwise.cc``: "Only support broadcast
    dim 1", then ``TensorGeneralBroadcastEltwise``).  The GPU kernel broadcasts only
    [N, 1, 1, C] and [N, H, W, 1] (``opencl/image/eltwise.cc``), so for the GPU any other
    broadcast is written out to the full output shape."""
    if em.hw == "gpu":
        n, c, h, w = value.shape
        batch_vector = h == w == 1 and n == out_shape[0]
        channel_plane = c == 1 and (n, h, w) == (out_shape[0], out_shape[2], out_shape[3])
        if not (batch_vector or channel_plane):
            value = np.broadcast_to(value, out_shape)
    return np.ascontiguousarray(value.transpose(0, 2, 3, 1))


@OPS.register("Abs", "Neg", "Sqrt", "Reciprocal")
def unary_eltwise(em, node: gs.Node) -> None:
    """Abs/Neg -> Eltwise ABS/NEG; Sqrt -> POW 0.5; Reciprocal -> POW -1 (``eltwise.cc``; the
    ONNX converter maps them the same way)."""
    kind, scalar = {"Abs": (ABS, None), "Neg": (NEG, None), "Sqrt": (POW, 0.5), "Reciprocal": (POW, -1.0)}[node.op]
    args = [("type", "i", kind)]
    if scalar is not None:
        args += [("scalar_input", "f", scalar), ("scalar_input_index", "i", 1)]
    em.op("Eltwise", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          transposable=rank_of(em, node.inputs[0]) == 4, args=args)



@OPS.register("Equal")
def equal(em, node: gs.Node) -> None:
    """Equal -> Eltwise EQUAL.  Logical types write int32 0/1 (``eltwise.cc:990-992``: "as we do
    not have bool-type tensor, we use int type"), so the bool result is carried as int32."""
    _binary(em, node, EQUAL, output_types=[DT_INT32])


@OPS.register("Sign")
def sign(em, node: gs.Node) -> None:
    """Sign -> Eltwise SIGN: ``(0 < x) - (x < 0)`` (``mace/ops/eltwise.h:27-29``), sign(0) = 0
    as ONNX.  MACE's ONNX converter does not map Sign; the kernel exists for CPU and GPU."""
    em.op("Eltwise", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          transposable=rank_of(em, node.inputs[0]) == 4, args=[("type", "i", SIGN)])


@OPS.register("Sum")
def sum_n(em, node: gs.Node) -> None:
    """Sum -> Identity (1 input), Eltwise SUM (2 inputs, with broadcasting), or AddN for more
    same-shape inputs (``mace/ops/addn.cc:37-60``: plain element-wise accumulation, no
    broadcasting); otherwise a chain of Eltwise SUMs."""
    out = em.name_of(node.outputs[0])
    out_shape = em.shape(node.outputs[0])
    if len(node.inputs) == 1:
        em.op("Identity", node.name, [em.name_of(node.inputs[0])], [out], T=em.mace_dtype(node.inputs[0]))
        return
    if len(node.inputs) == 2:
        return _binary(em, node, SUM)
    if all(em.shape(t) == out_shape for t in node.inputs):
        em.op("AddN", node.name, [em.name_of(t) for t in node.inputs], [out])
        return
    raise fail(node, "Sum of more than two inputs that broadcast (AddN needs equal shapes)")
