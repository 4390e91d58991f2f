"""Elementwise arithmetic rewritten into ops a target has (Add and Sub into each other, Mul, Neg)."""

from __future__ import annotations

import numpy as np

from .base import all_of, const_input, float_input, rule


def _second_const(node, graph):
    return None if const_input(node, 1) is not None else "second input is not a constant"


@rule("Sub", emits=["Add"], when=_second_const)
def sub_const_to_add(rw, node):
    """Subtracting a constant is adding its negation.

    before: x ─► Sub(x, c) ─► y          after: x ─► Add(x, −c) ─► y
    """
    x, c = node.inputs
    rw.out("Add", [x, rw.const("neg", -const_input(node, 1), dtype=const_input(node, 1).dtype)])


def _signed(node, graph):
    from ...ir.graph import dtype_name

    name = dtype_name(node.inputs[1])
    if name is None or name.startswith("uint") or name == "bool":
        return f"Neg needs a signed type, not {name}"
    return None


@rule("Sub", emits=["Add", "Neg"], when=_signed)
def sub_to_add_neg(rw, node):
    """before: Sub(x, y) ─► z          after: Add(x, Neg(y)) ─► z"""
    x, y = node.inputs
    rw.out("Add", [x, rw.emit("Neg", [y], dtype=y.dtype)])


@rule("Sub", emits=["Add", "Mul"], when=float_input)
def sub_to_add_mul(rw, node):
    """For targets without Neg.

    before: Sub(x, y) ─► z          after: Add(x, Mul(y, −1)) ─► z
    """
    x, y = node.inputs
    rw.out("Add", [x, rw.emit("Mul", [y, rw.scalar(-1.0)])])


@rule("Add", emits=["Sub"], when=_second_const)
def add_const_to_sub(rw, node):
    """Adding a constant is subtracting its negation, exactly (x − (−c) is x + c in IEEE
    arithmetic): for hardware that has Sub but no Add (TNN's RKNPU).

    before: x ─► Add(x, c) ─► y          after: x ─► Sub(x, −c) ─► y
    """
    x, c = node.inputs
    rw.out("Sub", [x, rw.const("neg", -const_input(node, 1), dtype=const_input(node, 1).dtype)])


@rule("Add", emits=["Sub", "Neg"], when=_signed)
def add_to_sub_neg(rw, node):
    """x + y is x − (−y), exactly: for hardware with Sub and Neg but no Add (a residual block's
    sum on TNN's RKNPU).

    before: Add(x, y) ─► z          after: Sub(x, Neg(y)) ─► z
    """
    x, y = node.inputs
    rw.out("Sub", [x, rw.emit("Neg", [y], dtype=y.dtype)])


def _float_const_divisor(node, graph):
    if const_input(node, 1) is None:
        return "divisor is not a constant"
    return float_input(node, graph)


@rule("Div", emits=["Mul"], when=_float_const_divisor)
def div_const_to_mul(rw, node):
    """Dividing by a float constant is multiplying by its reciprocal (rounding differs by ≤1 ulp).

    before: Div(x, c) ─► y          after: Mul(x, 1/c) ─► y
    """
    x, _ = node.inputs
    c = const_input(node, 1)
    with np.errstate(divide="ignore"):
        rw.out("Mul", [x, rw.const("recip", np.reciprocal(c), dtype=c.dtype)])


@rule("Neg", emits=["Mul"], when=float_input)
def neg_to_mul(rw, node):
    """before: Neg(x) ─► y          after: Mul(x, −1) ─► y"""
    rw.out("Mul", [node.inputs[0], rw.scalar(-1.0)])


@rule("Reciprocal", emits=["Div"], when=float_input)
def reciprocal_to_div(rw, node):
    """before: Reciprocal(x) ─► y          after: Div(1, x) ─► y"""
    rw.out("Div", [rw.scalar(1.0), node.inputs[0]])


@rule("Sqrt", emits=["Pow"], when=float_input)
def sqrt_to_pow(rw, node):
    """before: Sqrt(x) ─► y          after: Pow(x, 0.5) ─► y"""
    rw.out("Pow", [node.inputs[0], rw.scalar(0.5)])


def _small_integer_exponent(node, graph):
    e = const_input(node, 1)
    if e is None or e.size != 1:
        return "exponent is not a scalar constant"
    if float(e.reshape(())) not in (2.0, 3.0):
        return "exponent is not 2 or 3"
    return float_input(node, graph)


@rule("Pow", emits=["Mul"], when=all_of(_small_integer_exponent))
def pow_to_mul(rw, node):
    """Squares and cubes as products (the GELU-tanh form uses x³).

    before: Pow(x, 2) ─► y          after: Mul(x, x) ─► y     (Pow(x, 3): Mul(Mul(x, x), x))
    """
    x = node.inputs[0]
    if float(const_input(node, 1).reshape(())) == 2.0:
        rw.out("Mul", [x, x])
    else:
        rw.out("Mul", [rw.emit("Mul", [x, x]), x])


def _broadcast_first(node, graph):
    from ...matrix.patterns import width_broadcast_first

    return None if width_broadcast_first(node) else "the first operand is not a [1, 1, 1, W] broadcast over rows"


def _commute(op):
    @rule(op, emits=[op], when=_broadcast_first, name=f"{op.lower()}_operands_swapped")
    def swap(rw, node):
        """The broadcast operand second: the op commutes, bit for bit.

        before: Op(c[1, 1, 1, W], x[N, 1, H, W]) ─► y          after: Op(x, c) ─► y
        """
        rw.out(node.op, [node.inputs[1], node.inputs[0]])

    return swap


for _op in ("Add", "Mul", "Max", "Min"):
    _commute(_op)


@rule("Sub", emits=["Sub", "Neg"], when=all_of(_broadcast_first, _signed))
def sub_operands_swapped(rw, node):
    """a − b = −(b − a): rounding to nearest is symmetric in sign, so the values are equal (where
    a = b the result is −0 instead of +0); the broadcast operand second.

    before: Sub(c[1, 1, 1, W], x[N, 1, H, W]) ─► y          after: Neg(Sub(x, c)) ─► y
    """
    a, b = node.inputs
    rw.out("Neg", [rw.emit("Sub", [b, a], dtype=b.dtype)])
