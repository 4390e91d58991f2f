"""Reader handlers for MACE's indexing, resize, space/depth and normalization ops.

Same rules as ``reader.py``: each handler re-expresses one MACE CPU kernel in ONNX, with
MACE's argument defaults (``GetOptionalArg`` in the cited file), and raises ``ValueError`` for
argument values whose semantics are not modelled.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from .reader_builder import NHWC_TO_NCHW_AXIS, OP_READERS, fused_activation, rank_of

_BIG = np.iinfo(np.int64).max


def _const_ints(tensor, what):
    if not isinstance(tensor, gs.Constant):
        raise ValueError(f"{what} from a runtime tensor is not modelled")
    return [int(v) for v in np.asarray(tensor.values).reshape(-1)]


def _i64(b, values):
    return b.const(np.array(values, np.int64))


@OP_READERS.register("Split")
def split(b, op, args, ins):
    """split.cc:36-75: axis default 3, += rank if negative, then NHWC->NCHW remap for 4-D with
    has_data_format; sizes from int32 input 1, else equal parts."""
    rank = rank_of(ins[0], "Split")
    axis = args.i("axis", 3)
    axis = axis + rank if axis < 0 else axis
    if args.i("has_data_format", 0) and rank == 4:
        axis = NHWC_TO_NCHW_AXIS[axis]
    outs = [b.fresh("split") for _ in op.output]
    inputs = [ins[0]]
    if len(ins) > 1:
        inputs.append(_i64(b, _const_ints(ins[1], "Split sizes")))
    b.nodes.append(gs.Node("Split", name=f"n{len(b.nodes)}_Split", attrs={"axis": axis}, inputs=inputs,
                           outputs=outs))
    return outs


@OP_READERS.register("StridedSlice")
def strided_slice(b, op, args, ins):
    """strided_slice.cc:29-231 (non-``slice`` form): begin/end/strides int32 inputs, padded with
    0 / dim / 1 to the rank; begin_mask -> 0 (or dim-1 for negative stride), end_mask -> dim (or
    before index 0), otherwise idx += dim if negative and clamp to [0, dim] (stride > 0) or
    [-1, dim-1] (stride < 0): ONNX Slice's own clamping.  shrink_axis_mask keeps index begin and
    drops the dim."""
    if args.i("slice", 0) or args.i("ellipsis_mask", 0) or args.i("new_axis_mask", 0):
        raise ValueError("StridedSlice 'slice' form / ellipsis / new_axis masks not modelled")
    if args.i("has_data_format", 0):
        raise ValueError("StridedSlice with has_data_format not modelled")
    begin = _const_ints(ins[1], "StridedSlice begin")
    end = _const_ints(ins[2], "StridedSlice end")
    strides = _const_ints(ins[3], "StridedSlice strides") if len(ins) > 3 else [1] * len(begin)
    begin_mask, end_mask, shrink = args.i("begin_mask", 0), args.i("end_mask", 0), args.i("shrink_axis_mask", 0)
    starts, ends, steps, shrunk = [], [], [], []
    for d, (lo, hi, step) in enumerate(zip(begin, end, strides)):
        if step == 0:
            raise ValueError("StridedSlice stride 0 (strided_slice.cc:170)")
        if shrink & (1 << d):
            starts.append(lo)
            ends.append(lo + 1 if lo != -1 else _BIG)
            steps.append(1)
            shrunk.append(d)
            continue
        starts.append((0 if step > 0 else _BIG) if begin_mask & (1 << d) else lo)
        ends.append((_BIG if step > 0 else -_BIG) if end_mask & (1 << d) else hi)
        steps.append(step)
    axes = list(range(len(starts)))
    y = b.node("Slice", [ins[0], _i64(b, starts), _i64(b, ends), _i64(b, axes), _i64(b, steps)])
    if shrunk:
        y = b.node("Squeeze", [y, _i64(b, shrunk)])
    return [y]


@OP_READERS.register("Gather")
def gather(b, op, args, ins):
    """gather.cc:23-84: axis default 0 (negative += rank); indices used as given."""
    return [b.node("Gather", [ins[0], ins[1]], axis=args.i("axis", 0))]


@OP_READERS.register("Tile")
def tile(b, op, args, ins):
    """tile.cc: output dim i = dim i * multiples[i] (has_data_format swaps 1..3: refused)."""
    if args.i("has_data_format", 0):
        raise ValueError("Tile with has_data_format not modelled")
    return [b.node("Tile", [ins[0], b.node("Cast", [ins[1]], to=onnx.TensorProto.INT64)])]


@OP_READERS.register("ArgMax")
def arg_max(b, op, args, ins):
    """argmax.cc: axis default 0, keepdims default true, argmin flag; int32 output; ties go to
    the LAST index for argmax (std::greater on (value, index)) and the FIRST for argmin."""
    if args.i("framework_type", 0) == 1 or args.i("top_k", 1) != 1 or args.i("out_val", 0) or len(ins) > 1:
        raise ValueError("ArgMax Caffe form / top_k / out_val / axis input not modelled")
    rank = rank_of(ins[0], "ArgMax")
    axis = args.i("axis", 0)
    axis = axis + rank if axis < 0 else axis
    if axis == 0 and rank > 1:
        raise ValueError("ArgMax axis 0 on rank > 1: argmax.cc sets axis_dist = 1, not a reduction over axis 0")
    argmin = args.i("argmin", 0)
    y = b.node("ArgMin" if argmin else "ArgMax", [ins[0]], axis=axis, keepdims=args.i("keepdims", 1),
               select_last_index=0 if argmin else 1)
    return [b.node("Cast", [y], to=onnx.TensorProto.INT32)]


@OP_READERS.register("Cumsum")
def cumsum(b, op, args, ins):
    """cumsum.cc: axis (default 0, negative += rank, NHWC remap for 4-D with has_data_format),
    exclusive, reverse."""
    rank = rank_of(ins[0], "Cumsum")
    axis = args.i("axis", 0)
    axis = axis + rank if axis < 0 else axis
    if args.i("has_data_format", 0) and rank == 4:
        axis = NHWC_TO_NCHW_AXIS[axis]
    return [b.node("CumSum", [ins[0], b.const(np.int64(axis))], exclusive=args.i("exclusive", 0),
                   reverse=args.i("reverse", 0))]


@OP_READERS.register("Identity")
def identity(b, op, args, ins):
    return [b.node("Identity", [ins[0]])]


@OP_READERS.register("AddN")
def add_n(b, op, args, ins):
    """addn.cc:37-60: element-wise sum of equal-shape inputs."""
    return [b.node("Sum", list(ins))]


@OP_READERS.register("Shape")
def shape(b, op, args, ins):
    """shape.cc: int32 dims of the input."""
    if args.i("has_data_format", 0):
        raise ValueError("Shape with has_data_format not modelled")
    return [b.node("Cast", [b.node("Shape", [ins[0]])], to=onnx.TensorProto.INT32)]


@OP_READERS.register("Fill")
def fill(b, op, args, ins):
    """fill.cc: output of shape input 0 (int32, 1-D) filled with value input 1's first element."""
    value = b.node("Reshape", [ins[1], _i64(b, [-1])])
    value = b.node("Slice", [value, _i64(b, [0]), _i64(b, [1])])
    scalar = b.node("Squeeze", [value, _i64(b, [0])])
    return [b.node("Expand", [scalar, b.node("Cast", [ins[0]], to=onnx.TensorProto.INT64)])]


@OP_READERS.register("DepthToSpace")
def depth_to_space(b, op, args, ins):
    """depth_to_space.cc:30-118: block_size (default 1), mode "DCR" (default) / "CRD"."""
    return [b.node("DepthToSpace", [ins[0]], blocksize=args.i("block_size", 1), mode=args.s("mode", "DCR"))]


@OP_READERS.register("SpaceToDepth")
def space_to_depth(b, op, args, ins):
    """space_to_depth.cc:30-88: block_size (default 1)."""
    return [b.node("SpaceToDepth", [ins[0]], blocksize=args.i("block_size", 1))]


def _sizes(b, x, hw):
    nc = b.node("Slice", [b.node("Shape", [x]), _i64(b, [0]), _i64(b, [2])])
    return b.node("Concat", [nc, _i64(b, hw)], axis=0)


@OP_READERS.register("ResizeNearestNeighbor")
def resize_nearest(b, op, args, ins):
    """resize_nearest_neighbor.cc: height_scale/width_scale (> 0: out = int(scale*in), source
    x / scale) else ``size`` (source x * in/out); coordinate_transformation_mode 0 = x*s,
    1 = (x+0.5)*s; align_corners -> (in-1)/(out-1) and roundf; nearest_mode floor (default) /
    round_prefer_floor; index clamped to in-1."""
    align = args.i("align_corners", 0)
    ct_mode = args.i("coordinate_transformation_mode", 0)
    nearest = args.s("nearest_mode", "floor")
    if nearest not in ("floor", "round_prefer_floor") or ct_mode not in (0, 1, 2):
        raise ValueError(f"nearest_mode '{nearest}' / mode {ct_mode} not modelled")
    attrs = dict(mode="nearest", coordinate_transformation_mode="align_corners" if align else (
        "tf_half_pixel_for_nn" if ct_mode == 1 else "asymmetric"),
        nearest_mode="round_prefer_ceil" if align else nearest)
    hs, ws = args.f("height_scale", 0.0), args.f("width_scale", 0.0)
    if hs > 0:
        if align:
            raise ValueError("align_corners with scales not modelled")
        scales = b.const(np.array([1, 1, hs, ws], np.float32))
        return [b.node("Resize", [ins[0], b.const(np.zeros(0, np.float32)), scales], **attrs)]
    size = args.ints("size")
    if not size or len(size) != 2:
        raise ValueError("ResizeNearestNeighbor from a size tensor not modelled")
    return [b.node("Resize", [ins[0], b.const(np.zeros(0, np.float32)), b.const(np.zeros(0, np.float32)),
                              _sizes(b, ins[0], size)], **attrs)]


@OP_READERS.register("ResizeBilinear")
def resize_bilinear(b, op, args, ins):
    """resize_bilinear.cc:40-62,184-250: ``size`` (ints) or height_scale; the scale is in/out,
    or (in-1)/(out-1) with align_corners; coordinate_transformation_mode 0 = asymmetric,
    1 = half_pixel, 2 = pytorch_half_pixel; lower index clamped at 0, upper at in-1."""
    if args.f("height_scale", 0.0) > 0:
        raise ValueError("ResizeBilinear with height_scale not modelled (coordinates use in/out)")
    size = args.ints("size", [-1, -1])
    if len(size) != 2 or size[0] <= 0:
        raise ValueError("ResizeBilinear from a size tensor not modelled")
    ct_mode = args.i("coordinate_transformation_mode", 0)
    coord = "align_corners" if args.i("align_corners", 0) else {
        0: "asymmetric", 1: "half_pixel", 2: "pytorch_half_pixel"}[ct_mode]
    return [b.node("Resize", [ins[0], b.const(np.zeros(0, np.float32)), b.const(np.zeros(0, np.float32)),
                              _sizes(b, ins[0], size)], mode="linear", coordinate_transformation_mode=coord)]


@OP_READERS.register("InstanceNorm")
def instance_norm(b, op, args, ins):
    """instance_norm.cc:38-190: mean and biased variance over H*W per (n, c); epsilon default
    1e-4; scale/offset used only when ``affine``; fused activation."""
    eps = b.const(np.float32(args.f("epsilon", 1e-4)))
    mean = b.node("ReduceMean", [ins[0]], axes=[2, 3], keepdims=1)
    centered = b.node("Sub", [ins[0], mean])
    var = b.node("ReduceMean", [b.node("Mul", [centered, centered])], axes=[2, 3], keepdims=1)
    y = b.node("Div", [centered, b.node("Sqrt", [b.node("Add", [var, eps])])])
    if args.i("affine", 0):
        shape = _i64(b, [-1, 1, 1])
        y = b.node("Add", [b.node("Mul", [y, b.node("Reshape", [ins[1], shape])]), b.node("Reshape", [ins[2], shape])])
    return [fused_activation(b, args, y)]


@OP_READERS.register("LpNorm")
def lp_norm(b, op, args, ins):
    """lpnorm.cc:38-110: x / (pow(sum over dims axis..end of |x|^p, 1/p) + 1e-6), p in {1, 2},
    axis default -1."""
    rank = rank_of(ins[0], "LpNorm")
    axis = args.i("axis", -1)
    axis = axis + rank if axis < 0 else axis
    p = args.i("p", 2)
    if p not in (1, 2):
        raise ValueError(f"LpNorm p={p} (lpnorm.cc: 1 or 2)")
    norm = b.node("ReduceL2" if p == 2 else "ReduceL1", [ins[0]], axes=list(range(axis, rank)), keepdims=1)
    return [b.node("Div", [ins[0], b.node("Add", [norm, b.const(np.float32(1e-6))])])]


@OP_READERS.register("LocalResponseNorm")
def local_response_norm(b, op, args, ins):
    """local_response_norm.cc:30-80: x * (bias + alpha * sum_{|c'-c|<=r} x^2)^-beta, defaults
    depth_radius 5, bias 1, alpha 1, beta 0.5 = ONNX LRN with size 2r+1 and alpha*size."""
    r = args.i("depth_radius", 5)
    return [b.node("LRN", [ins[0]], size=2 * r + 1, alpha=args.f("alpha", 1.0) * (2 * r + 1),
                   beta=args.f("beta", 0.5), bias=args.f("bias", 1.0))]
