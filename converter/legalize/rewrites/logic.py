"""Predicates written with the comparisons and logic a target has.

torch's ONNX exporters write ``Where(IsNaN(softmax), 0, softmax)`` after the softmax of every
``scaled_dot_product_attention`` with a boolean mask (a fully masked row is 0, not NaN): every
HuggingFace encoder's attention.  TFLite and CoreML have no IsNaN, but both compare and negate.
"""

from __future__ import annotations

import numpy as np

from .base import float_input, rule


@rule("IsNaN", emits=["Equal", "Not"], when=float_input)
def isnan_as_not_equal_self(rw, node):
    """NaN is the one float value not equal to itself (IEEE 754), so this is exact for every
    input, infinities included.

    before: x ─► IsNaN ─► y          after: x ─► Equal(x, x) ─► Not ─► y
    """
    x = node.inputs[0]
    rw.out("Not", [rw.emit("Equal", [x, x], dtype=np.bool_)])
