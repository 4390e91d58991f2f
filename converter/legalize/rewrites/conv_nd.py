"""1-D and 3-D convolutions as 2-D ones (exact), for targets whose runtime (or exporter) has 2-D
convolutions only.

TNN has a ``Convolution3D`` layer, but only its naive CPU and CUDA devices implement it
(Tencent/TNN@f0cb081:source/tnn/device/cpu/acc/cpu_conv_3d_layer_acc.cc#L160,
source/tnn/device/cuda/acc/cuda_conv_3d_layer_acc.cu#L226; no x86/ARM/OpenCL/Metal acc), and
edgeconv's TNN exporter writes 2-D ``Convolution`` layers only, so video models (R3D-18, X3D)
and 1-D audio convolutions need 2-D spellings.  A 3-D convolution is a sum over its temporal taps
of 2-D convolutions of time-shifted frames:

    y[n, :, t] = b + Σ_i conv2d(x_pad[n, :, t·s_t + i·d_t], W[:, :, i])

so the frames each tap reads are sliced out of the time-padded input (one strided Slice per tap,
rank 4), stacked into the batch, convolved in 2-D (the groups, spatial strides/dilations/pads are
the 3-D ones), and summed.  Only the order of the float additions changes.  A 1-D convolution is
the 2-D one on an ``H = 1`` view.
"""

from __future__ import annotations

from ...ir.graph import attr, static_shape
from .base import const_input, float_input, present, rule


def _conv3d_ok(node, graph):
    x = static_shape(node.inputs[0])
    w = const_input(node, 1)
    if x is None or len(x) != 5 or static_shape(node.outputs[0]) is None:
        return "not a 3-D convolution with static shapes"
    if w is None:
        return "weights are not constants"
    if present(node, 2) and const_input(node, 2) is None:
        return "bias is not a constant"
    auto_pad = attr(node, "auto_pad", "NOTSET")
    if (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) not in ("NOTSET", "VALID"):
        return "pads come from auto_pad"
    return float_input(node, graph)


@rule("Conv", emits=["Reshape", "Pad", "Transpose", "Slice", "Conv", "Add"], when=_conv3d_ok)
def conv3d_to_conv2d(rw, node):
    """before: x[N, C, T, H, W] ─► Conv(W[O, C/g, kt, kh, kw], 3-D) ─► y[N, O, T', H', W']
    after:  x ─► Reshape[N, C, T, H·W] ─► Pad(time) ─► Transpose(0,2,1,3) ─► [N, Tp, C, H·W]
              ─► per tap i: Slice(time, i·d_t :: s_t) ─► Reshape[N·T', C, H, W] ─► Conv(W[:, :, i], 2-D)
              ─► Add over taps ─► Reshape[N, T', O, H'·W'] ─► Transpose(0,2,1,3) ─► Reshape ─► y
    """
    n, c, t, h, w_ = static_shape(node.inputs[0])
    weight = const_input(node, 1)
    o, kt = weight.shape[0], weight.shape[2]
    t_out, h_out, w_out = static_shape(rw.outputs[0])[2:]
    strides = [int(s) for s in attr(node, "strides", [1, 1, 1])]
    dil = [int(d) for d in attr(node, "dilations", [1, 1, 1])]
    auto_pad = attr(node, "auto_pad", "NOTSET")
    valid = (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) == "VALID"
    pads = [0] * 6 if valid else [int(p) for p in attr(node, "pads", [0] * 6)]
    x = rw.reshape(node.inputs[0], [n, c, t, h * w_])
    if pads[0] or pads[3]:
        x = rw.emit("Pad", [x, rw.ints("pads", [0, 0, pads[0], 0, 0, 0, pads[3], 0])], {"mode": "constant"})
    frames = rw.emit("Transpose", [x], {"perm": [0, 2, 1, 3]})                      # [N, Tp, C, H·W]
    conv_attrs = {"strides": strides[1:], "dilations": dil[1:], "pads": pads[1:3] + pads[4:6],
                  "group": int(attr(node, "group", 1)), "kernel_shape": list(weight.shape[3:])}
    total = None
    for i in range(kt):
        start = i * dil[0]
        picked = rw.emit("Slice", [frames, rw.ints("starts", [start]), rw.ints("ends", [start + strides[0] * (t_out - 1) + 1]),
                                   rw.ints("axes", [1]), rw.ints("steps", [strides[0]])])
        batch = rw.reshape(picked, [n * t_out, c, h, w_])
        ins = [batch, rw.const(f"W_t{i}", weight[:, :, i], dtype=weight.dtype)]
        if i == 0 and present(node, 2):
            ins.append(node.inputs[2])
        y = rw.emit("Conv", ins, conv_attrs)
        total = y if total is None else rw.emit("Add", [total, y])
    per_frame = rw.reshape(total, [n, t_out, o, h_out * w_out])
    back = rw.emit("Transpose", [per_frame], {"perm": [0, 2, 1, 3]})                # [N, O, T', H'·W']
    rw.reshape(back, [n, o, t_out, h_out, w_out], outputs=rw.outputs[:1])


def _conv1d_ok(node, graph):
    x = static_shape(node.inputs[0])
    if x is None or len(x) != 3 or static_shape(node.outputs[0]) is None:
        return "not a 1-D convolution with static shapes"
    if const_input(node, 1) is None:
        return "weights are not constants"
    return float_input(node, graph)


@rule("Conv", emits=["Reshape", "Conv"], when=_conv1d_ok)
def conv1d_to_conv2d(rw, node):
    """before: x[N, C, L] ─► Conv(W[O, C/g, k], strides s, dilations d, pads [p0, p1]) ─► y[N, O, L']
    after:  x ─► Reshape[N, C, 1, L] ─► Conv(W[O, C/g, 1, k], [1, s], [1, d], pads [0, p0, 0, p1]) ─► Reshape ─► y
    """
    n, c, length = static_shape(node.inputs[0])
    w = const_input(node, 1)
    attrs = dict(node.attrs)
    for name, lead in (("kernel_shape", 1), ("strides", 1), ("dilations", 1)):
        if name in attrs:
            attrs[name] = [lead] + [int(v) for v in attrs[name]]
    if "pads" in attrs:
        p = [int(v) for v in attrs["pads"]]
        attrs["pads"] = [0, p[0], 0, p[1]]
    flat = rw.reshape(node.inputs[0], [n, c, 1, length])
    y = rw.emit("Conv", [flat, rw.const("W_2d", w[:, :, None, :], dtype=w.dtype)] + list(node.inputs[2:]), attrs)
    rw.reshape(y, list(static_shape(rw.outputs[0])), outputs=rw.outputs[:1])
