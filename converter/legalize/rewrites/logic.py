"""Predicates written with the comparisons and logic a target has.

torch's ONNX exporters write ``Where(IsNaN(softmax), 0, softmax)`` after the softmax of every
``scaled_dot_product_attention`` with a boolean mask (a fully masked row is 0, not NaN): every
HuggingFace encoder's attention.  TFLite and CoreML have no IsNaN, but both compare and negate.
"""

from __future__ import annotations

import numpy as np

from .base import APPROXIMATE, const_input, float_input, rule


@rule("IsNaN", emits=["Equal", "Not"], when=float_input)
def isnan_as_not_equal_self(rw, node):
    """NaN is the one float value not equal to itself (IEEE 754), so this is exact for every
    input, infinities included.

    before: x ─► IsNaN ─► y          after: x ─► Equal(x, x) ─► Not ─► y
    """
    x = node.inputs[0]
    rw.out("Not", [rw.emit("Equal", [x, x], dtype=np.bool_)])


#: Ops that make attention scores from the query and key alone (no additive mask in between).
_SCORE_OPS = {"MatMul", "Mul", "Div", "Transpose", "Reshape"}


def _unmasked_softmax_nan_guard(node, graph):
    """``Where(IsNaN(p), 0, p)`` with ``p = Softmax(scores)`` and scores made by MatMul/Mul/Div
    alone; None when it is, else why not."""
    cond, _, p = node.inputs
    check = cond.inputs[0] if cond.inputs else None
    if check is None or check.op != "IsNaN" or check.inputs[0] is not p:
        return "not Where(IsNaN(p), 0, p)"
    zero = const_input(node, 1)
    if zero is None or zero.size != 1 or float(zero.reshape(-1)[0]) != 0.0:
        return "the replacement of NaN is not a constant 0"
    softmax = p.inputs[0] if p.inputs else None
    if softmax is None or softmax.op != "Softmax":
        return "the guarded tensor is not a Softmax output"
    scores = softmax.inputs[0].inputs[0] if softmax.inputs[0].inputs else None
    if scores is not None and scores.op == "Add" and _product_plus_finite_mask(scores):
        return None
    if scores is None or scores.op not in _SCORE_OPS:
        return ("the softmax reads more than a product of query and key, or a finite mask added to it (an "
                "additive mask of -inf makes fully masked rows NaN, which the guard turns into 0)")
    return None


def _product_plus_finite_mask(add) -> bool:
    """``scores + mask``: scores made by MatMul/Mul/Div alone, the mask a ``Where`` of two finite
    constant scalars (HF's ``Where(m, 0, finfo.min)``) or a ``Clip`` to finite constants (what
    :mod:`.bool_mask` makes of that Where)."""
    made_by = [t.inputs[0] if t.inputs else None for t in add.inputs]
    if len(made_by) != 2:
        return False
    for product, mask in (made_by, made_by[::-1]):
        if product is None or product.op not in _SCORE_OPS or mask is None:
            continue
        bounds = ([const_input(mask, 1), const_input(mask, 2)] if mask.op in ("Where", "Clip") else [None])
        if all(b is not None and b.size == 1 and np.isfinite(b).all() for b in bounds):
            return True
    return False


@rule("Where", emits=["Identity"], kind=APPROXIMATE, error_bound=0.0, when=_unmasked_softmax_nan_guard)
def softmax_nan_guard_dropped(rw, node):
    """torch's SDPA decomposition guards every softmax with ``Where(IsNaN(p), 0, p)``, for rows a
    boolean mask hides entirely.  Without a mask (ViT, Whisper's encoder) the scores are products
    of finite query and key values, whose softmax is never NaN: the guard is the identity.  So it
    is with a finite additive mask (HF's encoders add ``finfo.min``, not -inf): a fully masked
    row is finite, and its softmax too.  The guard differs only where a score is itself +inf or
    NaN (an overflowed product) or the sum of score and mask overflows, so it is filed as
    approximate, with no error on finite sums, and is chosen only where the target has no
    IsNaN/Equal/Where (TNN, MACE).

    before: Softmax ─► p ─► IsNaN ─► Where(·, 0, p) ─► y          after: Softmax ─► p ─► Identity ─► y
    """
    rw.out("Identity", [node.inputs[2]])
