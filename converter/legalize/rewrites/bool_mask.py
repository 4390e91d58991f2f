"""Boolean attention masks as float arithmetic, for targets without bool tensors or Where.

HuggingFace encoders (DistilBERT, BERT, MobileBERT) exported by torch build their additive
attention mask with boolean logic on the int64 ``attention_mask`` input::

    attention_mask ─► Cast(to=bool) ─► GatherND(·, const) ─► And(const, ·) ─► Where(·, 0, finfo.min)

TNN's x86/ARM and MACE's CPU kernels have no bool tensors and no Where, so every node of it was
a custom layer.  On {0, 1} values the same logic is arithmetic: a nonzero integer is
``min(|x|, 1)``, And is Mul, Or is Max, Not is ``1 - x``, a GatherND with constant indices is a
Gather of the flattened data, and ``Where(c, x, y)`` with finite constant branches is
``c * x + (1 - c) * y``.  Every step is exact on those values (a product with 0 or 1, a sum
with 0), and the branches are finite, so no ``0 * inf`` appears; a Where with an infinite
branch (torch's own ``Where(mask, 0, -inf)``) is left alone.  The last node is a Clip to the
two branches: the identity on the mask's values, it shows the mask's bounds to the rule that
drops the NaN guard after the softmax (:mod:`.logic`), whatever order the two run in.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...ir.graph import constant_value, dtype_name
from .base import CONTEXT_RADIUS, const_input, rule

_INTEGER = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_F32 = np.float32


def _mask_why_not(t: gs.Tensor, depth: int) -> str | None:
    """None when the bool tensor ``t`` is made of what the rewrite covers within ``depth`` nodes."""
    if constant_value(t) is not None:
        return None
    producer = t.inputs[0] if t.inputs else None
    if producer is None:
        return f"the condition reads the boolean graph input {t.name}"
    if depth == 0:
        return "the condition is built further away than a rule looks"
    op = producer.op
    if op == "Cast":
        if dtype_name(producer.inputs[0]) not in _INTEGER:
            return f"the condition casts a {dtype_name(producer.inputs[0])} tensor to bool"
        return None
    if op in ("And", "Or", "Not"):
        return next((w for w in (_mask_why_not(i, depth - 1) for i in producer.inputs) if w), None)
    if op == "GatherND":
        data, indices = producer.inputs[:2]
        shape = data.shape
        if producer.attrs.get("batch_dims", 0) != 0 or constant_value(indices) is None:
            return "a GatherND in the condition has batch dims or indices computed at run time"
        if not shape or not all(isinstance(d, int) for d in shape) or indices.shape[-1] != len(shape):
            return "a GatherND in the condition does not pick single elements of a static tensor"
        return _mask_why_not(data, depth - 1)
    return f"the condition is computed by {op}"


def _bool_mask_select(node: gs.Node, graph: gs.Graph) -> str | None:
    """``Where(cond, x, y)``: cond a mask expression, x and y finite float32 scalars."""
    branches = [const_input(node, 1), const_input(node, 2)]
    if any(b is None or b.size != 1 or b.dtype != _F32 for b in branches):
        return "the branches are not float32 constant scalars"
    if not all(np.isfinite(b).all() for b in branches):
        return "a branch is infinite (c * inf is NaN where c is 0)"
    if dtype_name(node.inputs[0]) != "bool":
        return "the condition is not a bool tensor"
    return _mask_why_not(node.inputs[0], CONTEXT_RADIUS)


def _as_float(rw, t: gs.Tensor) -> gs.Tensor:
    """``t`` (bool) as a float32 tensor of 0 and 1."""
    value = constant_value(t)
    if value is not None:
        return rw.const("mask", value.astype(_F32), dtype=_F32)
    producer = t.inputs[0]
    if producer.op == "Cast":  # a nonzero integer is True
        number = rw.emit("Cast", [producer.inputs[0]], {"to": onnx.TensorProto.FLOAT}, dtype=_F32)
        return rw.emit("Min", [rw.emit("Abs", [number], dtype=_F32), rw.const("one", 1.0, dtype=_F32)], dtype=_F32)
    if producer.op == "Not":
        return rw.emit("Sub", [rw.const("one", 1.0, dtype=_F32), _as_float(rw, producer.inputs[0])], dtype=_F32)
    if producer.op in ("And", "Or"):
        a, b = (_as_float(rw, i) for i in producer.inputs)
        return rw.emit("Mul" if producer.op == "And" else "Max", [a, b], dtype=_F32)
    data, indices = producer.inputs[:2]  # GatherND of single elements: a Gather of the flat data
    shape = tuple(data.shape)
    picked = np.mod(constant_value(indices).astype(np.int64), shape)  # negative indices count back
    flat = np.ravel_multi_index(tuple(np.moveaxis(picked, -1, 0)), shape)
    values = rw.reshape(_as_float(rw, data), [-1])
    return rw.emit("Gather", [values, rw.const("index", flat, dtype=np.int64)], {"axis": 0}, dtype=_F32)


@rule("Where", emits=["Cast", "Abs", "Min", "Max", "Sub", "Mul", "Add", "Reshape", "Gather", "Clip"],
      when=_bool_mask_select)
def bool_mask_as_arithmetic(rw, node):
    """The mask logic on {0, 1} floats (module docstring); exact.

    before: mask ─► Cast(bool) ─► GatherND ─► And(k, ·) ─► Where(·, 0, y) ─► m
    after:  mask ─► Cast(float) ─► Abs ─► Min(·, 1) ─► Reshape ─► Gather ─► Mul(k, ·) ─► c
            c ─► Sub(1, ·) ─► Mul(·, y) ─► Clip(y, 0) ─► m
    """
    x, y = (float(const_input(node, i).reshape(())) for i in (1, 2))
    c = _as_float(rw, node.inputs[0])
    # c * x + (1 - c) * y, without the terms whose branch is 0 (HF's x): a term of 0 adds nothing
    terms = [rw.emit("Mul", [c, rw.const("x", x, dtype=_F32)], dtype=_F32)] if x != 0.0 or y == 0.0 else []
    if y != 0.0:
        rest = rw.emit("Sub", [rw.const("one", 1.0, dtype=_F32), c], dtype=_F32)
        terms.append(rw.emit("Mul", [rest, rw.const("y", y, dtype=_F32)], dtype=_F32))
    value = terms[0] if len(terms) == 1 else rw.emit("Add", terms, dtype=_F32)
    rw.clip(value, min(x, y), max(x, y), outputs=rw.outputs[:1])
