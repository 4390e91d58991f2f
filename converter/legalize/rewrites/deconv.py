"""ConvTranspose attributes a target's transposed convolution lacks (exact).

* ``output_padding``: ONNX adds it to the end of each spatial axis *after* cropping ``pads``.
  Where it is at most the end pad, it only crops less; beyond the end pad the extra rows lie
  outside the full transposed-convolution output, so they hold the bias alone.  CoreML's and
  TNN's exporters fold it into the end crop and stop there; MACE's converter takes none.
* ``dilations``: a dilated kernel is the kernel with ``d − 1`` zeros between taps (MACE's
  Deconv2D has no dilations).
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import attr
from .base import const_input, float_input, present, rule


def _explicit(node):
    auto_pad = attr(node, "auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad not in ("NOTSET", "VALID") or attr(node, "output_shape") is not None:
        return "pads come from auto_pad / output_shape"
    return None


def _output_padding_ok(node, graph):
    if not any(int(a) for a in attr(node, "output_padding", []) or []):
        return "no output_padding"
    if present(node, 2) and const_input(node, 2) is None:
        return "bias is not a constant"
    return _explicit(node) or float_input(node, graph)


@rule("ConvTranspose", emits=["ConvTranspose", "Pad", "Add"], when=_output_padding_ok)
def convtranspose_output_padding_to_pad(rw, node):
    """before: x ─► ConvTranspose(pads [b…, e…], output_padding a, bias B) ─► y
    after:  x ─► ConvTranspose(pads [b…, max(e − a, 0)…], no output_padding, no bias)
              ─► Pad(end: max(a − e, 0) zeros) ─► Add(B[C,1,1]) ─► y
    (where every a ≤ e: only the ConvTranspose, bias kept; no Pad or Add)
    """
    adj = [int(a) for a in attr(node, "output_padding")]
    nd = len(adj)
    auto_pad = attr(node, "auto_pad", "NOTSET")
    pads = [0] * (2 * nd) if (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) == "VALID" else \
        [int(p) for p in (attr(node, "pads") or [0] * (2 * nd))]
    end = [max(pads[nd + i] - adj[i], 0) for i in range(nd)]
    extra = [max(adj[i] - pads[nd + i], 0) for i in range(nd)]
    attrs = {k: v for k, v in node.attrs.items() if k not in ("output_padding", "auto_pad")}
    attrs["pads"] = pads[:nd] + end
    if not any(extra):
        rw.out("ConvTranspose", list(node.inputs), attrs)
        return
    y = rw.emit("ConvTranspose", list(node.inputs[:2]), attrs)
    pad = rw.ints("pads", [0] * (nd + 2) + [0, 0] + extra)
    if not present(node, 2):
        rw.out("Pad", [y, pad], {"mode": "constant"})
        return
    bias = const_input(node, 2)
    padded = rw.emit("Pad", [y, pad], {"mode": "constant"})
    rw.out("Add", [padded, rw.const("B", bias.reshape((-1,) + (1,) * nd), dtype=bias.dtype)])


def _dilated(node, graph):
    if all(int(d) == 1 for d in attr(node, "dilations", []) or []):
        return "no dilations"
    if const_input(node, 1) is None:
        return "weights are not constants"
    return float_input(node, graph)


@rule("ConvTranspose", emits=["ConvTranspose"], when=_dilated)
def convtranspose_undilate(rw, node):
    """before: x ─► ConvTranspose(W[…, k], dilations d) ─► y
    after:  x ─► ConvTranspose(W' = W with d − 1 zeros between taps, kernel (k − 1)·d + 1) ─► y
    """
    w = const_input(node, 1)
    dil = [int(d) for d in attr(node, "dilations")]
    kernel = [(k - 1) * d + 1 for k, d in zip(w.shape[2:], dil)]
    spread = np.zeros(w.shape[:2] + tuple(kernel), dtype=w.dtype)
    spread[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in dil)] = w
    attrs = dict(node.attrs, dilations=[1] * len(dil), kernel_shape=kernel)
    rw.out("ConvTranspose", [node.inputs[0], rw.const("W_undilated", spread, dtype=w.dtype)] + list(node.inputs[2:]), attrs)
