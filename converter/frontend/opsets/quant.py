"""QuantizeLinear and DequantizeLinear of opsets 19-28: the float8 attributes dropped,
``output_dtype`` and ``precision`` checked, 4-bit weights widened to 8 bits, and blocked
quantization (``block_size``, opset 21) spelled with its scales repeated over each block."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...ir.graph import attr, constant_value, dtype_name
from .base import Unadaptable, adapter, check_types, is_absent, positive_axes, rank_of, shape_of

_RANGES = {"uint8": (0, 255), "int8": (-128, 127)}


@adapter("DequantizeLinear", 19, 21, 23, 24, 25, 28)
def dequantize_of_13(rw, node: gs.Node) -> None:
    """DequantizeLinear-19+ → -13: 4-bit constants widened to 8 bits (the same integers);
    ``output_dtype`` must be the scale's (float32); ``block_size`` > 0 spelled out.

    before: x ─► DequantizeLinear(x, scale, zero_point; axis, block_size=0) ─► y
    after:  x ─► DequantizeLinear(x, scale, zero_point; axis) ─► y

    before: x[…, K, …] ─► DequantizeLinear(x, scale[…, K/b, …], zp; axis, block_size=b) ─► y
    after:  Mul(Sub(Cast(x, float), zp repeated b times on axis), scale repeated b times on axis) ─► y
    """
    _widen_4bit(rw, node)
    out = int(node.attrs.pop("output_dtype", 0))
    if out not in (0, onnx.TensorProto.FLOAT):
        raise Unadaptable(f"output_dtype={onnx.TensorProto.DataType.Name(out)} (opset 13 dequantizes to float32 only)")
    block = int(node.attrs.pop("block_size", 0))
    if not block:
        check_types(node, 13)
        return
    x, scale = node.inputs[:2]
    axis = positive_axes([int(attr(node, "axis", 1))], rank_of(x))[0]
    size = shape_of(x)[axis]
    floats = rw.emit("Cast", [x], {"to": onnx.TensorProto.FLOAT}, dtype=np.float32)
    zero = _blocked(node, 2, axis, block, size)
    shifted = floats if zero is None else rw.emit("Sub", [floats, rw.const("zero_point", zero.astype(np.float32))])
    rw.out("Mul", [shifted, rw.const("scale", _blocked(node, 1, axis, block, size, what="scale"))])


@adapter("QuantizeLinear", 19, 21, 23, 24, 25, 28)
def quantize_of_13(rw, node: gs.Node) -> None:
    """QuantizeLinear-19+ → -13: ``saturate`` (float8 only) dropped; ``output_dtype`` must be
    the zero point's (uint8 or int8); ``precision`` the default; ``block_size`` > 0 spelled out.

    before: x ─► QuantizeLinear(x, scale, zero_point; axis, block_size=0) ─► y
    after:  x ─► QuantizeLinear(x, scale, zero_point; axis) ─► y

    before: x ─► QuantizeLinear(x, scale[…, K/b, …], zp; axis, block_size=b) ─► y
    after:  Cast(Clip(Add(Round(Div(x, scale repeated)), zp repeated), lo, hi), to=zp's type) ─► y
    """
    node.attrs.pop("saturate", None)
    if int(node.attrs.pop("precision", 0)):
        raise Unadaptable(f"precision={attr(node, 'precision')} (opset 13 divides in the scale's type)")
    kind = _quantized_type(node)
    block = int(node.attrs.pop("block_size", 0))
    if not block:
        check_types(node, 13)
        return
    x = node.inputs[0]
    axis = positive_axes([int(attr(node, "axis", 1))], rank_of(x))[0]
    size = shape_of(x)[axis]
    lo, hi = _RANGES[kind]
    q = rw.emit("Round", [rw.emit("Div", [x, rw.const("scale", _blocked(node, 1, axis, block, size, what="scale"))])])
    zero = _blocked(node, 2, axis, block, size)
    if zero is not None:
        q = rw.emit("Add", [q, rw.const("zero_point", zero.astype(np.float32))])
    clipped = rw.clip(q, float(lo), float(hi))
    rw.out("Cast", [clipped], {"to": onnx.helper.np_dtype_to_tensor_dtype(np.dtype(kind))})


def _quantized_type(node: gs.Node) -> str:
    """uint8 or int8: the zero point's type, or ``output_dtype``'s (uint8 without either)."""
    out = int(node.attrs.pop("output_dtype", 0))
    zero = node.inputs[2] if len(node.inputs) > 2 and not is_absent(node.inputs[2]) else None
    kind = dtype_name(zero) if zero is not None else (
        np.dtype(onnx.helper.tensor_dtype_to_np_dtype(out)).name if out else "uint8")
    if out and np.dtype(onnx.helper.tensor_dtype_to_np_dtype(out)).name != kind:
        raise Unadaptable(f"output_dtype={onnx.TensorProto.DataType.Name(out)} differs from the zero point's {kind}")
    if kind not in _RANGES:
        raise Unadaptable(f"quantizes to {kind} (opset 13 quantizes to uint8 and int8 only)")
    return kind


def _widen_4bit(rw, node: gs.Node) -> None:
    """int4/uint4 constants (the weights and zero point DequantizeLinear reads) as int8/uint8."""
    for i in (0, 2):
        if i >= len(node.inputs) or is_absent(node.inputs[i]):
            continue
        name = dtype_name(node.inputs[i]) or ""
        if name in ("int4", "uint4"):
            value = constant_value(node.inputs[i])
            if value is None:
                raise Unadaptable(f"its {name} input '{node.inputs[i].name}' is computed at run time")
            wide = np.int8 if name == "int4" else np.uint8
            node.inputs[i] = rw.const("widened", np.asarray(value).astype(wide), dtype=wide)


def _blocked(node: gs.Node, index: int, axis: int, block: int, size: int, what: str = "zero point"):
    """Input ``index`` (a constant scale or zero point) repeated ``block`` times along ``axis``
    and cut to ``size``; None when the input is absent."""
    if index >= len(node.inputs) or is_absent(node.inputs[index]):
        return None
    value = constant_value(node.inputs[index])
    if value is None:
        raise Unadaptable(f"blocked quantization with a {what} computed at run time")
    return np.take(np.repeat(np.asarray(value), block, axis=axis), np.arange(size), axis=axis)
