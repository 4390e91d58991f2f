"""ONNX index, shape and generator ops -> TFLite builtins.

Kernels followed (tensorflow/tensorflow, tensorflow/lite/kernels/): gather_nd.cc (batch_dims 0,
indices must be in range: negative ONNX indices are wrapped here), scatter_nd.cc (scatters into
zeros and sums duplicates; int32 indices), one_hot.cc (an index outside [0, depth) gives an all-off
row), range.cc, shape.cc (out_type int32/int64), fill.cc, where.cc (WHERE(x) = coordinates of
non-zeros, [nnz, rank] int64, a dynamic output the interpreter resizes at run time).
These ops index ONNX axes, so they work in the ONNX (identity) layout.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import attr
from . import layout as L
from ._generated import schema_generated as fb
from .ops_logic import TFLITE_TYPE, dtype_of
from .registry import OPS
from .ops_tensor import positive_axis, builtin_options


def _plain(Lw, t) -> int:
    return Lw.get(t, L.identity(Lw.rank(t)))


def _indices_in_range(Lw, node, indices_t, dims, dtype=np.int64) -> int:
    """Index tensor with ONNX's negative indices wrapped (x < 0 -> x + dim): for a constant at
    export time, else FLOOR_MOD by the per-coordinate dims (exact on ONNX's valid range)."""
    value = Lw.const(indices_t)
    dims = np.asarray(dims, dtype=np.int64)
    if value is not None:
        value = np.asarray(value).astype(np.int64)
        return Lw.constant(f"{node.name}/indices", np.where(value < 0, value + dims, value).astype(dtype))
    idx = _plain(Lw, indices_t)
    if dtype_of(Lw, idx) != np.dtype(dtype):
        cast = Lw.temp(f"{node.name}/indices_cast", Lw.w.tensors[idx].shape, dtype)
        Lw.emit("CAST", [idx], [cast], builtin_options("CastOptions", inDataType=_type(dtype_of(Lw, idx)),
                                                 outDataType=_type(np.dtype(dtype))))
        idx = cast
    wrapped = Lw.temp(f"{node.name}/indices_wrapped", Lw.w.tensors[idx].shape, dtype)
    Lw.emit("FLOOR_MOD", [idx, Lw.constant(f"{node.name}/dims", dims.astype(dtype))], [wrapped],
            builtin_options("FloorModOptions"))
    return wrapped


def _type(dtype) -> int:
    return TFLITE_TYPE[np.dtype(dtype)]


@OPS.register("GatherND")
def lower_gather_nd(Lw, node):
    """GatherND (batch_dims=0) -> GATHER_ND."""
    data, indices = node.inputs[:2]
    if int(attr(node, "batch_dims", 0)) != 0:
        raise Lw.unsupported("GatherND with batch_dims != 0 is not mapped (GATHER_ND has no batch_dims)")
    depth = Lw.shape(indices)[-1]
    idx = _indices_in_range(Lw, node, indices, Lw.shape(data)[:depth])
    Lw.emit("GATHER_ND", [_plain(Lw, data), idx], [Lw.define(node.outputs[0], L.identity(Lw.rank(node.outputs[0])))])


@OPS.register("ScatterND")
def lower_scatter_nd(Lw, node):
    """ScatterND -> SCATTER_ND (which writes into zeros) merged with ``data``:

        reduction=none:  y = SELECT_V2(SCATTER_ND(idx, 1) > 0, SCATTER_ND(idx, updates), data)
        reduction=add:   y = data + SCATTER_ND(idx, updates)   (SCATTER_ND sums duplicates)
    """
    data, indices, updates = node.inputs[:3]
    reduction = attr(node, "reduction", "none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction not in ("none", "add"):
        raise Lw.unsupported(f"ScatterND reduction '{reduction}' is not mapped")
    shape = Lw.shape(data)
    rank = len(shape)
    depth = Lw.shape(indices)[-1]
    idx = _indices_in_range(Lw, node, indices, shape[:depth], np.int32)
    src = _plain(Lw, data)
    dtype = dtype_of(Lw, src)
    name = node.outputs[0].name
    shape_c = Lw.int32(f"{node.name}/shape", list(shape))
    scattered = Lw.temp(f"{name}/scattered", shape, dtype)
    Lw.emit("SCATTER_ND", [idx, _plain(Lw, updates), shape_c], [scattered], builtin_options("ScatterNdOptions"))
    out = Lw.define(node.outputs[0], L.identity(rank))
    if reduction == "add":
        Lw.emit("ADD", [src, scattered], [out], builtin_options("AddOptions"))
        return
    ones = Lw.constant(f"{node.name}/ones", np.ones(Lw.shape(updates), np.float32))
    hits, mask = Lw.temp(f"{name}/hits", shape), Lw.temp(f"{name}/mask", shape, np.bool_)
    Lw.emit("SCATTER_ND", [idx, ones, shape_c], [hits], builtin_options("ScatterNdOptions"))
    Lw.emit("GREATER", [hits, Lw.constant(f"{node.name}/zero", np.array(0.0, np.float32))], [mask],
            builtin_options("GreaterOptions"))
    Lw.emit("SELECT_V2", [mask, scattered, src], [out], builtin_options("SelectV2Options"))


@OPS.register("OneHot")
def lower_one_hot(Lw, node):
    """OneHot -> ONE_HOT (depth constant).  ONNX counts negative indices from ``depth``; ONE_HOT
    gives an all-off row for them, so they are shifted first (SELECT_V2 on index < 0)."""
    indices, depth_t, values_t = node.inputs[:3]
    depth, values = Lw.const(depth_t), Lw.const(values_t)
    if depth is None or values is None:
        raise Lw.unsupported("depth and values must be constants")
    depth = int(np.asarray(depth).reshape(()))
    values = np.asarray(values).reshape(-1)
    if values.dtype == np.float64:
        values = values.astype(np.float32)
    rank_out = Lw.rank(node.outputs[0])
    axis = positive_axis(int(attr(node, "axis", -1)), rank_out)
    value = Lw.const(indices)
    name = node.outputs[0].name
    if value is not None:
        value = np.asarray(value).astype(np.int64)
        idx = Lw.constant(f"{node.name}/indices", np.where(value < 0, value + depth, value).astype(np.int32))
    else:
        idx = _plain(Lw, indices)
        stored = Lw.w.tensors[idx].shape
        if dtype_of(Lw, idx) not in (np.int32, np.int64):  # ONNX allows float indices: truncate
            cast = Lw.temp(f"{name}/indices_int", stored, np.int64)
            Lw.emit("CAST", [idx], [cast], builtin_options("CastOptions", inDataType=_type(dtype_of(Lw, idx)),
                                                     outDataType=fb.TensorType.INT64))
            idx = cast
        itype = dtype_of(Lw, idx)
        negative, shifted, fixed = (Lw.temp(f"{name}/{k}", stored, d) for k, d in
                                    (("negative", np.bool_), ("shifted", itype), ("indices", itype)))
        Lw.emit("LESS", [idx, Lw.constant(f"{node.name}/zero", np.array(0, itype))], [negative],
                builtin_options("LessOptions"))
        Lw.emit("ADD", [idx, Lw.constant(f"{node.name}/depth_value", np.array(depth, itype))], [shifted],
                builtin_options("AddOptions"))
        Lw.emit("SELECT_V2", [negative, shifted, idx], [fixed], builtin_options("SelectV2Options"))
        idx = fixed
    Lw.emit("ONE_HOT", [idx, Lw.int32(f"{node.name}/depth", depth),
                        Lw.constant(f"{node.name}/on", values[1:2].reshape(())),
                        Lw.constant(f"{node.name}/off", values[0:1].reshape(()))],
            [Lw.define(node.outputs[0], L.identity(rank_out))], builtin_options("OneHotOptions", axis=axis))


@OPS.register("Range")
def lower_range(Lw, node):
    """Range -> RANGE (range.cc: start, limit, delta of one type; int64 needs version 2)."""
    out = Lw.define(node.outputs[0], (0,))
    dtype = dtype_of(Lw, out)
    ins = []
    for t in node.inputs[:3]:
        value = Lw.const(t)
        ins.append(Lw.constant(f"{node.name}/{t.name}", np.asarray(value, dtype).reshape(()))
                   if value is not None else Lw.get(t, ()))
    Lw.emit("RANGE", ins, [out], builtin_options("RangeOptions"))


@OPS.register("Shape")
def lower_shape(Lw, node):
    """Shape -> SHAPE (int64) of the stored tensor, then GATHER of the ONNX axes ``start:end`` in
    memory order (no GATHER when the layout is ONNX's and the whole shape is asked for)."""
    x = node.inputs[0]
    rank = Lw.rank(x)
    perm = Lw.home(x) or L.identity(rank)
    start = positive_axis(int(attr(node, "start", 0)), rank)
    end = attr(node, "end", None)
    end = rank if end is None else min(positive_axis(int(end), rank), rank)
    start = min(max(start, 0), rank)
    wanted = [L.position(perm, a) for a in range(start, max(end, start))]
    out = Lw.define(node.outputs[0], (0,))
    opts = builtin_options("ShapeOptions", outType=fb.TensorType.INT64)
    if wanted == list(range(rank)):
        Lw.emit("SHAPE", [Lw.get(x, perm)], [out], opts)
        return
    full = Lw.temp(f"{node.outputs[0].name}/stored", (rank,), np.int64)
    Lw.emit("SHAPE", [Lw.get(x, perm)], [full], opts)
    Lw.emit("GATHER", [full, Lw.int32(f"{node.name}/axes", wanted)], [out], builtin_options("GatherOptions", axis=0))


@OPS.register("ConstantOfShape")
def lower_constant_of_shape(Lw, node):
    """ConstantOfShape -> FILL(dims, value) (fill.cc; a bool value needs version 2)."""
    value = attr(node, "value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(getattr(value, "values", value))
    value = value.reshape(()).astype(np.float32 if value.dtype == np.float64 else value.dtype)
    dims_t = node.inputs[0]
    dims = Lw.const(dims_t)
    dims_i = Lw.int32(f"{node.name}/dims", np.asarray(dims).reshape(-1)) if dims is not None else _plain(Lw, dims_t)
    rank = Lw.rank(node.outputs[0])
    Lw.emit("FILL", [dims_i, Lw.constant(f"{node.name}/value", value)], [Lw.define(node.outputs[0], L.identity(rank))],
            builtin_options("FillOptions"))


@OPS.register("NonZero")
def lower_nonzero(Lw, node):
    """NonZero -> WHERE (coordinates [nnz, rank], int64) + TRANSPOSE to ONNX's [rank, nnz].

    The number of non-zeros is known only at run time: the file stores the shape ONNX inference
    gave and LiteRT resizes WHERE's output (and re-prepares the TRANSPOSE) when it runs."""
    x = node.inputs[0]
    rank, nnz = Lw.shape(node.outputs[0])
    coords = Lw.temp(f"{node.outputs[0].name}/coordinates", (nnz, rank), np.int64)
    Lw.emit("WHERE", [_plain(Lw, x)], [coords], builtin_options("WhereOptions"))
    Lw.emit("TRANSPOSE", [coords, Lw.int32(f"{node.name}/perm", [1, 0])], [Lw.define(node.outputs[0], (0, 1))],
            builtin_options("TransposeOptions"))
