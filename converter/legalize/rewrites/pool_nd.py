"""3-D max and average pools as two 2-D pools (exact), for targets with 2-D pools only.

A pooling window is a box, and both reductions are separable over its axes: the maximum over a
box is the maximum over time of the per-frame spatial maxima, and the average over a box divides
by a count that is a product of per-axis counts (each axis clips its window to the padded input
with ``ceil_mode``, and to the input itself without ``count_include_pad``; onnxruntime computes
the 3-D pool size as exactly that product).  So

    y = pool_t(pool_hw(x)):  x[N, C, T, H, W] ─► [N, C·T, H, W] ─► 2-D pool (kh, kw)
                             ─► [N, C, T, H'·W'] ─► 2-D pool (kt, 1) ─► [N, C, T', H', W']

with the spatial and temporal strides, pads, dilations, ``ceil_mode`` and ``count_include_pad``
split accordingly; only the order of the float additions of an average changes.  S3D's 13 3-D
max pools were custom layers on TFLite, TNN and MACE (TFLite has no MaxPool3D builtin,
google-ai-edge/LiteRT@f674577:tflite/kernels/pooling3d.cc#L33, and edgeconv's TNN and MACE
exporters write 2-D pools).  Declined: ``auto_pad`` SAME_* (pads not explicit), a used Indices
output, shapes that are not static.
"""

from __future__ import annotations

from ...ir.graph import attr, static_shape
from .base import all_of, float_input, only_first_output_used, rule


def _decoded(v):
    return v.decode() if isinstance(v, bytes) else v


def _pool3d_ok(node, graph):
    x, y = static_shape(node.inputs[0]), static_shape(node.outputs[0])
    if x is None or len(x) != 5 or y is None:
        return "not a 3-D pool with static shapes"
    if _decoded(attr(node, "auto_pad", "NOTSET")) not in ("NOTSET", "VALID"):
        return "pads come from auto_pad SAME_*"
    if int(attr(node, "storage_order", 0)):
        return "storage_order is column-major"
    return None


def _geometry(node):
    """(kernel, strides, dilations, pads begin, pads end), three entries each."""
    kernel = [int(k) for k in attr(node, "kernel_shape")]
    strides = [int(s) for s in attr(node, "strides", [1, 1, 1])]
    dil = [int(d) for d in attr(node, "dilations", [1, 1, 1])]
    valid = _decoded(attr(node, "auto_pad", "NOTSET")) == "VALID"
    pads = [0] * 6 if valid else [int(p) for p in attr(node, "pads", [0] * 6)]
    return kernel, strides, dil, pads[:3], pads[3:]


def _pool2d(rw, node, x, kernel, strides, dil, begin, end):
    """The 2-D pool of ``node``'s kind on ``x`` (None when the window is one element, stride 1)."""
    if kernel == [1, 1] and strides == [1, 1] and not any(begin + end):
        return None
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": begin + end,
             "ceil_mode": int(attr(node, "ceil_mode", 0))}
    if node.op == "MaxPool":
        attrs["dilations"] = dil
    else:
        attrs["count_include_pad"] = int(attr(node, "count_include_pad", 0))
        if dil != [1, 1]:  # AveragePool has dilations from opset 19
            attrs["dilations"] = dil
    return rw.emit(node.op, [x], attrs)


def _pool3d_to_2d(rw, node):
    n, c, t, h, w = static_shape(node.inputs[0])
    t_out, h_out, w_out = static_shape(rw.outputs[0])[2:]
    kernel, strides, dil, begin, end = _geometry(node)
    frames = rw.reshape(node.inputs[0], [n, c * t, h, w])
    spatial = _pool2d(rw, node, frames, kernel[1:], strides[1:], dil[1:], begin[1:], end[1:]) or frames
    series = rw.reshape(spatial, [n, c, t, h_out * w_out])
    temporal = _pool2d(rw, node, series, [kernel[0], 1], [strides[0], 1], [dil[0], 1],
                       [begin[0], 0], [end[0], 0]) or series
    rw.reshape(temporal, [n, c, t_out, h_out, w_out], outputs=rw.outputs[:1])


_ok = all_of(_pool3d_ok, only_first_output_used, float_input)


@rule("MaxPool", emits=["Reshape", "MaxPool"], when=_ok)
def maxpool3d_to_2d(rw, node):
    """before: x[N, C, T, H, W] ─► MaxPool(kt, kh, kw) ─► y[N, C, T', H', W']
    after:  x ─► Reshape[N, C·T, H, W] ─► MaxPool(kh, kw) ─► Reshape[N, C, T, H'·W']
              ─► MaxPool(kt, 1) ─► Reshape[N, C, T', H', W'] ─► y
    """
    _pool3d_to_2d(rw, node)


@rule("AveragePool", emits=["Reshape", "AveragePool"], when=_ok)
def averagepool3d_to_2d(rw, node):
    """before: x[N, C, T, H, W] ─► AveragePool(kt, kh, kw) ─► y[N, C, T', H', W']
    after:  x ─► Reshape[N, C·T, H, W] ─► AveragePool(kh, kw) ─► Reshape[N, C, T, H'·W']
              ─► AveragePool(kt, 1) ─► Reshape[N, C, T', H', W'] ─► y
    """
    _pool3d_to_2d(rw, node)
