"""Resize and Upsample: Upsample-7/9 and Resize-10/11 up to Resize-13; Resize-18/19 down to it
(``axes``, ``keep_aspect_ratio_policy``, ``antialias``, ``half_pixel_symmetric``)."""

from __future__ import annotations

import math

import numpy as np
import onnx_graphsurgeon as gs

from ...ir.graph import attr, static_shape
from .base import (Unadaptable, adapter, constant_array, constant_ints, is_absent, positive_axes,
                   rank_of, set_inputs, shape_of, text)

_NEAREST_FLOOR = {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}


def _as_resize13(rw, node: gs.Node, scales: gs.Tensor) -> None:
    """Upsample-7/9 and Resize-10 scale with ``x_original = x_resized / scale`` and round
    nearest neighbours down: Resize-13's ``asymmetric`` and ``floor``."""
    mode = text(node, "mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear"):
        raise Unadaptable(f"mode={mode!r} is not one {node.op} defines")
    node.attrs.clear()
    node.attrs.update({"mode": "nearest" if mode == "nearest" else "linear", **_NEAREST_FLOOR})
    if mode != "nearest":
        del node.attrs["nearest_mode"]
    node.op = "Resize"
    set_inputs(node, [node.inputs[0], rw.const("roi", np.zeros(0, np.float32), dtype=np.float32), scales])


@adapter("Upsample", 7)
def upsample7_as_resize(rw, node: gs.Node) -> None:
    """before: x ─► Upsample(scales=[1, 1, 2, 2]; mode) ─► y
    after:  x ─► Resize(x, roi=[], scales; mode, asymmetric, nearest_mode=floor) ─► y
    """
    scales = rw.const("scales", np.asarray(attr(node, "scales"), np.float32), dtype=np.float32)
    _as_resize13(rw, node, scales)


@adapter("Upsample", 9, 10)
def upsample9_as_resize(rw, node: gs.Node) -> None:
    """before: x ─► Upsample(x, scales; mode) ─► y
    after:  x ─► Resize(x, roi=[], scales; mode, asymmetric, nearest_mode=floor) ─► y
    """
    _as_resize13(rw, node, node.inputs[1])


@adapter("Resize", 10)
def resize10_as_resize13(rw, node: gs.Node) -> None:
    """Resize-10 is Upsample-9 under a new name.

    before: x ─► Resize(x, scales; mode) ─► y
    after:  x ─► Resize(x, roi=[], scales; mode, asymmetric, nearest_mode=floor) ─► y
    """
    _as_resize13(rw, node, node.inputs[1])


@adapter("Resize", 11)
def resize11_as_resize13(rw, node: gs.Node) -> None:
    """Resize-11 → -13: the same, except ``tf_half_pixel_for_nn`` (gone at 13).

    before: x ─► Resize(x, roi, scales, sizes; attrs) ─► y
    after:  the same node
    """
    if text(node, "coordinate_transformation_mode", "half_pixel") == "tf_half_pixel_for_nn":
        raise Unadaptable("coordinate_transformation_mode='tf_half_pixel_for_nn' has no opset-13+ form")


@adapter("Resize", 18, 19)
def resize18_as_resize13(rw, node: gs.Node) -> None:
    """Resize-18/19 → -13: ``axes`` expanded to every axis (scale 1, size unchanged, roi [0, 1]
    elsewhere); ``keep_aspect_ratio_policy`` not_larger/not_smaller as the one scale it picks
    (when floor(scale·d) is its rounded size on every axis); ``antialias`` dropped when no axis
    shrinks; ``half_pixel_symmetric`` as ``half_pixel`` when every output size is exactly
    scale·d.  Anything else is refused.

    before: x ─► Resize(x, roi, scales|sizes; axes, antialias, keep_aspect_ratio_policy, mode…) ─► y
    after:  x ─► Resize(x, roi, scales|sizes over every axis; mode…) ─► y
    """
    x = node.inputs[0]
    rank = rank_of(x)
    axes = positive_axes(node.attrs.pop("axes", None) or range(rank), rank)
    scales = constant_array(node, 2, "scales") if len(node.inputs) > 2 else None
    sizes = constant_ints(node, 3, "sizes") if len(node.inputs) > 3 else None
    if scales is not None and scales.size == 0:
        scales = None
    policy = text(node, "keep_aspect_ratio_policy", "stretch")
    node.attrs.pop("keep_aspect_ratio_policy", None)
    if scales is None and sizes is None:
        raise Unadaptable("neither scales nor sizes is given")
    shape = shape_of(x) if (sizes is not None or len(axes) < rank) else static_shape(x)
    if sizes is not None and policy != "stretch":
        scales, sizes = _keep_aspect(policy, sizes, axes, shape), None
    full_scales = None if scales is None else _spread(list(map(float, scales)), axes, [1.0] * rank)
    full_sizes = None if sizes is None else _spread(sizes, axes, list(shape))
    _antialias_or_refuse(node, full_scales, full_sizes, shape)
    _symmetric_or_refuse(node, full_scales, shape)
    roi = _full_roi(rw, node, axes, rank)
    inputs = [x, roi, rw.const("scales", np.asarray(full_scales if full_scales else [], np.float32), dtype=np.float32)]
    if full_sizes is not None:
        inputs.append(rw.ints("sizes", full_sizes))
    set_inputs(node, inputs)


def _spread(values: list, axes: list[int], fill: list) -> list:
    for axis, value in zip(axes, values):
        fill[axis] = value
    return fill


def _keep_aspect(policy: str, sizes: list[int], axes: list[int], shape) -> list[float]:
    """The one scale ``not_larger``/``not_smaller`` picks, as scales on the resized axes, when
    Resize-13's floor(scale·d) gives the sizes Resize-18 rounds to."""
    if policy not in ("not_larger", "not_smaller"):
        raise Unadaptable(f"keep_aspect_ratio_policy={policy!r} is not one ONNX defines")
    ratios = [np.float32(s) / np.float32(shape[a]) for s, a in zip(sizes, axes)]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    for a in axes:
        rounded = math.floor(float(scale) * shape[a] + 0.5)
        if math.floor(float(np.float32(scale) * np.float32(shape[a]))) != rounded:
            raise Unadaptable(f"keep_aspect_ratio_policy={policy!r}: size {rounded} on axis {a} is rounded, "
                              "not floor(scale·size) as opset 13 computes it")
    return [float(scale)] * len(axes)


def _antialias_or_refuse(node: gs.Node, scales, sizes, shape) -> None:
    antialias = int(node.attrs.pop("antialias", 0))
    if not antialias or text(node, "mode", "nearest") == "nearest":
        return
    ratios = scales if scales is not None else [s / d for s, d in zip(sizes, shape)]
    shrunk = [a for a, r in enumerate(ratios) if r < 1.0]
    if shrunk:
        raise Unadaptable(f"antialias=1 while downscaling axis {shrunk[0]} (scale {ratios[shrunk[0]]:g}) has "
                          "no opset-17 form")


def _symmetric_or_refuse(node: gs.Node, scales, shape) -> None:
    """half_pixel_symmetric shifts by (1 - out_int/out) · d/2: nothing when every output size is
    exactly scale·d (always so for sizes), where it is half_pixel."""
    if text(node, "coordinate_transformation_mode", "half_pixel") != "half_pixel_symmetric":
        return
    if scales is not None:
        if shape is None:
            raise Unadaptable("half_pixel_symmetric with scales needs the input shape (give --input-shape)")
        inexact = [a for a, (s, d) in enumerate(zip(scales, shape)) if float(np.float32(s) * d) % 1.0]
        if inexact:
            raise Unadaptable(f"coordinate_transformation_mode='half_pixel_symmetric' with a fractional output "
                              f"size on axis {inexact[0]} has no opset-17 form")
    node.attrs["coordinate_transformation_mode"] = "half_pixel"


def _full_roi(rw, node: gs.Node, axes: list[int], rank: int):
    if len(node.inputs) < 2 or is_absent(node.inputs[1]) or len(axes) == rank:
        return node.inputs[1] if len(node.inputs) > 1 else gs.Variable.empty()
    roi = constant_array(node, 1, "roi")
    if roi.size == 0:
        return node.inputs[1]
    starts, ends = [0.0] * rank, [1.0] * rank
    for i, axis in enumerate(axes):
        starts[axis], ends[axis] = float(roi[i]), float(roi[i + len(axes)])
    return rw.const("roi", np.asarray(starts + ends, np.float32), dtype=np.float32)
