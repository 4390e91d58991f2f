"""Resampling and detection ONNX ops -> MIL: Resize/Upsample, GridSample, RoiAlign, NonMaxSuppression
(op specs: coremltools ``converters/mil/mil/ops/defs/iOS15/image_resizing.py`` resize_bilinear /
upsample_nearest_neighbor / resample / crop_resize, ``iOS16/image_resizing.py`` resample /
crop_resize, ``iOS15/tensor_operation.py`` non_maximum_suppression)."""

from __future__ import annotations

import numpy as np

from ...ir.graph import attr
from ..onnx_attrs import str_attr
from .mil_registry import OPS, input_shape, output_shape, unsupported

#: ONNX Resize coordinate_transformation_mode -> resize_bilinear sampling_mode with the same grid
#: (spec Notes of resize_bilinear): half_pixel x' = (x + 0.5) * in/out - 0.5 is UNALIGN_CORNERS,
#: align_corners x' = x * (in-1)/(out-1) is STRICT_ALIGN_CORNERS, asymmetric x' = x * in/out is
#: DEFAULT; every mode clamps x' to [0, in-1] as onnxruntime's linear Resize does.
_BILINEAR_MODES = {"half_pixel": "UNALIGN_CORNERS", "pytorch_half_pixel": "UNALIGN_CORNERS",
                   "align_corners": "STRICT_ALIGN_CORNERS", "asymmetric": "DEFAULT"}


def _resize_sizes(ctx, node):
    """(in, out) shapes; the ONNX grid uses ``scales`` when given, which equals out/in only when
    in * scale is a whole number, so other scales are refused."""
    in_shape, out_shape = input_shape(node), output_shape(node)
    if len(in_shape) != 4 or in_shape[:2] != out_shape[:2]:
        raise unsupported(node, "only 4-D resizing of the last two axes is mapped")
    scale_index = 1 if node.op == "Upsample" else 2
    scales = ctx.optional_const(node, scale_index)
    if scales is not None and scales.size and any(
            float(i) * float(s) != float(o) for i, s, o in zip(in_shape, scales, out_shape)):
        raise unsupported(node, f"scales {scales.tolist()} do not give whole output sizes")
    return in_shape, out_shape


@OPS.register("Resize", "Upsample")
def _resize(ctx, node) -> None:
    """nearest: integer upscaling with a grid that floors (``upsample_nearest_neighbor``);
    linear: ``resize_bilinear`` to the output size.  Upsample (opset <= 9) is asymmetric."""
    out = ctx.out
    mode = str_attr(node, "mode", "nearest")
    ctm = "asymmetric" if node.op == "Upsample" else str_attr(node, "coordinate_transformation_mode", "half_pixel")
    in_shape, out_shape = _resize_sizes(ctx, node)
    x = ctx.value(node.inputs[0])
    if mode == "linear":
        if ctm not in _BILINEAR_MODES or (ctm == "pytorch_half_pixel" and 1 in out_shape[2:]):
            raise unsupported(node, f"linear resize with coordinate_transformation_mode '{ctm}'")
        ctx.bind(node, ctx.mb.resize_bilinear(x=x, target_size_height=out_shape[2], target_size_width=out_shape[3],
                                              sampling_mode=_BILINEAR_MODES[ctm], name=out))
        return
    nearest = "floor" if node.op == "Upsample" else str_attr(node, "nearest_mode", "round_prefer_floor")
    # With an integer scale s, half_pixel gives x' = q + (r + 0.5)/s - 0.5 in (q - 0.5, q + 0.5)
    # for x = q*s + r, which every nearest_mode rounds to q = floor(x / s).
    floors = ctm in ("half_pixel", "pytorch_half_pixel") or (ctm == "asymmetric" and nearest == "floor")
    if mode != "nearest" or not floors or any(o % i for i, o in zip(in_shape[2:], out_shape[2:])):
        raise unsupported(node, f"{mode} resize ({ctm}, {nearest}) is mapped for integer upscaling "
                                "with half_pixel or asymmetric+floor only")
    sh, sw = (o // i for i, o in zip(in_shape[2:], out_shape[2:]))
    ctx.bind(node, ctx.mb.upsample_nearest_neighbor(x=x, scale_factor_height=sh, scale_factor_width=sw, name=out))


#: ONNX GridSample padding_mode -> resample padding_mode; reflection about the edge pixels' centers
#: (align_corners=1) is "reflection", about their outer edges (align_corners=0) is "symmetric" —
#: as coremltools' torch frontend maps grid_sampler (frontend/torch/ops.py grid_sampler).
def _grid_padding(padding: str, align_corners: bool) -> str | None:
    if padding == "reflection":
        return "reflection" if align_corners else "symmetric"
    return {"zeros": "constant", "border": "border"}.get(padding)


@OPS.register("GridSample")
def _grid_sample(ctx, node) -> None:
    out = ctx.out
    mode = str_attr(node, "mode", "bilinear")
    align_corners = bool(attr(node, "align_corners", 0))
    padding = _grid_padding(str_attr(node, "padding_mode", "zeros"), align_corners)
    if mode not in ("bilinear", "nearest") or padding is None:
        raise unsupported(node, f"mode '{mode}' / padding_mode '{str_attr(node, 'padding_mode', 'zeros')}' "
                                "has no resample equivalent")
    if len(input_shape(node)) != 4:
        raise unsupported(node, "only 4-D inputs (2-D images) are mapped")
    ctx.bind(node, ctx.mb.resample(x=ctx.value(node.inputs[0]), coordinates=ctx.value(node.inputs[1]),
                                   sampling_mode=mode, padding_mode=padding, padding_value=np.float32(0.0),
                                   coordinates_mode="normalized_minus_one_to_one", align_corners=align_corners,
                                   name=out))


@OPS.register("RoiAlign")
def _roi_align(ctx, node) -> None:
    """``crop_resize`` samples each RoI on an (oh*sr) x (ow*sr) grid, ``avg_pool`` averages each
    sr x sr block into a bin.

    ONNX samples bin b of an RoI at ``start + (j + 0.5) * size / n`` (j < n = out*sr); crop_resize
    ALIGN_CORNERS samples ``a + j * (b' - a) / (n - 1)``, so the box handed over is
    ``[start + size/(2n), start + size - size/(2n)]`` (crop boxes in input pixel coordinates,
    ``normalized_coordinates=False``, ``CORNERS_WIDTH_FIRST`` like ONNX's [x1, y1, x2, y2]).  With
    batch 1 every batch index is 0, so the 4-element RoI form is used.
    """
    out = ctx.out
    mb = ctx.mb
    if input_shape(node)[0] != 1:
        # crop_resize's 5-element RoIs (with a batch index) are documented to give [R, 1, C, h, w],
        # but coremltools declares [R, B, C, h, w] (iOS15/image_resizing.py crop_resize
        # type_inference), so a program for B > 1 would not agree with itself.
        raise unsupported(node, "only batch 1 is mapped (crop_resize's declared shape differs for B > 1)")
    sr = int(attr(node, "sampling_ratio", 0))
    if str_attr(node, "mode", "avg") != "avg" or sr <= 0:
        raise unsupported(node, "only mode='avg' with a fixed sampling_ratio > 0 is mapped")
    half_pixel = str_attr(node, "coordinate_transformation_mode", "half_pixel") == "half_pixel"
    oh, ow = int(attr(node, "output_height", 1)), int(attr(node, "output_width", 1))
    rois = ctx.value(node.inputs[1])
    scale = np.float32(attr(node, "spatial_scale", 1.0))
    start = mb.sub(x=mb.mul(x=rois, y=scale, name=f"{out}_scaled"), y=np.float32(0.5 if half_pixel else 0.0),
                   name=f"{out}_shifted")  # [R, 4] = x1, y1, x2, y2
    lo = mb.slice_by_index(x=start, begin=[0, 0], end=[0, 2], end_mask=[True, False], name=f"{out}_lo")
    hi = mb.slice_by_index(x=start, begin=[0, 2], end=[0, 4], end_mask=[True, False], name=f"{out}_hi")
    size = mb.sub(x=hi, y=lo, name=f"{out}_size")
    if not half_pixel:  # output_half_pixel: RoIs are at least one pixel (onnxruntime roialign.cc)
        size = mb.maximum(x=size, y=np.float32(1.0), name=f"{out}_size1")
    half_step = mb.real_div(x=size, y=np.float32([2 * ow * sr, 2 * oh * sr]), name=f"{out}_half_step")
    first = mb.add(x=lo, y=half_step, name=f"{out}_first")
    last = mb.sub(x=mb.add(x=lo, y=size, name=f"{out}_end"), y=half_step, name=f"{out}_last")
    boxes = mb.concat(values=[first, last], axis=1, name=f"{out}_boxes")
    count = input_shape(node, 1)[0]
    boxes = mb.reshape(x=boxes, shape=[count, 1, 4, 1, 1], name=f"{out}_roi")
    crops = mb.crop_resize(x=ctx.value(node.inputs[0]), roi=boxes, target_height=oh * sr, target_width=ow * sr,
                           normalized_coordinates=False, spatial_scale=np.float32(1.0),
                           box_coordinate_mode="CORNERS_WIDTH_FIRST", sampling_mode="ALIGN_CORNERS",
                           name=f"{out}_crops")  # [R, 1, C, oh*sr, ow*sr]
    channels = input_shape(node)[1]
    crops = mb.reshape(x=crops, shape=[count, channels, oh * sr, ow * sr], name=f"{out}_samples")
    ctx.bind(node, mb.avg_pool(x=crops, kernel_sizes=[sr, sr], strides=[sr, sr], pad_type="valid", name=out))


def _center_size_boxes(mb, boxes, center_point_box: int, out: str):
    """ONNX boxes -> CENTER_SIZE_WIDTH_FIRST (x, y, w, h), the only layout MIL NMS reads.
    center_point_box=0 gives [y1, x1, y2, x2] of either diagonal, so sizes are absolute values."""
    if center_point_box:
        return boxes
    y1, x1, y2, x2 = mb.split(x=boxes, num_splits=4, axis=-1, name=f"{out}_corners")
    w = mb.abs(x=mb.sub(x=x2, y=x1, name=f"{out}_dx"), name=f"{out}_w")
    h = mb.abs(x=mb.sub(x=y2, y=y1, name=f"{out}_dy"), name=f"{out}_h")
    cx = mb.mul(x=mb.add(x=x1, y=x2, name=f"{out}_sx"), y=np.float32(0.5), name=f"{out}_cx")
    cy = mb.mul(x=mb.add(x=y1, y=y2, name=f"{out}_sy"), y=np.float32(0.5), name=f"{out}_cy")
    return mb.concat(values=[cx, cy, w, h], axis=-1, name=f"{out}_center")


@OPS.register("NonMaxSuppression")
def _non_max_suppression(ctx, node) -> None:
    """One MIL NMS per (batch, class) — ONNX suppresses classes independently and may select a
    box for several classes — then the (batch, class, box) rows of the valid selections.

    MIL keeps scores >= score_threshold where ONNX keeps scores > it, so the threshold handed
    over is the next float32 above.  Without a threshold, float32's lowest value (as coremltools'
    torch frontend does for torchvision nms, frontend/torch/ops.py torchvision_nms).
    """
    out = ctx.out
    mb = ctx.mb
    batches, n_boxes, _ = input_shape(node, 0)
    _, classes, _ = input_shape(node, 1)
    max_out = ctx.optional_const(node, 2)
    max_out = 0 if max_out is None else int(np.asarray(max_out).reshape(-1)[0])
    if max_out <= 0:
        raise unsupported(node, "max_output_boxes_per_class must be a positive constant")
    keep = min(max_out, n_boxes)
    iou = ctx.optional_const(node, 3)
    iou = np.float32(0.0 if iou is None else np.asarray(iou).reshape(-1)[0])
    threshold = ctx.optional_const(node, 4)
    threshold = np.finfo(np.float32).min if threshold is None else np.nextafter(
        np.float32(np.asarray(threshold).reshape(-1)[0]), np.float32(np.inf))
    boxes = _center_size_boxes(mb, ctx.value(node.inputs[0]), int(attr(node, "center_point_box", 0)), out)
    scores = mb.transpose(x=ctx.value(node.inputs[1]), perm=[0, 2, 1], name=f"{out}_scores")  # [B, N, C]
    rows, masks = [], []
    positions = np.arange(keep, dtype=np.int32)
    for b in range(batches):
        box_b = mb.slice_by_index(x=boxes, begin=[b, 0, 0], end=[b + 1, n_boxes, 4], name=f"{out}_b{b}")
        for c in range(classes):
            tag = f"{out}_b{b}c{c}"
            score_bc = mb.slice_by_index(x=scores, begin=[b, 0, c], end=[b + 1, n_boxes, c + 1], name=f"{tag}_s")
            _, _, picked, valid = mb.non_maximum_suppression(
                boxes=box_b, scores=score_bc, iou_threshold=iou, score_threshold=np.float32(threshold),
                max_boxes=keep, per_class_suppression=False, name=f"{tag}_nms")
            picked = mb.reshape(x=picked, shape=[keep, 1], name=f"{tag}_idx")
            rows.append(mb.concat(values=[np.full((keep, 2), [b, c], np.int32), picked], axis=1, name=f"{tag}_rows"))
            masks.append(mb.less(x=positions, y=valid, name=f"{tag}_valid"))
    table = mb.concat(values=rows, axis=0, name=f"{out}_table") if len(rows) > 1 else rows[0]
    mask = mb.concat(values=masks, axis=0, name=f"{out}_mask") if len(masks) > 1 else masks[0]
    chosen = mb.squeeze(x=mb.non_zero(x=mask, name=f"{out}_nz"), axes=[1], name=f"{out}_chosen")
    ctx.bind(node, mb.gather(x=table, indices=chosen, axis=0, name=out))
