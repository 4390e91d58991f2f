"""Shape and data-movement layers: ONNX op -> TNN layer parameters.

Every axis is written non-negative and every shape explicitly (no 0 / -1 placeholders), because
edgeconv exports static-shape models; the parsers cited below also accept the TNN shorthands,
which the round-trip reader implements.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from .context import ExportContext
from .registry import OPS


def _const_list(ctx: ExportContext, node: gs.Node, index: int, attr: str | None = None) -> list[int] | None:
    if len(node.inputs) > index and node.inputs[index].name:
        value = ctx.const(node.inputs[index])
        if value is None:
            raise ctx.unsupported(f"input {index} must be a constant for TNN")
        return [int(v) for v in value.reshape(-1)]
    if attr is not None and attr in node.attrs:
        return [int(v) for v in node.attrs[attr]]
    return None


@OPS.register("Reshape")
def reshape(ctx: ExportContext, node: gs.Node) -> None:
    """``axis num_axes shape_size s0 .. s(n-1) reshape_type`` (reshape_layer_interpreter.cc);
    reshape_type 0 = row-major NCHW (ONNX) order, 1 would be TF's NHWC."""
    out_shape = ctx.shape(node.outputs[0])
    params = [0, len(out_shape), len(out_shape), *out_shape, 0]
    ctx.emit("Reshape", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], params)


@OPS.register("Flatten")
def flatten(ctx: ExportContext, node: gs.Node) -> None:
    """``axis`` (flatten_layer_interpreter.cc); output [prod(d[:axis]), prod(d[axis:])]
    (flatten_layer.cc), as in ONNX."""
    rank = ctx.rank(node.inputs[0])
    axis = int(node.attrs.get("axis", 1))
    axis = axis + rank if axis < 0 else axis
    ctx.emit("Flatten", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], [axis])


@OPS.register("Transpose")
def permute(ctx: ExportContext, node: gs.Node) -> None:
    """``n o0 .. o(n-1)`` (permute_layer_interpreter.cc).  ONNX Transpose is TNN's Permute: the
    ``Transpose`` layer type has no interpreter and no CPU layer."""
    rank = ctx.rank(node.inputs[0])
    perm = [int(p) for p in node.attrs.get("perm", list(range(rank))[::-1])]
    ctx.emit("Permute", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], [rank, *perm])


@OPS.register("Concat")
def concat(ctx: ExportContext, node: gs.Node) -> None:
    """``axis`` (concat_layer_interpreter.cc, default 1); constant operands become blobs of the
    .tnnmodel constant map."""
    rank = ctx.rank(node.outputs[0])
    axis = ctx.positive_axis(int(node.attrs["axis"]), rank)
    ctx.emit("Concat", [ctx.blob(t) for t in node.inputs], [ctx.blob(node.outputs[0])], [axis])


@OPS.register("Split")
def split(ctx: ExportContext, node: gs.Node) -> None:
    """``axis slice_count s0 ..`` (splitv_layer_interpreter.cc).  ONNX Split is SplitV; TNN's
    ``Split`` layer only duplicates a blob."""
    rank = ctx.rank(node.inputs[0])
    axis = ctx.positive_axis(int(node.attrs.get("axis", 0)), rank)
    sizes = [ctx.shape(t)[axis] for t in node.outputs]
    outs = [ctx.blob(t) for t in node.outputs]
    ctx.emit("SplitV", [ctx.blob(node.inputs[0])], outs, [axis, len(sizes), *sizes])


@OPS.register("Squeeze")
def squeeze(ctx: ExportContext, node: gs.Node) -> None:
    """``n axis0 ..`` (squeeze_layer_interpreter.cc); SqueezeLayer erases in reverse order."""
    in_shape = ctx.shape(node.inputs[0])
    axes = _const_list(ctx, node, 1, "axes")
    if axes is None:
        axes = [i for i, d in enumerate(in_shape) if d == 1]
    axes = sorted({ctx.positive_axis(a, len(in_shape)) for a in axes})
    ctx.emit("Squeeze", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], [len(axes), *axes])


@OPS.register("Unsqueeze")
def unsqueeze(ctx: ExportContext, node: gs.Node) -> None:
    """``n axis0 ..`` (unsqueeze_layer_interpreter.cc); UnsqueezeLayer inserts in the given order,
    so ascending output positions reproduce ONNX."""
    out_rank = ctx.rank(node.outputs[0])
    axes = _const_list(ctx, node, 1, "axes") or []
    axes = sorted({ctx.positive_axis(a, out_rank) for a in axes})
    ctx.emit("Unsqueeze", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], [len(axes), *axes])


@OPS.register("Gather")
def gather(ctx: ExportContext, node: gs.Node) -> None:
    """``axis data_in_resource indices_in_resource`` (gather_layer_interpreter.cc, defaults 0 0 1);
    resource ``int data_in_res ; [Raw data] ; int indices_in_res ; [Raw indices]``."""
    data, indices = node.inputs
    data_shape = ctx.shape(data)
    axis = ctx.positive_axis(int(node.attrs.get("axis", 0)), len(data_shape))
    data_value, index_value = ctx.const(data), ctx.const(indices)
    out = ctx.blob(node.outputs[0])
    if index_value is not None:
        # Negative indices count from the end in ONNX; TNN's Gather does not wrap them.
        index_value = np.where(index_value < 0, index_value + data_shape[axis], index_value).astype(np.int32)
        ctx.emit("Gather", [ctx.blob(data)], [out], [axis, 0, 1],
                 [("int", 0), ("int", 1), ("raw", ctx.raw(index_value))])
    elif data_value is not None:
        ctx.emit("Gather", [ctx.blob(indices)], [out], [axis, 1, 0],
                 [("int", 1), ("raw", ctx.raw(data_value, weight=True)), ("int", 0)])
    else:
        ctx.emit("Gather", [ctx.blob(data), ctx.blob(indices)], [out], [axis, 0, 0])


@OPS.register("Slice")
def slice_(ctx: ExportContext, node: gs.Node) -> None:
    """``n b.. n e.. n axes.. n strides..`` (stride_slice_v2_layer_interpreter.cc); ends are
    exclusive (DimsFunctionUtils::StrideSlice).  Begins/ends are clamped here as ONNX does, so
    no INT_MAX sentinel has to survive atoi."""
    shape = ctx.shape(node.inputs[0])
    starts, ends = _const_list(ctx, node, 1), _const_list(ctx, node, 2)
    axes = _const_list(ctx, node, 3) or list(range(len(starts)))
    steps = _const_list(ctx, node, 4) or [1] * len(starts)
    begins_out, ends_out, axes_out = [], [], []
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if step <= 0:
            raise ctx.unsupported("Slice with a negative step")
        axis = ctx.positive_axis(axis, len(shape))
        dim = shape[axis]
        start = min(max(start + dim if start < 0 else start, 0), dim)
        end = min(max(end + dim if end < 0 else end, 0), dim)
        begins_out.append(start)
        ends_out.append(end)
        axes_out.append(axis)
    n = len(axes_out)
    params = [n, *begins_out, n, *ends_out, n, *axes_out, n, *steps[:n]]
    ctx.emit("StridedSliceV2", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], params)


#: Pad types the exporter writes.  TNN's format has type 2 (edge), but its arm/x86 kernels refuse it
#: at Forward (x86_pad_layer_acc.cc:153-155) and the naive one fails: legalization rewrites an edge
#: pad as Slice + Concat (converter/legalize/rewrites/pad.py) instead.
_PAD_MODES = {"constant": 0, "reflect": 1}


@OPS.register("Pad")
def pad(ctx: ExportContext, node: gs.Node) -> None:
    """4-D with no batch padding: ``Pad`` ``n1 n2 pad_t pad_b pad_l pad_r pad_c_b pad_c_e type
    value`` (pad_layer_interpreter.cc; n1, n2 are read and ignored).  Otherwise ``PadV2``
    ``ndims p0 .. p(2n-1) type value`` with ONNX's pad order (padv2_layer_interpreter.cc)."""
    rank = ctx.rank(node.inputs[0])
    pads = _const_list(ctx, node, 1, "pads")
    if len(node.inputs) > 3 and node.inputs[3].name:
        raise ctx.unsupported("Pad with an axes input")
    value = ctx.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2].name else None
    mode = node.attrs.get("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in _PAD_MODES or any(p < 0 for p in pads):
        raise ctx.unsupported(f"Pad mode '{mode}' / negative pads")
    fill = np.float32(0.0 if value is None else float(value))
    src, out = ctx.blob(node.inputs[0]), ctx.blob(node.outputs[0])
    begin, end = pads[:rank], pads[rank:]
    type_ = _PAD_MODES[mode]
    if rank == 4 and begin[0] == end[0] == 0 and (type_ == 0 or begin[1] == end[1] == 0):
        params = [0, 0, begin[2], end[2], begin[3], end[3], begin[1], end[1], type_, fill]
        ctx.emit("Pad", [src], [out], params)
    else:
        ctx.emit("PadV2", [src], [out], [rank, *pads, type_, fill])


@OPS.register("Resize")
def resize(ctx: ExportContext, node: gs.Node) -> None:
    """``mode scale_h scale_w align_corners out_h out_w`` (upsample_layer_interpreter.cc; mode 1
    nearest, 2 bilinear).  TNN's nearest is floor(out_index * in/out) (asymmetric/floor) and its
    bilinear is half-pixel or align-corners (cpu_upsample_layer_acc.cc); other ONNX modes are
    refused rather than approximated."""
    in_shape, out_shape = ctx.shape(node.inputs[0]), ctx.shape(node.outputs[0])
    if len(in_shape) != 4 or in_shape[:2] != out_shape[:2]:
        raise ctx.unsupported("TNN's Upsample resizes the H and W of a 4-D tensor only")
    mode = node.attrs.get("mode", "nearest")
    ctm = node.attrs.get("coordinate_transformation_mode", "half_pixel")
    scales = ctx.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2].name else None
    if scales is not None and scales.size and any(
        abs(in_shape[i] * float(scales[i]) - out_shape[i]) > 1e-6 for i in (2, 3)
    ):
        raise ctx.unsupported("scales that do not give whole output sizes")
    if mode == "nearest":
        if ctm != "asymmetric" or node.attrs.get("nearest_mode", "round_prefer_floor") != "floor":
            raise ctx.unsupported("nearest Resize other than asymmetric/floor")
        type_, align = 1, 0
    elif mode == "linear":
        if ctm == "align_corners":
            align = 1
        elif ctm == "half_pixel" or (ctm == "pytorch_half_pixel" and min(out_shape[2:]) > 1):
            align = 0
        else:
            raise ctx.unsupported(f"linear Resize with coordinate_transformation_mode '{ctm}'")
        type_ = 2
    else:
        raise ctx.unsupported(f"Resize mode '{mode}'")
    scale_h, scale_w = (np.float32(out_shape[i] / in_shape[i]) for i in (2, 3))
    params = [type_, scale_h, scale_w, align, out_shape[2], out_shape[3]]
    ctx.emit("Upsample", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], params)


@OPS.register("ArgMax", "ArgMin")
def arg_max_or_min(ctx: ExportContext, node: gs.Node) -> None:
    """ArgMaxOrMin ``mode axis keep_dims select_last_index`` (arg_max_or_min_layer_interpreter.cc;
    mode 0 = min, 1 = max, cpu_arg_max_or_min_layer_acc.cc keeps the first extremum)."""
    if node.attrs.get("select_last_index", 0):
        raise ctx.unsupported("select_last_index (TNN keeps the first extremum)")
    axis = ctx.positive_axis(int(node.attrs.get("axis", 0)), ctx.rank(node.inputs[0]))
    params = [1 if node.op == "ArgMax" else 0, axis, int(node.attrs.get("keepdims", 1)), 0]
    ctx.emit("ArgMaxOrMin", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], params)


@OPS.register("Tile")
def tile(ctx: ExportContext, node: gs.Node) -> None:
    """Tile (type string of LAYER_REPEAT): ``reps..`` — every remaining token
    (tile_layer_interpreter.cc)."""
    reps = _const_list(ctx, node, 1)
    if reps is None:
        raise ctx.unsupported("Tile repeats must be constant")
    ctx.emit("Tile", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], reps)


@OPS.register("Expand")
def expand(ctx: ExportContext, node: gs.Node) -> None:
    """``shape_size s0 ..`` (expand_layer_interpreter.cc); written as the static output shape."""
    out_shape = ctx.shape(node.outputs[0])
    ctx.emit("Expand", [ctx.blob(node.inputs[0])], [ctx.blob(node.outputs[0])], [len(out_shape), *out_shape])
