"""Activations added after opset 17, spelled in opset-17 ops (exact: the ONNX definitions)."""

from __future__ import annotations

import math

import onnx_graphsurgeon as gs

from ...ir.graph import attr
from .base import Unadaptable, adapter, text


@adapter("Gelu", 20)
def gelu_as_erf_or_tanh(rw, node: gs.Node) -> None:
    """Gelu-20 in the form torch's opset-17 exporter writes (the matrix's ``gelu_erf`` pattern,
    which TFLite's exporter fuses back into its GELU builtin).

    before: x ─► Gelu(approximate=none) ─► y
    after:  x ─► Div(x, √2) ─► Erf ─► Add(·, 1) ─► Mul(x, ·) ─► Mul(·, 0.5) ─► y

    before: x ─► Gelu(approximate=tanh) ─► y
    after:  Mul(Mul(x, 0.5), Add(Tanh(Mul(Add(x, Mul(x·x·x, 0.044715)), √(2/π))), 1)) ─► y
    """
    x = node.inputs[0]
    form = text(node, "approximate", "none")
    if form == "none":
        erf = rw.emit("Erf", [rw.emit("Div", [x, rw.scalar(math.sqrt(2.0))])])
        gated = rw.emit("Mul", [x, rw.emit("Add", [erf, rw.scalar(1.0)])])
        rw.out("Mul", [gated, rw.scalar(0.5)])
    elif form == "tanh":
        cube = rw.emit("Mul", [rw.emit("Mul", [x, x]), x])
        inner = rw.emit("Add", [x, rw.emit("Mul", [cube, rw.scalar(0.044715)])])
        t = rw.emit("Tanh", [rw.emit("Mul", [inner, rw.scalar(math.sqrt(2.0 / math.pi))])])
        rw.out("Mul", [rw.emit("Mul", [x, rw.scalar(0.5)]), rw.emit("Add", [t, rw.scalar(1.0)])])
    else:
        raise Unadaptable(f"approximate={form!r} is not one ONNX defines")


@adapter("Mish", 18, 22)
def mish_as_tanh_softplus(rw, node: gs.Node) -> None:
    """before: x ─► Mish ─► y          after: Mul(x, Tanh(Softplus(x))) ─► y"""
    x = node.inputs[0]
    rw.out("Mul", [x, rw.emit("Tanh", [rw.emit("Softplus", [x])])])


@adapter("Swish", 24)
def swish_as_sigmoid(rw, node: gs.Node) -> None:
    """before: x ─► Swish(alpha) ─► y          after: Mul(x, Sigmoid(Mul(x, alpha))) ─► y
    (no inner Mul when alpha is 1)"""
    x = node.inputs[0]
    alpha = float(attr(node, "alpha", 1.0))
    scaled = x if alpha == 1.0 else rw.emit("Mul", [x, rw.scalar(alpha)])
    rw.out("Mul", [x, rw.emit("Sigmoid", [scaled])])
