"""Kernel taps that read only zero padding, dropped from a convolution (exact).

A tap of a convolution kernel whose every read falls in the padding multiplies zeros: removing
it (and the padding only it needed) leaves every output element the same sum of the same
products.  Dilated convolutions on small feature maps have such taps: DeepLabV3's ASPP branches
(rates 12, 24, 36) on a 4x4 map read only their centre tap, so each is a 1x1 convolution.  TNN's
x86 im2col writes outside its column block for such a tap (Tencent/TNN@f0cb081:source/tnn/device/
x86/acc/compute/x86_compute.cc#L46-L72; the matrix's ``taps: inside`` constraint), where the
trimmed kernel is correct and smaller.

Declined: weights that are not constants, unknown shapes, ``auto_pad`` SAME_*, a kernel whose
every tap reads only padding (its output is the bias alone), and trims that would need negative
pads (a crop first).
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import static_shape
from ...matrix.kinds_io import padding_only_taps
from .base import all_of, const_input, float_input, present, rule


def _kept(node, out_shape=None):
    """Per spatial axis the (first, last) tap that reads the input, and the new pads; or a reason."""
    bad = padding_only_taps(node, out_shape)
    w = const_input(node, 1)
    if bad is None or w is None:
        return "shapes, kernel or pads unknown, or weights not constant"
    if not bad:
        return "every tap reads the input"
    spatial = w.ndim - 2
    pads = [int(p) for p in node.attrs.get("pads", [0] * (2 * spatial))]
    dil = [int(d) for d in node.attrs.get("dilations", [1] * spatial)]
    kept, new_pads = [], list(pads)
    for axis in range(spatial):
        k = w.shape[2 + axis]
        inside = [t for t in range(k) if (axis, t) not in bad]
        if not inside:
            return "every tap of an axis reads only padding (the output is the bias)"
        first, last = inside[0], inside[-1]
        new_pads[axis] -= first * dil[axis]
        new_pads[spatial + axis] -= (k - 1 - last) * dil[axis]
        kept.append((first, last))
    if min(new_pads) < 0:
        return "the trimmed kernel would need negative pads"
    return kept, new_pads


def _trimmable(node, graph):
    if static_shape(node.outputs[0]) is None:
        return "output shape unknown"
    if present(node, 2) and const_input(node, 2) is None:
        return "bias is not a constant"
    found = _kept(node)
    return found if isinstance(found, str) else None


@rule("Conv", emits=["Conv"], when=all_of(_trimmable, float_input))
def conv_drop_padding_taps(rw, node):
    """before: x[1, C, 4, 4] ─► Conv(W[O, C, 3, 3], dilations 12, pads 12) ─► y
    after:  x ─► Conv(W[:, :, 1:2, 1:2], dilations 12, pads 0) ─► y       (the taps that read x)
    """
    kept, new_pads = _kept(node, static_shape(rw.outputs[0]))
    w = const_input(node, 1)
    trimmed = w[(slice(None), slice(None)) + tuple(slice(a, b + 1) for a, b in kept)]
    attrs = dict(node.attrs)
    attrs["pads"] = new_pads
    attrs["kernel_shape"] = list(trimmed.shape[2:])
    attrs.pop("auto_pad", None)
    rw.out("Conv", [node.inputs[0], rw.const("W_taps", np.ascontiguousarray(trimmed), dtype=w.dtype)]
           + list(node.inputs[2:]), attrs)
