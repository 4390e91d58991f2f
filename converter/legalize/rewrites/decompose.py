"""Composite ops spelled out in primitive ones (exact unless the rule says ``approximate``)."""

from __future__ import annotations

import math

import numpy as np

from ...ir.graph import attr, tensor_rank
from .base import (APPROXIMATE, all_of, const_input, float_input, present,
                   rule)


def _rank_known(node, graph):
    return None if tensor_rank(node.inputs[0]) is not None else "input rank unknown"


def _softmax_axes(rw, node):
    """Softmax reduces over ``axis`` (opset ≥ 13) or over every axis from ``axis`` on (older)."""
    rank = tensor_rank(node.inputs[0])
    default = -1 if rw.opset >= 13 else 1
    a = int(attr(node, "axis", default))
    a = a + rank if a < 0 else a
    return [a] if rw.opset >= 13 else list(range(a, rank))


_softmax_ok = all_of(_rank_known, float_input)


@rule("Softmax", emits=["ReduceMax", "Sub", "Exp", "ReduceSum", "Div"], when=_softmax_ok)
def softmax_decompose(rw, node):
    """Softmax with the max subtracted first, so Exp cannot overflow.

    before: x ─► Softmax(axis) ─► y
    after:  x ─► Sub(x, ReduceMax(x)) ─► Exp ─► e ─► Div(e, ReduceSum(e)) ─► y
    """
    x = node.inputs[0]
    axes = _softmax_axes(rw, node)
    e = rw.emit("Exp", [rw.emit("Sub", [x, rw.reduce("ReduceMax", x, axes)])])
    rw.out("Div", [e, rw.reduce("ReduceSum", e, axes)])


@rule("LogSoftmax", emits=["ReduceMax", "Sub", "Exp", "ReduceSum", "Log"], when=_softmax_ok)
def logsoftmax_decompose(rw, node):
    """before: x ─► LogSoftmax(axis) ─► y
    after:  d = Sub(x, ReduceMax(x)) ─► y = Sub(d, Log(ReduceSum(Exp(d))))
    """
    x = node.inputs[0]
    axes = _softmax_axes(rw, node)
    d = rw.emit("Sub", [x, rw.reduce("ReduceMax", x, axes)])
    lse = rw.emit("Log", [rw.reduce("ReduceSum", rw.emit("Exp", [d]), axes)])
    rw.out("Sub", [d, lse])


@rule("HardSigmoid", emits=["Mul", "Add", "Clip"], when=float_input)
def hardsigmoid_decompose(rw, node):
    """before: HardSigmoid(x; α, β) ─► y          after: Clip(Add(Mul(x, α), β), 0, 1) ─► y"""
    a, b = float(attr(node, "alpha", 0.2)), float(attr(node, "beta", 0.5))
    lin = rw.emit("Add", [rw.emit("Mul", [node.inputs[0], rw.scalar(a)]), rw.scalar(b)])
    rw.clip(lin, 0.0, 1.0, outputs=rw.outputs[:1])


@rule("HardSwish", emits=["Mul", "Add", "Clip"], when=float_input)
def hardswish_decompose(rw, node):
    """before: HardSwish(x) ─► y          after: Mul(x, Clip(Add(Mul(x, 1/6), 0.5), 0, 1)) ─► y"""
    x = node.inputs[0]
    gate = rw.clip(rw.emit("Add", [rw.emit("Mul", [x, rw.scalar(1.0 / 6.0)]), rw.scalar(0.5)]), 0.0, 1.0)
    rw.out("Mul", [x, gate])


@rule("HardSwish", emits=["Mul", "HardSigmoid"], when=float_input)
def hardswish_to_hardsigmoid(rw, node):
    """before: HardSwish(x) ─► y          after: Mul(x, HardSigmoid(x; α=1/6, β=0.5)) ─► y"""
    x = node.inputs[0]
    rw.out("Mul", [x, rw.emit("HardSigmoid", [x], {"alpha": 1.0 / 6.0, "beta": 0.5})])


def _gelu_form(form):
    def check(node, graph):
        got = attr(node, "approximate", "none")
        got = got.decode() if isinstance(got, bytes) else got
        return float_input(node, graph) if got == form else f"Gelu approximate={got}"

    return check


@rule("Gelu", emits=["Mul", "Erf", "Add"], when=_gelu_form("none"))
def gelu_erf_decompose(rw, node):
    """before: Gelu(x) ─► y          after: Mul(Mul(x, 0.5), Add(Erf(Mul(x, 1/√2)), 1)) ─► y"""
    x = node.inputs[0]
    erf = rw.emit("Erf", [rw.emit("Mul", [x, rw.scalar(1.0 / math.sqrt(2.0))])])
    rw.out("Mul", [rw.emit("Mul", [x, rw.scalar(0.5)]), rw.emit("Add", [erf, rw.scalar(1.0)])])


@rule("Gelu", emits=["Mul", "Add", "Tanh"], when=_gelu_form("tanh"))
def gelu_tanh_decompose(rw, node):
    """before: Gelu(x; approximate=tanh) ─► y
    after:  Mul(Mul(x, 0.5), Add(Tanh(Mul(Add(x, Mul(0.044715, x·x·x)), √(2/π))), 1)) ─► y
    """
    x = node.inputs[0]
    cube = rw.emit("Mul", [rw.emit("Mul", [x, x]), x])
    inner = rw.emit("Add", [x, rw.emit("Mul", [cube, rw.scalar(0.044715)])])
    t = rw.emit("Tanh", [rw.emit("Mul", [inner, rw.scalar(math.sqrt(2.0 / math.pi))])])
    rw.out("Mul", [rw.emit("Mul", [x, rw.scalar(0.5)]), rw.emit("Add", [t, rw.scalar(1.0)])])


# Abramowitz & Stegun, Handbook of Mathematical Functions, 7.1.26: |error| <= 1.5e-7.
_AS_P = 0.3275911
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf_of_abs(rw, x):
    """Emit erf(|x|) = 1 − t·(a1 + t·(a2 + … + t·a5))·Exp(−x²), t = 1 / (1 + p·|x|) (A&S 7.1.26);
    the Erf rules differ only in how they restore the sign."""
    ax = rw.emit("Abs", [x])
    t = rw.emit("Div", [rw.scalar(1.0), rw.emit("Add", [rw.emit("Mul", [ax, rw.scalar(_AS_P)]), rw.scalar(1.0)])])
    poly = rw.emit("Mul", [t, rw.scalar(_AS_A[4])])
    for a in reversed(_AS_A[:4]):
        poly = rw.emit("Mul", [t, rw.emit("Add", [poly, rw.scalar(a)])])
    gauss = rw.emit("Exp", [rw.emit("Mul", [rw.emit("Mul", [ax, ax]), rw.scalar(-1.0)])])
    return rw.emit("Add", [rw.emit("Mul", [rw.emit("Mul", [poly, gauss]), rw.scalar(-1.0)]), rw.scalar(1.0)])


@rule("Erf", emits=["Abs", "Sign", "Mul", "Add", "Div", "Exp"], kind=APPROXIMATE,
      error_bound=1e-6, when=float_input)
def erf_polynomial(rw, node):
    """Erf for targets without it (Erf-GELU): A&S 7.1.26, |error| ≤ 1.5e-7 (+ float32 rounding).

    before: Erf(x) ─► y
    after:  t = 1 / (1 + p·|x|);  y = Sign(x) · (1 − t·(a1 + t·(a2 + … + t·a5)) · Exp(−x²))
    """
    x = node.inputs[0]
    rw.out("Mul", [rw.emit("Sign", [x]), erf_of_abs(rw, x)])


_layernorm_ok = all_of(_rank_known, float_input)


@rule("LayerNormalization", emits=["ReduceMean", "Sub", "Mul", "Add", "Sqrt", "Div"], when=_layernorm_ok)
def layernorm_decompose(rw, node):
    """Also yields the optional Mean and InvStdDev outputs when they are used.

    before: LayerNormalization(x, γ, β; axis, ε) ─► y (, mean, inv_std)
    after:  mean = ReduceMean(x);  d = Sub(x, mean);  v = ReduceMean(Mul(d, d))
            inv_std = Div(1, Sqrt(Add(v, ε)));  y = Add(Mul(Mul(d, inv_std), γ), β)
    """
    x, scale = node.inputs[0], node.inputs[1]
    rank = tensor_rank(x)
    a = int(attr(node, "axis", -1))
    axes = list(range(a + rank if a < 0 else a, rank))
    extra = rw.outputs[1:]
    mean = rw.reduce("ReduceMean", x, axes, outputs=extra[:1] or None)
    d = rw.emit("Sub", [x, mean])
    var = rw.reduce("ReduceMean", rw.emit("Mul", [d, d]), axes)
    eps = rw.scalar(float(attr(node, "epsilon", 1e-5)))
    inv_std = rw.emit("Div", [rw.scalar(1.0), rw.emit("Sqrt", [rw.emit("Add", [var, eps])])],
                      outputs=extra[1:2] or None)
    normed = rw.emit("Mul", [d, inv_std])
    if present(node, 2):
        rw.out("Add", [rw.emit("Mul", [normed, scale]), node.inputs[2]])
    else:
        rw.out("Mul", [normed, scale])


def _clip_bounds(node):
    """(min, max) as arrays or None; ``False`` when a bound is not a constant."""
    if len(node.inputs) > 1 or "min" not in node.attrs and "max" not in node.attrs:
        lo = const_input(node, 1) if present(node, 1) else None
        hi = const_input(node, 2) if present(node, 2) else None
        if (present(node, 1) and lo is None) or (present(node, 2) and hi is None):
            return False
        return lo, hi
    lo, hi = node.attrs.get("min"), node.attrs.get("max")
    return (None if lo is None else np.float32(lo)), (None if hi is None else np.float32(hi))


def _clip_const(node, graph):
    if int(graph.opset or 17) < 8:
        return "Max/Min broadcast only from opset 8"
    return "Clip bounds are not constants" if _clip_bounds(node) is False else None


def _clip_relu(node, graph):
    bounds = _clip_bounds(node)
    if bounds is False or bounds[0] is None or float(bounds[0]) != 0.0:
        return "Clip lower bound is not 0"
    if bounds[1] is not None and not np.isinf(float(bounds[1])):
        return "Clip has an upper bound"
    return float_input(node, graph)


def _clip_relu_min(node, graph):
    bounds = _clip_bounds(node)
    if bounds is False or bounds[0] is None or float(bounds[0]) != 0.0:
        return "Clip lower bound is not 0"
    if bounds[1] is None or float(bounds[1]) < 0:
        return "Clip has no (non-negative) upper bound"
    return float_input(node, graph)


@rule("Clip", emits=["Relu"], when=_clip_relu)
def clip_to_relu(rw, node):
    """before: Clip(x, 0) ─► y          after: Relu(x) ─► y"""
    rw.out("Relu", [node.inputs[0]])


@rule("Clip", emits=["Relu", "Min"], when=_clip_relu_min)
def clip_to_relu_min(rw, node):
    """Clip(x, 0, 6) is Relu6; as Relu then Min for targets without a bounded Relu.

    before: Clip(x, 0, m) ─► y          after: Min(Relu(x), m) ─► y
    """
    hi = _clip_bounds(node)[1]
    rw.out("Min", [rw.emit("Relu", [node.inputs[0]]), rw.const("max", hi, dtype=node.inputs[0].dtype)])


@rule("Clip", emits=["Max", "Min"], when=_clip_const)
def clip_to_min_max(rw, node):
    """before: Clip(x, lo, hi) ─► y          after: Min(Max(x, lo), hi) ─► y"""
    lo, hi = _clip_bounds(node)
    x = node.inputs[0]
    dt = x.dtype
    if lo is None and hi is None:
        rw.out("Max", [x, x])  # a Clip without bounds is the identity
        return
    if lo is not None:
        x = rw.emit("Max", [x, rw.const("min", lo, dtype=dt)], outputs=rw.outputs[:1] if hi is None else None,
                    dtype=dt)
    if hi is not None:
        rw.out("Min", [x, rw.const("max", hi, dtype=dt)])


@rule("Sigmoid", emits=["Mul", "Exp", "Add", "Div"], when=float_input)
def sigmoid_decompose(rw, node):
    """before: Sigmoid(x) ─► y          after: Div(1, Add(Exp(Mul(x, −1)), 1)) ─► y"""
    e = rw.emit("Exp", [rw.emit("Mul", [node.inputs[0], rw.scalar(-1.0)])])
    rw.out("Div", [rw.scalar(1.0), rw.emit("Add", [e, rw.scalar(1.0)])])


@rule("Softplus", emits=["Relu", "Abs", "Mul", "Exp", "Add", "Log"], when=float_input)
def softplus_decompose(rw, node):
    """The overflow-free form of log(1 + eˣ).

    before: Softplus(x) ─► y          after: Add(Relu(x), Log(Add(Exp(Mul(Abs(x), −1)), 1))) ─► y
    """
    x = node.inputs[0]
    e = rw.emit("Exp", [rw.emit("Mul", [rw.emit("Abs", [x]), rw.scalar(-1.0)])])
    rw.out("Add", [rw.emit("Relu", [x]), rw.emit("Log", [rw.emit("Add", [e, rw.scalar(1.0)])])])


@rule("Mish", emits=["Mul", "Tanh", "Softplus"], when=float_input)
def mish_decompose(rw, node):
    """before: Mish(x) ─► y          after: Mul(x, Tanh(Softplus(x))) ─► y"""
    x = node.inputs[0]
    rw.out("Mul", [x, rw.emit("Tanh", [rw.emit("Softplus", [x])])])


def _alpha_at_most_one(node, graph):
    if float(attr(node, "alpha", 0.01)) > 1.0:
        return "alpha > 1"
    return float_input(node, graph)


@rule("LeakyRelu", emits=["Mul", "Max"], when=_alpha_at_most_one)
def leakyrelu_to_max(rw, node):
    """For α ≤ 1 (negative α too): x ≥ α·x exactly when x ≥ 0.

    before: LeakyRelu(x; α) ─► y          after: Max(x, Mul(x, α)) ─► y
    """
    x = node.inputs[0]
    rw.out("Max", [x, rw.emit("Mul", [x, rw.scalar(float(attr(node, "alpha", 0.01)))])])


@rule("PRelu", emits=["Relu", "Min", "Mul", "Add"], when=float_input)
def prelu_decompose(rw, node):
    """before: PRelu(x, slope) ─► y          after: Add(Relu(x), Mul(Min(x, 0), slope)) ─► y"""
    x, slope = node.inputs
    neg = rw.emit("Mul", [rw.emit("Min", [x, rw.scalar(0.0)]), slope])
    rw.out("Add", [rw.emit("Relu", [x]), neg])


@rule("Relu", emits=["Max"], when=float_input)
def relu_to_max(rw, node):
    """before: Relu(x) ─► y          after: Max(x, 0) ─► y"""
    rw.out("Max", [node.inputs[0], rw.scalar(0.0)])


def _mean_axes(node, graph):
    if present(node, 1):
        axes = const_input(node, 1)
        return None if axes is None else [int(a) for a in axes]
    return attr(node, "axes")


def _reducemean_spatial(keepdims):
    def check(node, graph):
        rank = tensor_rank(node.inputs[0])
        axes = _mean_axes(node, graph)
        if rank is None or rank < 3 or axes is None:
            return "rank or axes unknown"
        if sorted(a + rank if a < 0 else a for a in axes) != list(range(2, rank)):
            return "ReduceMean does not reduce exactly the spatial axes"
        if int(attr(node, "keepdims", 1)) != keepdims:
            return f"keepdims is not {keepdims}"
        return float_input(node, graph)

    return check


@rule("ReduceMean", emits=["GlobalAveragePool"], when=_reducemean_spatial(1))
def reducemean_to_gap(rw, node):
    """before: ReduceMean(x[N,C,H,W]; axes=[2,3], keepdims=1) ─► y   after: GlobalAveragePool(x) ─► y"""
    rw.out("GlobalAveragePool", [node.inputs[0]])


@rule("ReduceMean", emits=["GlobalAveragePool", "Reshape"], when=_reducemean_spatial(0))
def reducemean_to_gap_flat(rw, node):
    """before: ReduceMean(x; axes=[2,3], keepdims=0) ─► y
    after:  GlobalAveragePool(x) ─► Reshape[N, C] ─► y
    """
    rw.reshape(rw.emit("GlobalAveragePool", [node.inputs[0]]), [0, -1], outputs=rw.outputs[:1])


@rule("GlobalAveragePool", emits=["ReduceMean"], when=all_of(_rank_known, float_input))
def gap_to_reducemean(rw, node):
    """before: GlobalAveragePool(x) ─► y          after: ReduceMean(x; spatial axes, keepdims=1) ─► y"""
    rank = tensor_rank(node.inputs[0])
    rw.reduce("ReduceMean", node.inputs[0], list(range(2, rank)), 1, outputs=rw.outputs[:1])
