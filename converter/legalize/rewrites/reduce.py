"""The composite reductions spelled with ReduceSum / ReduceMax (exact: the ONNX definitions).

ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and ReduceLogSumExp are ONNX functions of
ReduceSum (onnx/onnx@v1.17.0:onnx/defs/reduction/defs.cc, their opset-18 function bodies), and
several runtimes lack them: MACE's ONNX converter comments all of them out
(XiaoMi/mace@0fc55a5:tools/python/transform/onnx_converter.py#L156-L159), so ConvNeXt-V2's
global response normalization (``x.norm(p=2, dim=(1, 2))``, a ReduceL2) was 12 custom layers.

The axes come from the attribute (opset < 18) or the constant second input (opset >= 18); no
axes reduce everything, unless ``noop_with_empty_axes`` makes the node an identity (declined).
ReduceLogSumExp subtracts the maximum first, as Softmax's rewrite does, so Exp cannot overflow
where the plain ``Log(ReduceSum(Exp(x)))`` of the ONNX function body would give inf.
"""

from __future__ import annotations

from ...ir.graph import attr, tensor_rank
from .base import all_of, const_input, float_input, present, rule


def reduce_axes(node) -> list[int] | None:
    """The reduced axes, non-negative and sorted; None when they are not known constants."""
    rank = tensor_rank(node.inputs[0])
    if rank is None:
        return None
    if present(node, 1):
        given = const_input(node, 1)
        if given is None:
            return None
        axes = [int(a) for a in given.reshape(-1)]
    else:
        axes = [int(a) for a in attr(node, "axes", [])]
    if not axes:
        return list(range(rank))
    return sorted(a + rank if a < 0 else a for a in axes)


def _axes_known(node, graph):
    if reduce_axes(node) is None:
        return "rank or axes unknown (axes must be a constant)"
    if int(attr(node, "noop_with_empty_axes", 0)) and not reduce_axes_given(node):
        return "noop_with_empty_axes with no axes: the node is an identity"
    return None


def reduce_axes_given(node) -> bool:
    return present(node, 1) or bool(attr(node, "axes", []))


_reduce_ok = all_of(_axes_known, float_input)


def _sum(rw, node, x, outputs=None, keepdims=None):
    keep = int(attr(node, "keepdims", 1)) if keepdims is None else keepdims
    return rw.reduce("ReduceSum", x, reduce_axes(node), keep, outputs=outputs)


@rule("ReduceSumSquare", emits=["Mul", "ReduceSum"], when=_reduce_ok)
def reducesumsquare_decompose(rw, node):
    """before: ReduceSumSquare(x; axes) ─► y          after: ReduceSum(Mul(x, x); axes) ─► y"""
    x = node.inputs[0]
    _sum(rw, node, rw.emit("Mul", [x, x]), outputs=rw.outputs[:1])


@rule("ReduceL2", emits=["Mul", "ReduceSum", "Sqrt"], when=_reduce_ok)
def reducel2_decompose(rw, node):
    """before: ReduceL2(x; axes) ─► y          after: Sqrt(ReduceSum(Mul(x, x); axes)) ─► y"""
    x = node.inputs[0]
    rw.out("Sqrt", [_sum(rw, node, rw.emit("Mul", [x, x]))])


@rule("ReduceL1", emits=["Abs", "ReduceSum"], when=_reduce_ok)
def reducel1_decompose(rw, node):
    """before: ReduceL1(x; axes) ─► y          after: ReduceSum(Abs(x); axes) ─► y"""
    _sum(rw, node, rw.emit("Abs", [node.inputs[0]]), outputs=rw.outputs[:1])


@rule("ReduceLogSum", emits=["ReduceSum", "Log"], when=_reduce_ok)
def reducelogsum_decompose(rw, node):
    """before: ReduceLogSum(x; axes) ─► y          after: Log(ReduceSum(x; axes)) ─► y"""
    rw.out("Log", [_sum(rw, node, node.inputs[0])])


@rule("ReduceLogSumExp", emits=["ReduceMax", "Sub", "Exp", "ReduceSum", "Log", "Add"], when=_reduce_ok)
def reducelogsumexp_decompose(rw, node):
    """The maximum m is subtracted first (Exp cannot overflow) and added back.

    before: ReduceLogSumExp(x; axes, keepdims) ─► y
    after:  m = ReduceMax(x; axes, keepdims=1);  s = ReduceSum(Exp(Sub(x, m)); axes, keepdims)
            y = Add(Log(s), m)        (keepdims=0: m added as ReduceMax(x; axes, keepdims=0))
    """
    x, axes = node.inputs[0], reduce_axes(node)
    keep = int(attr(node, "keepdims", 1))
    m = rw.reduce("ReduceMax", x, axes, 1)
    s = _sum(rw, node, rw.emit("Exp", [rw.emit("Sub", [x, m])]))
    rw.out("Add", [rw.emit("Log", [s]), m if keep else rw.reduce("ReduceMax", x, axes, 0)])
