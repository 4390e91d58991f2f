"""ONNX Resize / Upsample (2-D) -> RESIZE_NEAREST_NEIGHBOR, RESIZE_BILINEAR, or GATHER.

The TFLite flags (align_corners, half_pixel_centers) are chosen by comparing, per axis, the source
index ONNX's coordinate rule gives with the one TFLite's kernel computes
(tensorflow/lite/kernels/internal/reference/resize_nearest_neighbor.h).  A nearest mode that no
flag combination reproduces is written as one GATHER per resized axis with the exact source
indices (nearest resizing *is* an index gather); a linear mode without an exact match is refused
rather than approximated.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import attr
from . import layout as L
from ..onnx_attrs import str_attr
from .ops_nn import require_2d
from .registry import OPS
from .ops_tensor import builtin_options

_LINEAR_FLAGS = {"align_corners": (True, False), "asymmetric": (False, False),
                 "half_pixel": (False, True), "pytorch_half_pixel": (False, True)}


@OPS.register("Resize")
def lower_resize(Lw, node, mode=None, ctm=None, nearest_mode=None):
    """Resize (nearest or linear over H, W) -> RESIZE_NEAREST_NEIGHBOR / RESIZE_BILINEAR / GATHER."""
    x = node.inputs[0]
    require_2d(Lw, node, x)
    mode = mode or str_attr(node, "mode", "nearest")
    ctm = ctm or str_attr(node, "coordinate_transformation_mode", "half_pixel")
    n, c, h, w = Lw.shape(x)
    on, oc, oh, ow = Lw.shape(node.outputs[0])
    if (on, oc) != (n, c):
        raise Lw.unsupported("Resize of the batch or channel axis has no builtin")
    scales = _scales(Lw, node, (h, w), (oh, ow))
    if mode == "linear":
        flags = _LINEAR_FLAGS.get(ctm)
        if flags is not None and ctm != "align_corners" and any(s * i != o for s, i, o in zip(scales, (h, w), (oh, ow))):
            raise Lw.unsupported("linear Resize whose scale is not output/input size is not mapped "
                                 "(TFLite derives the scale from the sizes)")
        if flags is None or (ctm == "pytorch_half_pixel" and (oh == 1 or ow == 1)):
            raise Lw.unsupported(f"linear Resize with coordinate_transformation_mode '{ctm}' is not mapped")
        builtin, opts_name = "RESIZE_BILINEAR", "ResizeBilinearOptions"
    elif mode == "nearest":
        nearest_mode = nearest_mode or str_attr(node, "nearest_mode", "round_prefer_floor")
        if ctm not in ("asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners"):
            raise Lw.unsupported(f"nearest Resize with coordinate_transformation_mode '{ctm}' is not mapped")
        wanted = [_onnx_nearest(i, o, ctm, nearest_mode, s) for i, o, s in zip((h, w), (oh, ow), scales)]
        flags = next((f for f in ((False, False), (False, True), (True, False))
                      if all(np.array_equal(idx, _tflite_nearest(i, o, *f))
                             for idx, (i, o) in zip(wanted, ((h, oh), (w, ow))))), None)
        if flags is None:
            _gather_nearest(Lw, node, wanted)
            return
        builtin, opts_name = "RESIZE_NEAREST_NEIGHBOR", "ResizeNearestNeighborOptions"
    else:
        raise Lw.unsupported(f"Resize mode '{mode}' has no builtin")
    opts = builtin_options(opts_name, alignCorners=flags[0], halfPixelCenters=flags[1])
    Lw.emit(builtin, [Lw.get(x, L.NHWC), Lw.int32(f"{node.name}/size", [oh, ow])],
            [Lw.define(node.outputs[0], L.NHWC)], opts)


def _gather_nearest(Lw, node, wanted):
    """Nearest resize as GATHER along stored H (axis 1) then W (axis 2) with ONNX's source indices."""
    src = Lw.get(node.inputs[0], L.NHWC)
    out_t = node.outputs[0]
    n, h, w, c = Lw.w.tensors[src].shape
    oh, ow = len(wanted[0]), len(wanted[1])
    steps = [(1, wanted[0], (n, oh, w, c)), (2, wanted[1], (n, oh, ow, c))]
    steps = [s for s in steps if not np.array_equal(s[1], np.arange(s[2][s[0]]))] or steps[-1:]
    for k, (axis, idx, shape) in enumerate(steps):
        dst = Lw.define(out_t, L.NHWC) if k == len(steps) - 1 else Lw.temp(f"{out_t.name}/rows", shape)
        Lw.emit("GATHER", [src, Lw.int32(f"{node.name}/source_index{axis}", idx)], [dst],
                builtin_options("GatherOptions", axis=axis))
        src = dst


@OPS.register("Upsample")
def lower_upsample(Lw, node):
    """Upsample (opset <= 9, deprecated) = Resize with asymmetric coordinates and floor rounding."""
    mode = str_attr(node, "mode", "nearest")
    lower_resize(Lw, node, mode="linear" if mode in ("linear", "bilinear") else mode,
                 ctm="asymmetric", nearest_mode="floor")


def _scales(Lw, node, sizes, outs) -> list[float]:
    """ONNX's per-axis scale for H, W: the ``scales`` input/attribute when given (ONNX uses it, not
    out/in, in the coordinate transform), else output/input size."""
    given = None
    if node.op == "Upsample":
        given = attr(node, "scales")
        if given is None and len(node.inputs) > 1:
            given = Lw.const(node.inputs[1])
    elif len(node.inputs) > 2 and node.inputs[2].name:
        given = Lw.const(node.inputs[2])
    given = None if given is None else np.asarray(given, np.float64).reshape(-1)
    if given is None or given.size != 4:
        return [o / i for i, o in zip(sizes, outs)]
    return [float(given[2]), float(given[3])]


def _onnx_nearest(size, out, ctm, nearest_mode, scale=None):
    """Source index per output index, as ONNX's Resize reference defines it (onnx/reference/ops/op_resize.py)."""
    x = np.arange(out, dtype=np.float64)
    scale = out / size if scale is None else scale
    if ctm == "asymmetric":
        src = x / scale
    elif ctm in ("half_pixel", "pytorch_half_pixel"):
        src = (x + 0.5) / scale - 0.5
        if ctm == "pytorch_half_pixel" and out == 1:
            src = np.zeros_like(x)
    else:  # align_corners
        src = x * (size - 1) / (out - 1) if out > 1 else np.zeros_like(x)
    rounding = {"floor": np.floor, "ceil": np.ceil,
                "round_prefer_floor": lambda v: np.where(v - np.floor(v) == 0.5, np.floor(v), np.round(v)),
                "round_prefer_ceil": lambda v: np.where(v - np.floor(v) == 0.5, np.ceil(v), np.round(v))}
    return np.clip(rounding[nearest_mode](src), 0, size - 1).astype(np.int64)


def _tflite_nearest(size, out, align_corners, half_pixel_centers):
    scale = (size - 1) / (out - 1) if (align_corners and out > 1) else size / out
    offset = 0.5 if half_pixel_centers else 0.0
    v = (np.arange(out, dtype=np.float32) + offset) * np.float32(scale)
    idx = np.round(v) if align_corners else np.floor(v)
    idx = np.minimum(idx, size - 1)
    if half_pixel_centers:
        idx = np.maximum(idx, 0)
    return idx.astype(np.int64)
