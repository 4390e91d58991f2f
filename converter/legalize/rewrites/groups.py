"""Grouped convolutions as one convolution per group, or as a depthwise one (exact).

A convolution with ``group = g`` is ``g`` independent convolutions over consecutive channel
slices, concatenated: NNAPI's CONV_2D takes no groups before NNAPI 1.2 (and its GROUPED_CONV_2D
no dilations), MACE has no grouped Conv2D, and targets' transposed convolutions differ in which
groups they take.  A *multiplier* convolution (``group = C_in``, ``C_out = m·C_in``) is a depthwise
one (``group = C_out``) over the input channels each repeated ``m`` times.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import attr, static_shape
from .base import const_input, float_input, present, rule


def _channels(node):
    """(group, C_in, C_out) of a Conv/ConvTranspose with constant weights, or a reason."""
    group = int(attr(node, "group", 1))
    w = const_input(node, 1)
    x = static_shape(node.inputs[0])
    if w is None:
        return "weights are not constants"
    if x is None or len(x) < 3:
        return "input channels unknown"
    if present(node, 2) and const_input(node, 2) is None:
        return "bias is not a constant"
    c_out = w.shape[0] if node.op == "Conv" else w.shape[1] * group
    return group, x[1], c_out


def _split_ok(node, graph):
    got = _channels(node)
    if isinstance(got, str):
        return got
    group, c_in, c_out = got
    if group == 1:
        return "group = 1"
    if node.op == "Conv" and group == c_in == c_out:
        return "depthwise (group = C_in = C_out) is one convolution"
    return float_input(node, graph)


def _split_per_group(rw, node):
    group, c_in, c_out = _channels(node)
    x, w = node.inputs[0], const_input(node, 1)
    b = const_input(node, 2) if present(node, 2) else None
    cin_g, cout_g = c_in // group, c_out // group
    sizes = [cin_g] * group
    parts = (rw.emit("Split", [x, rw.ints("split", sizes)], {"axis": 1}, n_out=group) if rw.opset >= 13
             else rw.emit("Split", [x], {"axis": 1, "split": sizes}, n_out=group))
    attrs = {k: v for k, v in node.attrs.items() if k != "group"}
    outs = []
    for g, part in enumerate(parts):
        # Conv weight [C_out, C_in/g, k…]: group g owns output rows; ConvTranspose [C_in, C_out/g, k…]: input rows.
        w_g = w[g * cout_g:(g + 1) * cout_g] if node.op == "Conv" else w[g * cin_g:(g + 1) * cin_g]
        ins = [part, rw.const(f"W_g{g}", w_g, dtype=w.dtype)]
        if b is not None:
            ins.append(rw.const(f"B_g{g}", b[g * cout_g:(g + 1) * cout_g], dtype=b.dtype))
        outs.append(rw.emit(node.op, ins, attrs))
    rw.out("Concat", outs, {"axis": 1})


@rule("Conv", emits=["Split", "Conv", "Concat"], when=_split_ok)
def conv_group_split(rw, node):
    """before: x[N, C_in] ─► Conv(group g) ─► y[N, C_out]
    after:  x ─► Split(axis 1, g × C_in/g) ─► Conv_i(W rows i·C_out/g…, group 1) ─► Concat(axis 1) ─► y
    """
    _split_per_group(rw, node)


@rule("ConvTranspose", emits=["Split", "ConvTranspose", "Concat"], when=_split_ok)
def convtranspose_group_split(rw, node):
    """before: x[N, C_in] ─► ConvTranspose(group g, dilations, strides…) ─► y[N, C_out]
    after:  x ─► Split(axis 1) ─► ConvTranspose_i(W rows i·C_in/g…, group 1) ─► Concat(axis 1) ─► y
    """
    _split_per_group(rw, node)


def _multiplier_ok(node, graph):
    got = _channels(node)
    if isinstance(got, str):
        return got
    group, c_in, c_out = got
    if not (group == c_in and c_out % c_in == 0 and c_out > c_in):
        return "not a depthwise convolution with a channel multiplier > 1"
    return float_input(node, graph)


@rule("Conv", emits=["Gather", "Conv"], when=_multiplier_ok)
def conv_multiplier_to_depthwise(rw, node):
    """Output channel o of a multiplier convolution reads input channel o // m only.

    before: x[N, C] ─► Conv(group C, W[m·C, 1, k…]) ─► y[N, m·C]
    after:  x ─► Gather(axis 1, [0,…,0, 1,…,1, …] each m times) ─► Conv(group m·C, same W) ─► y
    """
    _, c_in, c_out = _channels(node)
    repeat = np.repeat(np.arange(c_in, dtype=np.int64), c_out // c_in)
    spread = rw.emit("Gather", [node.inputs[0], rw.ints("channels", repeat)], {"axis": 1})
    rw.out("Conv", [spread] + list(node.inputs[1:]), dict(node.attrs, group=c_out))
