"""ONNX normalizations and activations without a one-to-one builtin -> TFLite builtins.

Kernels followed (tensorflow/tensorflow, tensorflow/lite/kernels/):
* local_response_norm.cc: the registered float kernel is the generic-optimized one
  (internal/optimized/optimized_ops.h ``LocalResponseNormalization``): window [c-r, c+r] over the
  innermost axis, ``y = x * (bias + alpha * sum x^2) ** -beta``;
* l2norm.cc: innermost axis, ``y = x / max(sqrt(sum x^2), 1e-6)``;
* activations.cc: ELU (alpha fixed at 1), RELU_0_TO_1 (clamp to [0, 1]).
Decompositions are exact identities (no approximations) and use builtins only.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import attr
from . import layout as L
from .ops_logic import perm_of
from .registry import OPS
from .ops_tensor import positive_axis, builtin_options, reduce_axes


class _Emitter:
    """Small helper that names temporaries after the node's output and keeps the stored shape."""

    def __init__(self, Lw, node, perm):
        self.Lw, self.node, self.perm = Lw, node, perm
        self.base = node.outputs[0].name

    def temp(self, tag, shape, dtype=np.float32):
        return self.Lw.temp(f"{self.base}/{tag}", shape, dtype)

    def scalar(self, tag, value):
        return self.Lw.constant(f"{self.node.name}/{tag}", np.array(value, np.float32))

    def op(self, builtin, ins, out, options=None):
        self.Lw.emit(builtin, ins, [out], builtin_options(options) if options else None)
        return out


def _per_channel(Lw, node, value, rank, perm) -> int:
    """A per-channel (axis 1) constant broadcast to ``rank`` and stored in ``perm``."""
    value = np.asarray(value, np.float32).reshape((1, -1) + (1,) * (rank - 2))
    return Lw.constant(f"{node.name}/per_channel", value.transpose(perm))


@OPS.register("InstanceNormalization")
def lower_instance_norm(Lw, node):
    """InstanceNormalization -> MEAN over the spatial axes, SQUARED_DIFFERENCE, RSQRT, MUL, ADD:

        mean = MEAN(x); var = MEAN(SQUARED_DIFFERENCE(x, mean))
        y = (x - mean) * (RSQRT(var + eps) * scale) + bias
    """
    x = node.inputs[0]
    scale, bias = Lw.const(node.inputs[1]), Lw.const(node.inputs[2])
    if scale is None or bias is None:
        raise Lw.unsupported("scale and bias must be constants")
    rank = Lw.rank(x)
    perm = perm_of(Lw, x)
    xi = Lw.get(x, perm)
    stored = Lw.w.tensors[xi].shape
    positions = sorted(L.position(perm, a) for a in range(2, rank))
    reduced = tuple(1 if i in positions else d for i, d in enumerate(stored))
    e = _Emitter(Lw, node, perm)
    axes = Lw.int32(f"{node.name}/axes", positions)
    keep = builtin_options("ReducerOptions", keepDims=True)
    mean, sqd, var = e.temp("mean", reduced), e.temp("squared_difference", stored), e.temp("var", reduced)
    Lw.emit("MEAN", [xi, axes], [mean], keep)
    e.op("SQUARED_DIFFERENCE", [xi, mean], sqd, "SquaredDifferenceOptions")
    Lw.emit("MEAN", [sqd, axes], [var], keep)
    var_eps = e.op("ADD", [var, e.scalar("epsilon", float(attr(node, "epsilon", 1e-5)))], e.temp("var_eps", reduced),
                   "AddOptions")
    rstd = e.op("RSQRT", [var_eps], e.temp("rstd", reduced))
    gain = e.op("MUL", [rstd, _per_channel(Lw, node, scale, rank, perm)], e.temp("gain", reduced), "MulOptions")
    centered = e.op("SUB", [xi, mean], e.temp("centered", stored), "SubOptions")
    normed = e.op("MUL", [centered, gain], e.temp("normed", stored), "MulOptions")
    e.op("ADD", [normed, _per_channel(Lw, node, bias, rank, perm)], Lw.define(node.outputs[0], perm), "AddOptions")


@OPS.register("LRN")
def lower_lrn(Lw, node):
    """LRN (odd size) -> LOCAL_RESPONSE_NORMALIZATION on NHWC data: radius (size-1)/2 and
    alpha/size (ONNX divides alpha by size; TFLite does not).  ONNX's window for an even size is
    asymmetric ([c - (size-1)//2, c + size//2]); TFLite's is always symmetric: refused."""
    x = node.inputs[0]
    size = int(attr(node, "size"))
    if Lw.rank(x) != 4:
        raise Lw.unsupported("LOCAL_RESPONSE_NORMALIZATION needs a 4-D input")
    if size % 2 == 0:
        raise Lw.unsupported("LRN with an even size has an asymmetric window; TFLite's is symmetric")
    opts = builtin_options("LocalResponseNormalizationOptions", radius=(size - 1) // 2,
                    bias=float(attr(node, "bias", 1.0)), alpha=float(attr(node, "alpha", 1e-4)) / size,
                    beta=float(attr(node, "beta", 0.75)))
    Lw.emit("LOCAL_RESPONSE_NORMALIZATION", [Lw.get(x, L.NHWC)], [Lw.define(node.outputs[0], L.NHWC)], opts)


@OPS.register("LpNormalization")
def lower_lp_norm(Lw, node):
    """LpNormalization: p=2 -> L2_NORMALIZATION with ``axis`` innermost (layout chosen so, as for
    Softmax); p=1 -> x / SUM(ABS(x)).  L2_NORMALIZATION clamps the norm at 1e-6 (l2norm.cc)."""
    x = node.inputs[0]
    rank = Lw.rank(x)
    axis = positive_axis(int(attr(node, "axis", -1)), rank)
    p = int(attr(node, "p", 2))
    perm = perm_of(Lw, x)
    if p == 2:
        if perm[-1] != axis:
            perm = L.axis_last(perm, axis)
        Lw.emit("L2_NORMALIZATION", [Lw.get(x, perm)], [Lw.define(node.outputs[0], perm)],
                builtin_options("L2NormOptions"))
        return
    if p != 1:
        raise Lw.unsupported(f"LpNormalization with p={p} is not mapped")
    xi = Lw.get(x, perm)
    stored = Lw.w.tensors[xi].shape
    pos = L.position(perm, axis)
    e = _Emitter(Lw, node, perm)
    absolute = e.op("ABS", [xi], e.temp("abs", stored))
    total = e.temp("l1", tuple(1 if i == pos else d for i, d in enumerate(stored)))
    Lw.emit("SUM", [absolute, Lw.int32(f"{node.name}/axis", [pos])], [total],
            builtin_options("ReducerOptions", keepDims=True))
    e.op("DIV", [xi, total], Lw.define(node.outputs[0], perm), "DivOptions")


@OPS.register("ReduceL2")
def lower_reduce_l2(Lw, node):
    """ReduceL2 -> SQRT(SUM(MUL(x, x)))."""
    x = node.inputs[0]
    perm = perm_of(Lw, x)
    xi = Lw.get(x, perm)
    found = reduce_axes(Lw, node)
    axes, keep = found if found is not None else ([], True)
    e = _Emitter(Lw, node, perm)
    squared = e.op("MUL", [xi, xi], e.temp("squared", Lw.w.tensors[xi].shape), "MulOptions")
    out_perm = perm if keep else L.drop_axes(perm, axes)
    out = Lw.define(node.outputs[0], out_perm)
    if not axes:
        e.op("SQRT", [squared], out)
        return
    total = e.temp("sum_squares", Lw.w.tensors[out].shape)
    Lw.emit("SUM", [squared, Lw.int32(f"{node.name}/axes", sorted(L.position(perm, a) for a in axes))], [total],
            builtin_options("ReducerOptions", keepDims=keep))
    e.op("SQRT", [total], out)


# -- activations ------------------------------------------------------------------------------
@OPS.register("HardSigmoid")
def lower_hard_sigmoid(Lw, node):
    """HardSigmoid -> RELU_0_TO_1(x * alpha + beta)."""
    x = node.inputs[0]
    perm = perm_of(Lw, x)
    xi = Lw.get(x, perm)
    e = _Emitter(Lw, node, perm)
    stored = Lw.w.tensors[xi].shape
    scaled = e.op("MUL", [xi, e.scalar("alpha", float(attr(node, "alpha", 0.2)))], e.temp("scaled", stored), "MulOptions")
    shifted = e.op("ADD", [scaled, e.scalar("beta", float(attr(node, "beta", 0.5)))], e.temp("shifted", stored),
                   "AddOptions")
    e.op("RELU_0_TO_1", [shifted], Lw.define(node.outputs[0], perm))


def _scaled_elu(Lw, node, alpha: float, gamma: float):
    """gamma * (x if x > 0 else alpha * (exp(x) - 1)) from ELU (alpha 1):
    e = ELU(x);  y = gamma * (e + (alpha - 1) * MINIMUM(e, 0))."""
    x = node.inputs[0]
    perm = perm_of(Lw, x)
    xi = Lw.get(x, perm)
    stored = Lw.w.tensors[xi].shape
    e = _Emitter(Lw, node, perm)
    out = Lw.define(node.outputs[0], perm)
    if alpha == 1.0 and gamma == 1.0:
        e.op("ELU", [xi], out)
        return
    elu = e.op("ELU", [xi], e.temp("elu", stored))
    negative = e.op("MINIMUM", [elu, e.scalar("zero", 0.0)], e.temp("negative_part", stored), "MaximumMinimumOptions")
    extra = e.op("MUL", [negative, e.scalar("alpha_minus_1", alpha - 1.0)], e.temp("alpha_part", stored), "MulOptions")
    if gamma == 1.0:
        e.op("ADD", [elu, extra], out, "AddOptions")
        return
    total = e.op("ADD", [elu, extra], e.temp("elu_alpha", stored), "AddOptions")
    e.op("MUL", [total, e.scalar("gamma", gamma)], out, "MulOptions")


@OPS.register("Elu")
def lower_elu(Lw, node):
    """Elu -> ELU (TFLite's alpha is 1; other alphas via :func:`_scaled_elu`)."""
    _scaled_elu(Lw, node, float(attr(node, "alpha", 1.0)), 1.0)


@OPS.register("Selu")
def lower_selu(Lw, node):
    """Selu -> ELU, MINIMUM, MUL, ADD, MUL (see :func:`_scaled_elu`)."""
    _scaled_elu(Lw, node, float(attr(node, "alpha", 1.67326319217681884765625)),
                float(attr(node, "gamma", 1.05070102214813232421875)))


@OPS.register("Softplus")
def lower_softplus(Lw, node):
    """Softplus(x) = log(1 + exp(x)), written overflow-free as RELU(x) + LOG(1 + EXP(-|x|))."""
    x = node.inputs[0]
    perm = perm_of(Lw, x)
    xi = Lw.get(x, perm)
    stored = Lw.w.tensors[xi].shape
    e = _Emitter(Lw, node, perm)
    absolute = e.op("ABS", [xi], e.temp("abs", stored))
    negated = e.op("NEG", [absolute], e.temp("neg_abs", stored))
    exp = e.op("EXP", [negated], e.temp("exp", stored))
    one_plus = e.op("ADD", [exp, e.scalar("one", 1.0)], e.temp("one_plus", stored), "AddOptions")
    log = e.op("LOG", [one_plus], e.temp("log", stored))
    relu = e.op("RELU", [xi], e.temp("relu", stored))
    e.op("ADD", [relu, log], Lw.define(node.outputs[0], perm), "AddOptions")

