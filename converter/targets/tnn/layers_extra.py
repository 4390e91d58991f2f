"""Layers for the rest of the op-support matrix: type casts, comparisons and selection, index
ops, shape queries, LRN, Reorg (depth/space), RoiAlign, GridSample, Einsum, BitShift.

Parameter lists follow ``source/tnn/interpreter/tnn/layer_interpreter/<x>_layer_interpreter.cc``
(Tencent/TNN, commit f0cb081); the restrictions written here come from the layer
(``source/tnn/layer/<x>_layer.cc``) and CPU kernel (``source/tnn/device/cpu/acc/cpu_<x>_layer_acc.cc``)
of the same commit: an ONNX case TNN computes differently is refused, never approximated.
Integer tensors are int32 blobs and booleans int8 blobs (``context.TNN_DTYPES``).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from .context import ExportContext
from .layer_types import DATA_FLOAT, DATA_INT8, DATA_INT32, DATA_UINT32
from .registry import OPS

# -- no layer at all (Constant: see registry.py) ----------------------------------------------------


@OPS.register("Identity")
def identity(ctx: ExportContext, node: gs.Node) -> None:
    """No layer: the output is another name for the input blob.  TNN's ``LAYER_IDENTITY`` (101) has
    a type string (layer_type.cc) but no Layer and no kernel on any device."""
    src, out = node.inputs[0], node.outputs[0]
    if ctx.const(src) is not None:
        raise ctx.unsupported("Identity of a constant (fold constants first)")
    ctx.blob_names.by_original[out.name] = ctx.blob(src)


# -- types ----------------------------------------------------------------------------------------

#: ONNX TensorProto.DataType -> TNN DataType of the result (int64 is computed as int32).
_CAST_TO = {1: DATA_FLOAT, 6: DATA_INT32, 7: DATA_INT32, 3: DATA_INT8, 9: DATA_INT8, 12: DATA_UINT32}
#: (from, to) pairs cpu_cast_layer_acc.cc converts (same type is a copy); any other pair only logs
#: "unsupport data type to cast" and leaves the output unwritten.
_CAST_PAIRS = {(DATA_FLOAT, DATA_INT32), (DATA_INT32, DATA_FLOAT), (DATA_FLOAT, DATA_INT8), (DATA_INT8, DATA_FLOAT),
               (DATA_INT8, DATA_INT32), (DATA_INT32, DATA_INT8), (DATA_INT32, DATA_UINT32), (DATA_UINT32, DATA_INT32)}


@OPS.register("Cast")
def cast(ctx: ExportContext, node: gs.Node) -> None:
    """``to`` = the TNN DataType of the output (cast_layer_interpreter.cc; cast_layer.cc sets the
    output type to it).  The kernel uses ``static_cast``, so a cast *to bool* from a number
    (ONNX: x != 0; TNN: int8 truncation, 0.5 -> 0) is refused."""
    to_onnx = int(node.attrs["to"])
    if to_onnx not in _CAST_TO:
        raise ctx.unsupported(f"Cast to ONNX type {to_onnx}; TNN blobs are float, int32, int8 or uint32")
    src, dst = ctx.tnn_dtype(node.inputs[0]), _CAST_TO[to_onnx]
    src_is_bool = np.dtype(node.inputs[0].dtype or np.float32) == np.bool_
    if to_onnx == 9 and not src_is_bool:
        raise ctx.unsupported("Cast to bool: TNN's int8 static_cast truncates where ONNX tests x != 0")
    if src != dst and (src, dst) not in _CAST_PAIRS:
        raise ctx.unsupported(f"cpu_cast_layer_acc.cc has no conversion from TNN type {src} to {dst}")
    ctx.emit("Cast", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], [dst])


# -- comparison and selection -----------------------------------------------------------------------

def _aligned_blob(ctx: ExportContext, tensor: gs.Tensor, rank: int) -> str:
    """``tensor`` as a blob of ``rank`` dims.  Equal/Where size their output with
    DimsVectorUtils::Max, which aligns dims from the *left*; ONNX aligns from the right, so lower
    ranks get leading 1s (a reshaped constant, or an Unsqueeze layer)."""
    shape = ctx.shape(tensor)
    missing = rank - len(shape)
    if missing == 0:
        return ctx.blob(tensor)
    value = ctx.const(tensor)
    if value is not None:
        name = ctx.new_blob(f"{ctx.blob_names.of(tensor.name)}_rank{rank}")
        ctx.constants[name] = ctx.raw(np.asarray(value).reshape((1,) * missing + tuple(shape)))
        return name
    out = ctx.new_blob(f"{ctx.blob(tensor)}_rank{rank}")
    ctx.emit("Unsqueeze", [ctx.blob(tensor)], [out], [missing, *range(missing)], name=ctx.layer_name("_unsqueeze"))
    return out


@OPS.register("Equal")
def equal(ctx: ExportContext, node: gs.Node) -> None:
    """No interpreter, so no parameters and no resource: both operands are blobs (a constant one
    comes from the constant map).  Output int8 0/1 (equal_layer.cc), float/int32/int8 inputs
    (cpu_equal_layer_acc.cc)."""
    rank = ctx.rank(node.outputs[0])
    a, b = (_aligned_blob(ctx, t, rank) for t in node.inputs)
    ctx.emit("Equal", [a, b], [ctx.blob(node.outputs[0])])


@OPS.register("Where")
def where(ctx: ExportContext, node: gs.Node) -> None:
    """No interpreter; inputs in the order X, Y, condition (where_layer.cc, cpu_where_layer_acc.cc:
    ``c != 0 ? a : b`` on 32-bit words, so float and int32 data only); condition is int8."""
    cond, x, y = node.inputs
    if ctx.tnn_dtype(x) not in (DATA_FLOAT, DATA_INT32):
        raise ctx.unsupported("cpu_where_layer_acc.cc selects float or int32 data only")
    rank = ctx.rank(node.outputs[0])
    inputs = [_aligned_blob(ctx, t, rank) for t in (x, y, cond)]
    ctx.emit("Where", inputs, [ctx.blob(node.outputs[0])])


# -- index ops ------------------------------------------------------------------------------------

def _wrapped_indices(ctx: ExportContext, value: np.ndarray, data_shape: tuple[int, ...]) -> np.ndarray:
    """Constant N-d indices with ONNX's negative values resolved (TNN's kernels do not wrap)."""
    dims = np.asarray(data_shape[:value.shape[-1]], np.int64)
    return np.where(value < 0, value + dims, value).astype(np.int32)


@OPS.register("GatherND")
def gather_nd(ctx: ExportContext, node: gs.Node) -> None:
    """``batch_dims`` (gathernd_layer_interpreter.cc, default 0); cpu_gathernd_layer_acc.cc refuses
    batch_dims != 0.  Data and int32 indices are blobs (no resource)."""
    if int(node.attrs.get("batch_dims", 0)) != 0:
        raise ctx.unsupported("GatherND batch_dims != 0 (cpu_gathernd_layer_acc.cc rejects it)")
    data, indices = node.inputs
    value = ctx.const(indices)
    if value is not None:
        name = ctx.new_blob(f"{ctx.blob_names.of(indices.name)}_wrapped")
        ctx.constants[name] = ctx.raw(_wrapped_indices(ctx, value, ctx.shape(data)))
        index_blob = name
    else:
        index_blob = ctx.blob(indices)
    ctx.emit("GatherND", [ctx.blob(data), index_blob], [ctx.blob(node.outputs[0])], [0])


@OPS.register("ScatterND")
def scatter_nd(ctx: ExportContext, node: gs.Node) -> None:
    """No parameters (scatter_nd_layer_interpreter.cc); resource ``bool has_indices ; [Raw
    indices] ; bool has_update ; [Raw updates]``.  Constant indices go to the resource and the
    layer has inputs (data, updates); otherwise three blobs (cpu_scatter_nd_layer_acc.cc).  Float
    data only; ONNX ``reduction`` other than none is refused."""
    if node.attrs.get("reduction", "none") not in ("none", b"none"):
        raise ctx.unsupported("ScatterND with a reduction")
    data, indices, updates = node.inputs
    if ctx.tnn_dtype(data) != DATA_FLOAT:
        raise ctx.unsupported("cpu_scatter_nd_layer_acc.cc scatters float data only")
    value = ctx.const(indices)
    out = ctx.blob(node.outputs[0])
    if value is None:
        ctx.emit("ScatterND", [ctx.blob(data), ctx.blob(indices), ctx.blob(updates)], [out])
        return
    resource = [("bool", True), ("raw", ctx.raw(_wrapped_indices(ctx, value, ctx.shape(data)))), ("bool", False)]
    ctx.emit("ScatterND", [ctx.blob(data), ctx.blob(updates)], [out], [], resource)


# -- shape queries and generators ----------------------------------------------------------------------

@OPS.register("Shape")
def shape(ctx: ExportContext, node: gs.Node) -> None:
    """No parameters (shape_layer_interpreter.cc); int32 output of all dims (shape_layer.cc), so
    ONNX's start/end slicing is refused."""
    rank = ctx.rank(node.inputs[0])
    start, end = int(node.attrs.get("start", 0)), node.attrs.get("end")
    if start % max(rank, 1) != 0 or (end is not None and int(end) < rank):
        raise ctx.unsupported("Shape with start/end (TNN's Shape returns every dim)")
    ctx.emit("Shape", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])])


@OPS.register("Size")
def size(ctx: ExportContext, node: gs.Node) -> None:
    """No parameters (size_layer_interpreter.cc).  Note: size_layer.cc gives the int32 output dims
    {1}, where ONNX's Size is a scalar."""
    ctx.emit("Size", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])])


@OPS.register("NonZero")
def non_zero(ctx: ExportContext, node: gs.Node) -> None:
    """No interpreter; int32 output [rank, count] (nonzero_layer.cc).  cpu_nonzero_layer_acc.cc
    tests the element's *bytes*, so a float -0.0 counts as non-zero (ONNX: zero)."""
    ctx.emit("NonZero", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])])


@OPS.register("Range")
def range_(ctx: ExportContext, node: gs.Node) -> None:
    """No parameters (range_layer_interpreter.cc): start, limit, delta are blobs (constants from
    the constant map, range_layer.cc FillLayerParamWithConstantResource), float or int32.  For int32
    DimsFunctionUtils::Range counts ``ceil((limit - start) / delta)`` on an *integer* quotient,
    i.e. truncated: one element short of ONNX when delta does not divide limit - start."""
    types = {ctx.tnn_dtype(t) for t in node.inputs}
    if len(types) != 1 or types - {DATA_FLOAT, DATA_INT32}:
        raise ctx.unsupported("Range of float or int32 (cpu_range_layer_acc.cc)")
    values = [ctx.const(t) for t in node.inputs]
    if types == {DATA_INT32} and all(v is not None for v in values):
        start, limit, delta = (int(v) for v in values)
        if (limit - start) % delta:
            raise ctx.unsupported("int Range whose delta does not divide limit - start (TNN truncates the count)")
    ctx.emit("Range", [ctx.blob(t) for t in node.inputs], [ctx.blob(node.outputs[0])])


@OPS.register("ConstantOfShape")
def constant_of_shape(ctx: ExportContext, node: gs.Node) -> None:
    """No parameters (constantofshape_layer_interpreter.cc); resource ``Raw value`` whose data type
    becomes the output's (constantofshape_layer.cc); the shape input must be an int32 blob."""
    value = node.attrs.get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(getattr(value, "values", value)).reshape(1)
    if np.dtype(value.dtype) not in (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.int64)):
        raise ctx.unsupported(f"ConstantOfShape value of dtype {value.dtype}")
    ctx.emit("ConstantOfShape", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], [],
             [("raw", ctx.raw(value))])


# -- spatial --------------------------------------------------------------------------------------

@OPS.register("DepthToSpace", "SpaceToDepth")
def reorg(ctx: ExportContext, node: gs.Node) -> None:
    """Reorg ``stride forward run_with_output_dims mode`` (reorg_layer_interpreter.cc; all four read
    without defaults).  forward 1 = DepthToSpace, 0 = SpaceToDepth (reorg_layer.cc); mode 0 DCR,
    1 CRD (NaiveReorg, utils/naive_compute.cc); SpaceToDepth is mode 0."""
    if ctx.rank(node.inputs[0]) != 4:
        raise ctx.unsupported("Reorg works on 4-D NCHW blobs")
    mode = node.attrs.get("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    forward = 1 if node.op == "DepthToSpace" else 0
    params = [int(node.attrs["blocksize"]), forward, 0, 1 if forward and mode == "CRD" else 0]
    ctx.emit("Reorg", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], params)


@OPS.register("LRN")
def lrn(ctx: ExportContext, node: gs.Node) -> None:
    """``alpha beta bias size`` (lrn_layer_interpreter.cc, no defaults).  cpu_lrn_layer_acc.cc sums
    channels [c - (size-1)/2, c + (size-1)/2] with C++ integer halves, so an even ``size`` drops the
    window's last channel that ONNX includes: refused."""
    size_ = int(node.attrs["size"])
    if size_ % 2 == 0:
        raise ctx.unsupported("LRN with an even size (TNN's window is one channel short)")
    if ctx.rank(node.inputs[0]) != 4:
        raise ctx.unsupported("TNN's LRN is 4-D")
    params = [np.float32(node.attrs.get("alpha", 1e-4)), np.float32(node.attrs.get("beta", 0.75)),
              np.float32(node.attrs.get("bias", 1.0)), size_]
    ctx.emit("LRN", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], params)


@OPS.register("RoiAlign")
def roi_align(ctx: ExportContext, node: gs.Node) -> None:
    """``mode output_height output_width sampling_ratio spatial_scale`` (roialign_layer_interpreter.cc;
    mode 1 avg, 0 max as onnx_converter_roialign.cc writes).  cpu_roialign_layer_acc.cc takes the
    ROI corners as ``roi * spatial_scale`` with no half-pixel shift = ONNX's "output_half_pixel";
    only average mode is mapped.  Inputs X, rois, int32 batch indices are blobs."""
    ctm = node.attrs.get("coordinate_transformation_mode", "half_pixel")
    ctm = ctm.decode() if isinstance(ctm, bytes) else ctm
    mode = node.attrs.get("mode", "avg")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if ctm != "output_half_pixel" or mode != "avg":
        raise ctx.unsupported(f"RoiAlign mode '{mode}' / coordinate_transformation_mode '{ctm}' "
                              "(TNN: avg with no half-pixel shift)")
    params = [1, int(node.attrs.get("output_height", 1)), int(node.attrs.get("output_width", 1)),
              int(node.attrs.get("sampling_ratio", 0)), np.float32(node.attrs.get("spatial_scale", 1.0))]
    ctx.emit("RoiAlign", [ctx.blob(t) for t in node.inputs], [ctx.blob(node.outputs[0])], params)


@OPS.register("GridSample")
def grid_sample(ctx: ExportContext, node: gs.Node) -> None:
    """``mode pad_type align_corners`` (gridsample_layer_interpreter.cc, defaults 2 0 0);
    cpu_gridsample_layer_acc.cc computes only mode 2 (bilinear), pad_type 0 (zeros),
    align_corners 0 on 4-D input."""
    attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in node.attrs.items()}
    if (attrs.get("mode", "bilinear") not in ("bilinear", "linear") or attrs.get("padding_mode", "zeros") != "zeros"
            or int(attrs.get("align_corners", 0)) or ctx.rank(node.inputs[0]) != 4):
        raise ctx.unsupported("GridSample other than 4-D bilinear / zeros / align_corners=0")
    ctx.emit("GridSample", [ctx.blob(t) for t in node.inputs], [ctx.blob(node.outputs[0])], [2, 0, 0])


# -- arithmetic -----------------------------------------------------------------------------------

@OPS.register("Einsum")
def einsum(ctx: ExportContext, node: gs.Node) -> None:
    """``equation`` as one token (einsum_layer_interpreter.cc).  The .tnnproto splits records on
    ',', so operands are separated by ';' (einsum_layer.cc parses ';'; onnx_converter_einsum.cc
    replaces ',' the same way).  Labels must be a-z (einsum_layer.cc indexes label - 'a')."""
    equation = node.attrs["equation"]
    equation = (equation.decode() if isinstance(equation, bytes) else equation).replace(" ", "")
    lhs = equation.split("->")[0]
    if any(not (c.islower() or c in ",.") for c in lhs):
        raise ctx.unsupported("Einsum labels must be lower-case letters")
    if "->" not in equation:  # explicit output: ONNX's implicit one = labels seen once, sorted
        labels = [c for c in lhs if c.isalpha()]
        equation += "->" + "".join(sorted(c for c in set(labels) if labels.count(c) == 1))
    ctx.emit("Einsum", [ctx.blob(t) for t in node.inputs], [ctx.blob(node.outputs[0])], [equation.replace(",", ";")])


@OPS.register("BitShift")
def bit_shift(ctx: ExportContext, node: gs.Node) -> None:
    """``direction bits`` (bitshift_layer_interpreter.cc; cpu_bitshift_layer_acc.cc: 0 = right,
    else left) with one constant shift for every element, on uint32/int32 blobs."""
    x, amount = node.inputs
    value = ctx.const(amount)
    if value is None or np.unique(value).size != 1 or ctx.tnn_dtype(x) not in (DATA_UINT32, DATA_INT32):
        raise ctx.unsupported("BitShift needs uint32 data and one constant shift amount")
    direction = node.attrs["direction"]
    direction = direction.decode() if isinstance(direction, bytes) else direction
    params = [0 if direction == "RIGHT" else 1, int(np.unique(value)[0])]
    ctx.emit("BitShift", [ctx.blob(x)], [ctx.blob(node.outputs[0])], params)


# -- deprecated ONNX ops --------------------------------------------------------------------------

@OPS.register("Upsample")
def upsample(ctx: ExportContext, node: gs.Node) -> None:
    """ONNX Upsample (opset <= 9) ``nearest`` = asymmetric / floor, which is TNN's Upsample mode 1
    (``mode scale_h scale_w align_corners out_h out_w``, upsample_layer_interpreter.cc).  Its
    ``linear`` mode is asymmetric, which TNN's bilinear (half-pixel or align-corners,
    cpu_upsample_layer_acc.cc) does not compute: refused."""
    mode = node.attrs.get("mode", "nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    in_shape, out_shape = ctx.shape(node.inputs[0]), ctx.shape(node.outputs[0])
    if mode != "nearest" or len(in_shape) != 4 or in_shape[:2] != out_shape[:2]:
        raise ctx.unsupported("Upsample other than nearest on the H and W of a 4-D tensor")
    scale_h, scale_w = (np.float32(out_shape[i] / in_shape[i]) for i in (2, 3))
    ctx.emit("Upsample", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])],
             [1, scale_h, scale_w, 0, out_shape[2], out_shape[3]])
