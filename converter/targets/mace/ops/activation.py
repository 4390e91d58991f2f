"""Activations -> Activation (or Eltwise CLIP)."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ....ir.graph import attr
from ..registry import OPS
from .common import CLIP, const_input, fail, optional_const, rank_of


def _activation(em, node: gs.Node, kind: str, extra=(), inputs=None) -> None:
    """Activation (``mace/ops/activation.cc:42-52``; math in ``mace/ops/ref/activation.cc``)."""
    x = [em.name_of(node.inputs[0])] + (inputs or [])
    em.op("Activation", node.name, x, [em.name_of(node.outputs[0])],
          transposable=rank_of(em, node.inputs[0]) == 4, args=[("activation", "s", kind), *extra])


@OPS.register("Relu")
def relu(em, node):
    _activation(em, node, "RELU")


@OPS.register("Sigmoid")
def sigmoid(em, node):
    _activation(em, node, "SIGMOID")


@OPS.register("Tanh")
def tanh(em, node):
    _activation(em, node, "TANH")


@OPS.register("LeakyRelu")
def leaky_relu(em, node):
    """max(x,0) + min(x,0)*activation_coefficient (``ref/activation.cc`` LEAKYRELU)."""
    _activation(em, node, "LEAKYRELU", [("activation_coefficient", "f", float(attr(node, "alpha", 0.01)))])


@OPS.register("Elu")
def elu(em, node):
    """x<0: (exp(x)-1)*activation_coefficient (``ref/activation.cc`` ELU)."""
    _activation(em, node, "ELU", [("activation_coefficient", "f", float(attr(node, "alpha", 1.0)))])


@OPS.register("HardSigmoid")
def hard_sigmoid(em, node):
    """max(0, min(1, alpha*x + beta)) (``ref/activation.cc`` HARDSIGMOID)."""
    _activation(em, node, "HARDSIGMOID", [("hardsigmoid_alpha", "f", float(attr(node, "alpha", 0.2))),
                                          ("hardsigmoid_beta", "f", float(attr(node, "beta", 0.5)))])


@OPS.register("PRelu")
def prelu(em, node):
    """PRELU takes alpha as input 1, one slope per channel of a 4-D NCHW tensor
    (``mace/ops/activation.cc:59-70``, ``activation.h PReLUActivation``)."""
    slope = const_input(node, 1, "the slope")
    shape = em.shape(node.inputs[0])
    if len(shape) != 4:
        raise fail(node, "PRelu needs a 4-D input")
    channels = shape[1]
    if slope.size == 1:
        slope = np.full(channels, float(slope.reshape(-1)[0]), np.float32)
    elif slope.size != channels or slope.reshape(-1).shape[0] != channels or (
            slope.ndim >= 3 and slope.shape[-2:] != (1, 1)) or slope.ndim > 3:
        raise fail(node, f"slope of shape {list(slope.shape)} is not per-channel")
    _activation(em, node, "PRELU", inputs=[em.weight(node.inputs[1].name, slope.reshape(-1))])


@OPS.register("Clip")
def clip(em, node):
    """Clip(0, m) -> Activation RELUX (min(max(x,0),max_limit)); Clip(0, inf) -> RELU;
    otherwise Eltwise CLIP with coeff [min, max] (``mace/ops/eltwise.cc`` requires min < max)."""
    lo = optional_const(node, 1)
    hi = optional_const(node, 2)
    if (len(node.inputs) > 1 and node.inputs[1].name and lo is None) or (
            len(node.inputs) > 2 and node.inputs[2].name and hi is None):
        raise fail(node, "min/max must be constants")
    if any(b is not None and np.size(b) != 1 for b in (lo, hi)):
        raise fail(node, "min/max must be scalars")
    # a rule's scalar constants are (1,)-shaped (onnx-graphsurgeon stores at least one axis)
    lo = float(np.reshape(lo, -1)[0]) if lo is not None else float("-inf")
    hi = float(np.reshape(hi, -1)[0]) if hi is not None else float("inf")
    if lo == 0.0 and np.isinf(hi):
        return _activation(em, node, "RELU")
    if lo == 0.0:
        return _activation(em, node, "RELUX", [("max_limit", "f", hi)])
    lo, hi = max(lo, -3.4028234663852886e38), min(hi, 3.4028234663852886e38)
    if not lo < hi:
        raise fail(node, "Eltwise CLIP needs min < max")
    em.op("Eltwise", node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])],
          transposable=rank_of(em, node.inputs[0]) == 4, args=[("type", "i", CLIP), ("coeff", "floats", [lo, hi])])

