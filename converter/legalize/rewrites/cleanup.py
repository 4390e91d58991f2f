"""Nodes that compute nothing at inference: removed, their readers rewired to their input."""

from __future__ import annotations

import numpy as np
import onnx

from .base import all_of, can_bypass, const_input, present, rule, used_outputs
from ...ir.graph import dtype_name


@rule("Identity", emits=[], when=can_bypass, cost=0)
def remove_identity(rw, node):
    """before: x ─► Identity ─► y ─► …          after: x ─► …"""
    rw.bypass(node.inputs[0])


def _inference_dropout(node, graph):
    if present(node, 2):
        mode = const_input(node, 2)
        if mode is None or bool(mode.reshape(())):
            return "training_mode is on or not constant"
    if any(i > 0 for i in used_outputs(node, graph)):
        return "the dropout mask is used"
    return can_bypass(node, graph)


@rule("Dropout", emits=[], when=_inference_dropout, cost=0)
def remove_dropout(rw, node):
    """At inference Dropout is the identity.

    before: x ─► Dropout ─► y ─► …          after: x ─► …
    """
    rw.bypass(node.inputs[0])


def _noop_cast(node, graph):
    src = dtype_name(node.inputs[0])
    to = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(node.attrs["to"]))).name
    if src is None or to is None or src != to:
        return f"Cast changes the type ({src} -> {to})"
    return can_bypass(node, graph)


@rule("Cast", emits=[], when=all_of(_noop_cast), cost=0)
def remove_noop_cast(rw, node):
    """A Cast to the type its input already has does not change a value.

    before: x:float32 ─► Cast(to=float32) ─► y ─► …          after: x ─► …
    """
    rw.bypass(node.inputs[0])
