"""Exp and Erf from the activations accelerators do have.

MACE's CPU has Sigmoid and Tanh but no Exp and no Erf (its ONNX converter comments Exp out), and
NNAPI has no Erf, no GELU and no Sign.  Exact-GELU transformers (torch's ``nn.GELU()`` exports
``x · (1 + Erf(x/√2)) / 2``) need an Erf on both:

* :func:`exp_via_sigmoid` — ``e^x = σ(x) / σ(−x)``, an identity (``σ(x)/σ(−x) = (1+e^x)/(1+e^−x)``),
  used where the exponent is ≤ 0 by construction (Erf's ``e^{−x²}``):
  there the divisor is in [0.5, 1] and the error is the Sigmoid kernel's own (~1e-7 absolute);
* :func:`erf_polynomial_minmax` — the Abramowitz & Stegun 7.1.26 polynomial of
  ``decompose.erf_polynomial`` without its Sign: ``m = 1 − P(t)·e^{−x²}`` approximates
  ``erf(|x|)`` and ``erf(x) = clamp(2x, −m, m)``, because ``|erf(x)| ≤ (2/√π)|x| < 2|x|``: the
  clamp picks ``±m`` except where ``m`` itself is below ``2|x|``, i.e. never beyond the
  polynomial's own error.  |error| ≤ 1.5e-7 (A&S) plus float32 rounding: bound 1e-6.
"""

from __future__ import annotations

from ...ir.graph import constant_value
from .base import APPROXIMATE, float_input, rule
from .decompose import erf_of_abs


def _square(t) -> bool:
    """``t`` is a·a (one tensor times itself) or a², so never negative."""
    p = t.inputs[0] if len(t.inputs) == 1 else None
    if p is None:
        return False
    if p.op == "Mul":
        return p.inputs[0] is p.inputs[1]
    if p.op == "Pow":
        e = constant_value(p.inputs[1])
        return e is not None and e.size == 1 and float(e.reshape(())) == 2.0
    return False


def _nonpositive(t) -> bool:
    """``t`` is ≤ 0 by construction: −a² or c·a² with a constant c ≤ 0 (Erf's e^{−x²}).  A
    softmax's ``a − max(a)`` would qualify too, but a target without Exp keeps its Softmax whole
    (or in post-processing) rather than spelled in Sigmoids."""
    p = t.inputs[0] if len(t.inputs) == 1 else None
    if p is None:
        return False
    if p.op == "Neg":
        return _square(p.inputs[0])
    if p.op == "Mul":
        for sq, c in ((p.inputs[0], p.inputs[1]), (p.inputs[1], p.inputs[0])):
            value = constant_value(c)
            if value is not None and value.size == 1 and float(value.reshape(())) <= 0 and _square(sq):
                return True
        return False
    return False


def _exp_of_nonpositive(node, graph):
    if not _nonpositive(node.inputs[0]):
        return "the exponent is not ≤ 0 by construction (−a², c·a² with c ≤ 0)"
    return float_input(node, graph)


@rule("Exp", emits=["Sigmoid", "Neg", "Div"], kind=APPROXIMATE, error_bound=1e-6, when=_exp_of_nonpositive)
def exp_via_sigmoid(rw, node):
    """e^x = σ(x) / σ(−x) for x ≤ 0 (MACE has Sigmoid, no Exp).

    before: x ─► Exp ─► y                       (x ≤ 0: −a², as in Erf's e^{−x²})
    after:  x ─► Sigmoid ─► s ─┐
            x ─► Neg ─► Sigmoid ─► Div(s, ·) ─► y
    An identity, but runtimes' Sigmoid is accurate to ~1e-7 absolute only (onnxruntime's gives 0
    below −18): for x ≤ 0 the quotient's divisor is in [0.5, 1], so |error| ≤ 2·that: bound 1e-6.
    For x > 0 the divisor would be the inaccurate tail, hence the condition.
    """
    x = node.inputs[0]
    rw.out("Div", [rw.emit("Sigmoid", [x]), rw.emit("Sigmoid", [rw.emit("Neg", [x])])])


@rule("Erf", emits=["Abs", "Mul", "Add", "Div", "Exp", "Max", "Min", "Neg"], kind=APPROXIMATE,
      error_bound=1e-6, when=float_input)
def erf_polynomial_minmax(rw, node):
    """Erf without Sign (NNAPI, MACE): A&S 7.1.26 for erf(|x|), the sign restored by a clamp.

    before: Erf(x) ─► y
    after:  t = 1 / (1 + p·|x|);  m = 1 − t·(a1 + t·(a2 + … + t·a5)) · Exp(−x²)
            y = Min(Max(2x, −m), m)         (|error| ≤ 1.5e-7 + float32 rounding)
    """
    x = node.inputs[0]
    m = erf_of_abs(rw, x)
    low = rw.emit("Max", [rw.emit("Mul", [x, rw.scalar(2.0)]), rw.emit("Neg", [m])])
    rw.out("Min", [low, m])
