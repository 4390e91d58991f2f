"""Resize / Upsample -> ResizeNearestNeighbor / ResizeBilinear."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from ....ir.graph import attr
from ...onnx_attrs import str_attr
from ..registry import OPS
from .common import fail, optional_const


@OPS.register("Resize", "Upsample")
def resize(em, node: gs.Node) -> None:
    """Resize (opset 11+) / Upsample -> ResizeNearestNeighbor or ResizeBilinear on a 4-D NCHW
    input, resizing H and W only.

    ``mace/ops/resize_nearest_neighbor.cc``: with ``height_scale``/``width_scale`` > 0 the
    output is int(scale*in) and the source coordinate x * (1/scale) (ONNX scales); with ``size``
    it is x * in/out (``common/utils.h CalculateResizeScale``; ONNX sizes).
    ``coordinate_transformation_mode`` HALF_PIXEL (1) gives (x+0.5)*scale with no -0.5, i.e.
    ONNX ``tf_half_pixel_for_nn``; NONE (0) is ``asymmetric``; ``align_corners`` rounds with
    roundf (half away from zero = ONNX ``round_prefer_ceil`` on non-negative coordinates).
    ``nearest_mode`` "floor" / "round_prefer_floor".
    ``mace/ops/resize_bilinear.cc:40-62``: the scale is always in/out (recomputed from the
    output size), NONE = asymmetric, HALF_PIXEL = ONNX half_pixel, PYTORCH_HALF_PIXEL, or
    ``align_corners``; so ONNX scales are accepted only when they give exactly out/in."""
    shape, out_shape = em.shape(node.inputs[0]), em.shape(node.outputs[0])
    if len(shape) != 4 or shape[:2] != out_shape[:2]:
        raise fail(node, "MACE resizes the H and W of a 4-D input only")
    mode = str_attr(node, "mode", "nearest")
    coord = str_attr(node, "coordinate_transformation_mode", "asymmetric")
    if node.op == "Upsample":
        scales = optional_const(node, 1)
    else:
        if len(node.inputs) > 1 and node.inputs[1].name and optional_const(node, 1) is not None \
                and optional_const(node, 1).size:
            raise fail(node, "roi input (MACE has no tf_crop_and_resize)")
        scales = optional_const(node, 2)
        if scales is not None and scales.size == 0:
            scales = None
        if float(attr(node, "cubic_coeff_a", -0.75)) != -0.75 or int(attr(node, "exclude_outside", 0)):
            raise fail(node, "cubic_coeff_a / exclude_outside")
    args = []
    if mode == "nearest":
        op_type = "ResizeNearestNeighbor"
        # Upsample (opset <= 9) is asymmetric with floor.
        nearest = "floor" if node.op == "Upsample" else str_attr(node, "nearest_mode", "round_prefer_floor")
        if coord == "align_corners":
            if nearest != "round_prefer_ceil":
                raise fail(node, "align_corners nearest rounds half up in MACE (roundf); needs round_prefer_ceil")
            args += [("align_corners", "i", 1)]
        elif coord in ("asymmetric", "tf_half_pixel_for_nn"):
            if nearest not in ("floor", "round_prefer_floor"):
                raise fail(node, f"nearest_mode '{nearest}' (MACE: floor, round_prefer_floor)")
            args += [("coordinate_transformation_mode", "i", int(coord == "tf_half_pixel_for_nn")),
                     ("nearest_mode", "s", nearest)]
        else:
            raise fail(node, f"nearest resize with coordinate_transformation_mode '{coord}'")
        if scales is not None:
            if list(scales.reshape(-1)[:2]) != [1.0, 1.0]:
                raise fail(node, "scaling N or C")
            args += [("height_scale", "f", float(scales.reshape(-1)[2])),
                     ("width_scale", "f", float(scales.reshape(-1)[3]))]
        else:
            args += [("size", "ints", out_shape[2:])]
    elif mode in ("linear", "bilinear"):
        op_type = "ResizeBilinear"
        if scales is not None and any(float(s) * i != o for s, i, o in zip(scales.reshape(-1), shape, out_shape)):
            raise fail(node, "scales that do not give out/in exactly (MACE bilinear uses in/out)")
        if coord == "align_corners":
            args += [("align_corners", "i", 1)]
        elif coord in ("asymmetric", "half_pixel", "pytorch_half_pixel"):
            args += [("coordinate_transformation_mode", "i",
                      {"asymmetric": 0, "half_pixel": 1, "pytorch_half_pixel": 2}[coord])]
        else:
            raise fail(node, f"linear resize with coordinate_transformation_mode '{coord}'")
        args += [("size", "ints", out_shape[2:])]
    else:
        raise fail(node, f"mode '{mode}' (MACE's ResizeBicubic is not mapped)")
    em.op(op_type, node.name, [em.name_of(node.inputs[0])], [em.name_of(node.outputs[0])], fixed=True, args=args)
