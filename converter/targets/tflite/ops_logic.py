"""ONNX comparisons, logic, selection, casts, arg/top-k, cumulative and n-ary ops -> TFLite builtins.

Kernels followed (tensorflow/tensorflow, tensorflow/lite/kernels/): comparisons.cc (EQUAL, LESS,
GREATER, ... broadcast, bool output), logical.cc, select.cc (SELECT_V2 broadcasts all three
inputs), cast.cc (static_cast: float -> int truncates toward zero, like ONNX Cast), arg_min_max.cc
(first index of the extremum; output_type int32/int64), topk_v2.cc (innermost axis, sorted,
indices int32), cumsum.cc (exclusive/reverse flags), add_n.cc (same-shape inputs only).
Like ``ops_tensor``, every op works in the layout its data already has.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...ir.graph import attr
from . import layout as L
from ._generated import schema_generated as fb
from .registry import OPS
from .ops_tensor import SubNode, builtin_options, input_for, layout_of, positive_axis, unary

#: numpy dtype -> schema TensorType, for CAST/ARG_MAX/SHAPE options.
TFLITE_TYPE = {np.dtype(np.float32): fb.TensorType.FLOAT32, np.dtype(np.int32): fb.TensorType.INT32,
               np.dtype(np.int64): fb.TensorType.INT64, np.dtype(np.bool_): fb.TensorType.BOOL,
               np.dtype(np.float16): fb.TensorType.FLOAT16, np.dtype(np.int8): fb.TensorType.INT8,
               np.dtype(np.uint8): fb.TensorType.UINT8}


def dtype_of(Lw, index: int) -> np.dtype:
    return Lw.w.tensors[index].dtype


def perm_of(Lw, t) -> tuple[int, ...]:
    return Lw.home(t) or L.identity(Lw.rank(t))


def nary(builtin: str, options: str | None):
    """An n-ary element-wise op (Where: 3 inputs) with numpy broadcasting, in the data's layout."""

    def lower(Lw, node):
        out_t = node.outputs[0]
        rank = Lw.rank(out_t)
        perm = layout_of(Lw, node.inputs, rank)
        ins = [input_for(Lw, t, rank, perm) for t in node.inputs]
        Lw.emit(builtin, ins, [Lw.define(out_t, perm)], builtin_options(options) if options else None)

    lower.__doc__ = f"-> {builtin} (broadcasting, any layout)."
    return lower


def chain(builtin: str, options: str | None):
    """Sum/Max/Min/Mean with any number of inputs -> a left fold of the binary builtin (broadcasting).

    ``Sum`` of equal-shape inputs is one ADD_N (add_n.cc needs equal shapes)."""

    def lower(Lw, node):
        out_t = node.outputs[0]
        rank = Lw.rank(out_t)
        perm = layout_of(Lw, node.inputs, rank)
        ins = [input_for(Lw, t, rank, perm) for t in node.inputs]
        out = Lw.define(out_t, perm)
        if len(ins) == 1:
            Lw.reshape_to(ins[0], out, Lw.w.tensors[out].shape)
            return
        shapes = {Lw.w.tensors[i].shape for i in ins}
        if builtin == "ADD" and len(ins) > 2 and shapes == {Lw.w.tensors[out].shape}:
            Lw.emit("ADD_N", ins, [out], builtin_options("AddNOptions"))
            return
        acc = ins[0]
        for k, nxt in enumerate(ins[1:], 1):
            last = k == len(ins) - 1
            shape = np.broadcast_shapes(Lw.w.tensors[acc].shape, Lw.w.tensors[nxt].shape)
            dst = out if last else Lw.temp(f"{out_t.name}/partial{k}", shape, dtype_of(Lw, out))
            Lw.emit(builtin, [acc, nxt], [dst], builtin_options(options) if options else None)
            acc = dst

    return lower


@OPS.register("Mean")
def lower_mean(Lw, node):
    """Mean(x1..xn) -> ADD_N / ADD chain, then MUL by 1/n."""
    out_t = node.outputs[0]
    rank = Lw.rank(out_t)
    perm = layout_of(Lw, node.inputs, rank)
    total_t = gs.Variable(f"{out_t.name}/sum", dtype=out_t.dtype, shape=Lw.shape(out_t))
    sum_node = SubNode("Sum", f"{node.name}/sum", list(node.inputs), [total_t])
    chain("ADD", "AddOptions")(Lw, sum_node)
    scale = Lw.constant(f"{node.name}/inv_n", np.array(1.0 / len(node.inputs), np.float32))
    Lw.emit("MUL", [Lw.get(total_t, perm), scale], [Lw.define(out_t, perm)], builtin_options("MulOptions"))


@OPS.register("Xor")
def lower_xor(Lw, node):
    """Xor on bools = NOT_EQUAL (comparisons.cc accepts bool)."""
    nary("NOT_EQUAL", "NotEqualOptions")(Lw, node)


@OPS.register("Cast")
def lower_cast(Lw, node):
    """Cast -> CAST (cast.cc: static_cast per element, float -> int truncates like ONNX)."""
    x = node.inputs[0]
    perm = perm_of(Lw, x)
    src = Lw.get(x, perm)
    out = Lw.define(node.outputs[0], perm)
    src_t, out_t = dtype_of(Lw, src), dtype_of(Lw, out)
    if src_t not in TFLITE_TYPE or out_t not in TFLITE_TYPE:
        raise Lw.unsupported(f"Cast {src_t} -> {out_t} has no TFLite tensor type")
    Lw.emit("CAST", [src], [out],
            builtin_options("CastOptions", inDataType=TFLITE_TYPE[src_t], outDataType=TFLITE_TYPE[out_t]))


@OPS.register("ArgMax", "ArgMin")
def lower_arg(Lw, node):
    """ArgMax/ArgMin -> ARG_MAX/ARG_MIN (int64 output), then RESHAPE for keepdims=1.

    ``select_last_index=1`` reverses the axis first (REVERSE_V2) and maps i -> n-1-i."""
    x = node.inputs[0]
    rank = Lw.rank(x)
    axis = positive_axis(int(attr(node, "axis", 0)), rank)
    keep = bool(attr(node, "keepdims", 1))
    perm = perm_of(Lw, x)
    pos = L.position(perm, axis)
    src = Lw.get(x, perm)
    stored = Lw.w.tensors[src].shape
    name = node.outputs[0].name
    last = bool(attr(node, "select_last_index", 0))
    if last:
        rev = Lw.temp(f"{name}/reversed", stored, dtype_of(Lw, src))
        Lw.emit("REVERSE_V2", [src, Lw.int32(f"{node.name}/axis_list", [pos])], [rev],
                builtin_options("ReverseV2Options"))
        src = rev
    dropped_perm = L.drop_axes(perm, [axis])
    reduced = tuple(d for i, d in enumerate(stored) if i != pos)
    builtin = "ARG_MAX" if node.op == "ArgMax" else "ARG_MIN"
    opts = builtin_options("ArgMaxOptions" if builtin == "ARG_MAX" else "ArgMinOptions", outputType=fb.TensorType.INT64)
    direct = not keep and not last
    idx = Lw.define(node.outputs[0], dropped_perm) if direct else Lw.temp(f"{name}/index", reduced, np.int64)
    Lw.emit(builtin, [src, Lw.int32(f"{node.name}/axis", [pos])], [idx], opts)
    if direct:
        return
    if last:
        flipped = Lw.temp(f"{name}/index_last", reduced, np.int64)
        Lw.emit("SUB", [Lw.constant(f"{node.name}/n_minus_1", np.array(stored[pos] - 1, np.int64)), idx], [flipped],
                builtin_options("SubOptions"))
        idx = flipped
    out = Lw.define(node.outputs[0], perm if keep else dropped_perm)
    Lw.reshape_to(idx, out, Lw.w.tensors[out].shape)


@OPS.register("TopK")
def lower_topk(Lw, node):
    """TopK -> TOPK_V2 on the innermost stored axis (layout chosen so ``axis`` is innermost, as for
    Softmax); indices int32 -> CAST int64.  ``largest=0``: TOPK_V2 of -x, values negated back."""
    x, k_t = node.inputs[:2]
    rank = Lw.rank(x)
    axis = positive_axis(int(attr(node, "axis", -1)), rank)
    k = Lw.const(k_t)
    if k is None:
        raise Lw.unsupported("K must be a constant")
    perm = perm_of(Lw, x)
    if perm[-1] != axis:
        perm = L.axis_last(perm, axis)
    src = Lw.get(x, perm)
    values_t, indices_t = node.outputs[:2]
    largest = bool(attr(node, "largest", 1))
    name = values_t.name
    stored_out = L.stored_shape(Lw.shape(values_t), perm)
    if not largest:
        neg = Lw.temp(f"{name}/negated_input", Lw.w.tensors[src].shape, dtype_of(Lw, src))
        Lw.emit("NEG", [src], [neg])
        src = neg
    values = Lw.define(values_t, perm) if largest else Lw.temp(f"{name}/negated", stored_out, dtype_of(Lw, src))
    idx32 = Lw.temp(f"{indices_t.name or name}/int32", stored_out, np.int32)
    Lw.emit("TOPK_V2", [src, Lw.int32(f"{node.name}/k", int(np.asarray(k).reshape(())))], [values, idx32],
            builtin_options("TopKV2Options"))
    if not largest:
        Lw.emit("NEG", [values], [Lw.define(values_t, perm)])
    if indices_t.name:
        Lw.emit("CAST", [idx32], [Lw.define(indices_t, perm)],
                builtin_options("CastOptions", inDataType=fb.TensorType.INT32, outDataType=fb.TensorType.INT64))


@OPS.register("CumSum")
def lower_cumsum(Lw, node):
    """CumSum -> CUMSUM over the stored position of ``axis`` (cumsum.cc: exclusive, reverse)."""
    x, axis_t = node.inputs[:2]
    axis = Lw.const(axis_t)
    if axis is None:
        raise Lw.unsupported("axis must be a constant")
    perm = perm_of(Lw, x)
    pos = L.position(perm, positive_axis(int(np.asarray(axis).reshape(())), Lw.rank(x)))
    Lw.emit("CUMSUM", [Lw.get(x, perm), Lw.int32(f"{node.name}/axis", pos)], [Lw.define(node.outputs[0], perm)],
            builtin_options("CumsumOptions", exclusive=bool(attr(node, "exclusive", 0)),
                            reverse=bool(attr(node, "reverse", 0))))


COMPARISONS = {"Equal": ("EQUAL", "EqualOptions"), "Greater": ("GREATER", "GreaterOptions"),
               "Less": ("LESS", "LessOptions"), "GreaterOrEqual": ("GREATER_EQUAL", "GreaterEqualOptions"),
               "LessOrEqual": ("LESS_EQUAL", "LessEqualOptions"), "And": ("LOGICAL_AND", "LogicalAndOptions"),
               "Or": ("LOGICAL_OR", "LogicalOrOptions")}

for _op, (_builtin, _options) in COMPARISONS.items():
    OPS.register(_op)(nary(_builtin, _options))
OPS.register("Where")(nary("SELECT_V2", "SelectV2Options"))
OPS.register("Max")(chain("MAXIMUM", "MaximumMinimumOptions"))
OPS.register("Min")(chain("MINIMUM", "MaximumMinimumOptions"))
OPS.register("Sum")(chain("ADD", "AddOptions"))
OPS.register("Not")(unary("LOGICAL_NOT"))
