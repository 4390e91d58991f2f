"""A spatial crop (Slice) as a depthwise Conv with a one-hot kernel, for targets without Slice.

Multiplying by 1 and adding exact zeros changes no bit, so the rule is exact.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import static_shape
from .base import const_input, float_input, present, rule


def _crop_window(node):
    """Per spatial axis (begin, end) cropped away, or None when the Slice is not such a crop."""
    shape = static_shape(node.inputs[0])
    if shape is None or len(shape) not in (3, 4) or len(node.inputs) < 3:
        return None
    starts, ends = const_input(node, 1), const_input(node, 2)
    if starts is None or ends is None:
        return None
    axes = const_input(node, 3) if present(node, 3) else np.arange(len(starts))
    steps = const_input(node, 4) if present(node, 4) else np.ones(len(starts), np.int64)
    if starts is None or ends is None or axes is None or steps is None or np.any(steps != 1):
        return None
    rank = len(shape)
    window = {a: (0, 0) for a in range(2, rank)}
    for s, e, a in zip(starts.tolist(), ends.tolist(), axes.tolist()):
        a = a + rank if a < 0 else a
        n = shape[a]
        s = min(max(s + n if s < 0 else s, 0), n)
        e = min(max(e + n if e < 0 else e, 0), n)
        if a < 2:
            if (s, e) != (0, n):
                return None
            continue
        if e <= s:
            return None
        window[a] = (s, n - e)
    return [window[a] for a in range(2, rank)]


def _is_spatial_crop(node, graph):
    if _crop_window(node) is None:
        return "not a step-1 crop of the spatial axes of a static 3-D/4-D tensor"
    return float_input(node, graph)


@rule("Slice", emits=["Conv"], when=_is_spatial_crop)
def slice_to_shift_conv(rw, node):
    """before: x[N,C,H,W] ─► Slice(starts=[a,b], ends=[H−c,W−d], axes=[2,3]) ─► y
    after:  x ─► Conv(group=C, W=one-hot at (a, b), kernel (a+c+1, b+d+1), no padding) ─► y
    """
    window = _crop_window(node)
    channels = static_shape(node.inputs[0])[1]
    kernel = [b + e + 1 for b, e in window]
    w = np.zeros([channels, 1] + kernel, dtype=rw.dtype)
    w[(slice(None), 0) + tuple(b for b, _ in window)] = 1.0
    rw.out("Conv", [node.inputs[0], rw.const("W_crop", w)], {"kernel_shape": kernel, "group": channels})
