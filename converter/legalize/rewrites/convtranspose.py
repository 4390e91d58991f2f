"""ConvTranspose for targets without it: the exact sub-pixel form, and a retrain form.

A strided transposed convolution is a stride-1 convolution producing ``∏s`` phases per output
channel, interleaved by a depth-to-space rearrangement (paper's scenario 2, done exactly).
Per spatial axis (stride s, kernel K, dilation d), the full output is
``y[s·q + r] = Σ_k x[q − m] · w[k]`` over the taps with ``k·d = r + s·m`` (m ≥ 0): phase ``r``
is a correlation with the taps ``k ≡ r/d (mod s)``, reversed.  With ``M = ⌊d(K−1)/s⌋`` every
phase fits a kernel of ``M + 1`` taps (zeros where a phase has no tap) and a left padding ``M``.
``pads``/``output_padding``/``output_shape``/``auto_pad`` only choose which window of the full
output is kept: a Slice.  Groups carry over as Conv groups (channel = co·∏s + phase).

Exact in every case below, checked against onnxruntime (tests/test_rewrites_convtranspose.py):
1-D and 2-D (and 3-D) with any stride, kernel, dilation, pads, output_padding, groups, bias.
Exact transfer is impossible — the ``retrain`` rule :func:`convtranspose_to_resize_conv` — when
the target can express none of the rearrangements: no ConvTranspose, no DepthToSpace and no
Reshape/Transpose of rank 2 + 2·(spatial rank) (6-D for images; many GPU/NPU delegates stop at
4-D).  Then the only 4-D-only spelling is nearest Resize + Conv, whose phases share one kernel
and so cannot represent a general transposed convolution; its weights must be fitted.
Not handled (the rules decline, with the reason): non-constant weights, dynamic spatial input
shapes, an ``output_shape`` larger than the full output (negative padding).
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np

from ...ir.graph import attr, static_shape
from .base import RETRAIN, const_input, present, rule


@dataclass(frozen=True)
class TransposeGeometry:
    """Per-axis sizes of one ConvTranspose (all tuples over the spatial axes)."""

    in_size: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    pad_begin: tuple[int, ...]
    out_size: tuple[int, ...]
    group: int

    @property
    def taps(self) -> tuple[int, ...]:
        """M + 1: the phase kernel size."""
        return tuple(d * (k - 1) // s + 1 for k, s, d in zip(self.kernel, self.stride, self.dilation))

    @property
    def conv_pad_end(self) -> tuple[int, ...]:
        # Phases needed: q < ceil((pad_begin + out) / s); the conv yields in_size + pad_end of them.
        return tuple(max(0, -(-(b + o) // s) - n)
                     for b, o, s, n in zip(self.pad_begin, self.out_size, self.stride, self.in_size))


def _decode(v):
    return v.decode() if isinstance(v, bytes) else v


def geometry(node) -> TransposeGeometry | str:
    """The geometry of a ConvTranspose node, or the reason it cannot be computed."""
    x_shape = static_shape(node.inputs[0])
    w = const_input(node, 1)
    if w is None:
        return "weights are not constants"
    if x_shape is None:
        return "input spatial shape is not static"
    nd = w.ndim - 2
    ones = [1] * nd
    kernel = tuple(int(k) for k in (attr(node, "kernel_shape") or w.shape[2:]))
    stride = tuple(int(s) for s in (attr(node, "strides") or ones))
    dil = tuple(int(d) for d in (attr(node, "dilations") or ones))
    adj = tuple(int(a) for a in (attr(node, "output_padding") or [0] * nd))
    pads = [int(p) for p in (attr(node, "pads") or [0] * (2 * nd))]
    auto_pad = _decode(attr(node, "auto_pad", "NOTSET"))
    in_size = tuple(int(v) for v in x_shape[2:])
    full = [s * (n - 1) + a + d * (k - 1) + 1 for s, n, a, d, k in zip(stride, in_size, adj, dil, kernel)]
    output_shape = attr(node, "output_shape")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        # ONNX ConvTranspose spec: total_padding = full - output_shape, split by auto_pad.
        if output_shape is not None:
            out = [int(v) for v in list(output_shape)[-nd:]]
        else:
            out = [n * s for n, s in zip(in_size, stride)]
        total = [f - o for f, o in zip(full, out)]
        if min(total) < 0:
            return "output_shape is larger than the full transposed-convolution output"
        if auto_pad == "SAME_UPPER":
            begin = [t // 2 for t in total]
        else:
            begin = [t - t // 2 for t in total]
    elif auto_pad == "VALID":
        begin, out = [0] * nd, full
    else:
        begin = pads[:nd]
        out = [f - b - e for f, b, e in zip(full, pads[:nd], pads[nd:])]
    if min(out) <= 0:
        return "empty output"
    return TransposeGeometry(in_size, kernel, stride, dil, tuple(begin), tuple(out), int(attr(node, "group", 1)))


def phase_selector(kernel: int, stride: int, dilation: int) -> np.ndarray:
    """S[r, t, k] = 1 where tap k of the transposed kernel lands in phase r at conv tap t."""
    m = dilation * (kernel - 1) // stride
    sel = np.zeros((stride, m + 1, kernel))
    for k in range(kernel):
        r, j = (k * dilation) % stride, (k * dilation) // stride
        sel[r, m - j, k] = 1.0
    return sel


def subpixel_weights(w: np.ndarray, bias: np.ndarray | None, geo: TransposeGeometry):
    """ConvTranspose weight (Cin, Cout/g, K…) → Conv weight (Cout·∏s, Cin/g, (M+1)…) and bias."""
    nd = w.ndim - 2
    g = geo.group
    cin, cout_g = w.shape[0], w.shape[1]
    wg = w.astype(np.float64).reshape((g, cin // g, cout_g) + w.shape[2:])
    letters = iter(string.ascii_letters)
    G, I, O = next(letters), next(letters), next(letters)
    ks = [next(letters) for _ in range(nd)]
    rs = [next(letters) for _ in range(nd)]
    ts = [next(letters) for _ in range(nd)]
    spec = (G + I + O + "".join(ks) + "," + ",".join(r + t + k for r, t, k in zip(rs, ts, ks))
            + "->" + G + O + "".join(rs) + I + "".join(ts))
    sels = [phase_selector(k, s, d) for k, s, d in zip(geo.kernel, geo.stride, geo.dilation)]
    wp = np.einsum(spec, wg, *sels)
    phases = int(np.prod(geo.stride))
    conv_w = wp.reshape((g * cout_g * phases, cin // g) + geo.taps).astype(w.dtype)
    conv_b = None if bias is None else np.repeat(bias.astype(np.float64), phases).astype(bias.dtype)
    return conv_w, conv_b


def _subpixel_ok(node, graph):
    geo = geometry(node)
    if isinstance(geo, str):
        return geo
    if present(node, 2) and const_input(node, 2) is None:
        return "bias is not a constant"
    return None


def _emit_subpixel_conv(rw, node, geo):
    w = const_input(node, 1)
    bias = const_input(node, 2) if present(node, 2) else None
    conv_w, conv_b = subpixel_weights(w, bias, geo)
    ins = [node.inputs[0], rw.const("W_subpixel", conv_w, dtype=w.dtype)]
    if conv_b is not None:
        ins.append(rw.const("B_subpixel", conv_b, dtype=bias.dtype))
    pads = [t - 1 for t in geo.taps] + list(geo.conv_pad_end)
    return rw.emit("Conv", ins, {"kernel_shape": list(geo.taps), "pads": pads,
                                 "strides": [1] * len(geo.taps), "dilations": [1] * len(geo.taps),
                                 "group": geo.group}), w.shape[1] * geo.group


@rule("ConvTranspose", emits=["Conv", "Reshape", "Transpose", "Slice"], when=_subpixel_ok)
def convtranspose_to_subpixel(rw, node):
    """Exact: stride-1 Conv with Cout·∏s channels, depth-to-space by Reshape/Transpose, crop.

    before: x[N,Cin,H,W] ─► ConvTranspose(W, b; s, K, pads, output_padding, dilation, group) ─► y
    after:  x ─► Conv(W′[Cout·s·s, Cin/g, M+1, M+1], b′; pads=[M, M, e, e]) ─► Reshape[N,Cout,s,s,H′,W′]
              ─► Transpose(0,1,4,2,5,3) ─► Reshape[N,Cout,H′·s,W′·s] ─► Slice(pads window) ─► y
    """
    geo = geometry(node)
    y, cout = _emit_subpixel_conv(rw, node, geo)
    nd = len(geo.stride)
    if any(s > 1 for s in geo.stride):
        hs = [n + e for n, e in zip(geo.in_size, geo.conv_pad_end)]
        y = rw.reshape(y, [0, cout] + list(geo.stride) + hs)
        perm = [0, 1] + [a for i in range(nd) for a in (2 + nd + i, 2 + i)]
        y = rw.emit("Transpose", [y], {"perm": perm})
        y = rw.reshape(y, [0, cout] + [h * s for h, s in zip(hs, geo.stride)])
    _finish(rw, y, geo)


def _finish(rw, y, geo):
    sizes = [(n + e) * s for n, e, s in zip(geo.in_size, geo.conv_pad_end, geo.stride)]
    if list(geo.pad_begin) == [0] * len(sizes) and list(geo.out_size) == sizes:
        # No crop: the last node must write the original output tensor.
        producer = y.inputs[0]
        producer.outputs[0] = rw.outputs[0]
        return
    rw.slice(y, geo.pad_begin, [b + o for b, o in zip(geo.pad_begin, geo.out_size)],
             range(2, 2 + len(sizes)), outputs=rw.outputs[:1])


def _square_2d(node, graph):
    why = _subpixel_ok(node, graph)
    if why:
        return why
    geo = geometry(node)
    if len(geo.stride) != 2 or geo.stride[0] != geo.stride[1]:
        return "DepthToSpace needs a 2-D ConvTranspose with equal strides"
    return None


@rule("ConvTranspose", emits=["Conv", "DepthToSpace", "Slice"], when=_square_2d)
def convtranspose_to_depth_to_space(rw, node):
    """Exact, for targets with DepthToSpace (PixelShuffle) but not 6-D Reshape/Transpose.

    before: x ─► ConvTranspose(W, b; s, …) ─► y
    after:  x ─► Conv(W′[Cout·s·s, …], b′) ─► DepthToSpace(s, mode=CRD) ─► Slice(pads window) ─► y
    """
    geo = geometry(node)
    y, _ = _emit_subpixel_conv(rw, node, geo)
    if geo.stride[0] > 1:
        y = rw.emit("DepthToSpace", [y], {"blocksize": geo.stride[0], "mode": "CRD"})
    _finish(rw, y, geo)


# ---------------------------------------------------------------------------------------------
# The retrain case: nearest upsampling + Conv (4-D only).


@dataclass(frozen=True)
class ResizeConvGeometry:
    scale: tuple[int, ...]
    kernel: tuple[int, ...]
    dilation: tuple[int, ...]
    pads: tuple[int, ...]          # Conv pads (begin…, end…), non-negative
    crop_begin: tuple[int, ...]    # where the kept window starts in the Conv output
    out_size: tuple[int, ...]


def resize_conv_geometry(geo: TransposeGeometry) -> ResizeConvGeometry:
    """Align tap k of the transposed kernel with tap K−1−k of a Conv over the upsampled input."""
    begin, end, crop = [], [], []
    for n, k, s, d, pb, out in zip(geo.in_size, geo.kernel, geo.stride, geo.dilation,
                                   geo.pad_begin, geo.out_size):
        p_begin = d * (k - 1) - pb
        p_end = out - n * s + pb
        crop.append(max(0, -p_begin))
        begin.append(max(0, p_begin))
        end.append(max(0, p_end) + max(0, -p_begin))
    return ResizeConvGeometry(geo.stride, geo.kernel, geo.dilation, tuple(begin + end), tuple(crop),
                              geo.out_size)


def resize_conv_init(w: np.ndarray, group: int, stride) -> np.ndarray:
    """Initial Conv weight: the transposed kernel flipped, averaged over the ∏s copies that
    nearest upsampling makes of each input value.  (Fitted afterwards; see retrain.py.)"""
    nd = w.ndim - 2
    cin, cout_g = w.shape[0], w.shape[1]
    wg = w.reshape((group, cin // group, cout_g) + w.shape[2:]).swapaxes(1, 2)
    conv = wg.reshape((group * cout_g, cin // group) + w.shape[2:])
    conv = np.flip(conv, axis=tuple(range(2, 2 + nd)))
    return np.ascontiguousarray(conv / float(np.prod(stride))).astype(w.dtype)


def _resize_conv_ok(node, graph):
    why = _subpixel_ok(node, graph)
    if why:
        return why
    if len(geometry(node).stride) not in (1, 2):
        return "only 1-D and 2-D"
    return None


@rule("ConvTranspose", emits=["Resize", "Conv", "Slice"], kind=RETRAIN, when=_resize_conv_ok)
def convtranspose_to_resize_conv(rw, node):
    """Architecture change (weights must be fitted): nearest upsampling then a Conv.

    before: x ─► ConvTranspose(W, b; s, K, pads, …) ─► y
    after:  x ─► Resize(nearest, ×s) ─► Conv(flip(W)/∏s, b; K, pads′) ─► Slice ─► y
    """
    geo = geometry(node)
    rc = resize_conv_geometry(geo)
    w = const_input(node, 1)
    nd = len(geo.stride)
    scales = rw.const("scales", [1.0, 1.0] + [float(s) for s in geo.stride], dtype=np.float32)
    roi = rw.const("roi", np.zeros(0, np.float32), dtype=np.float32)
    up = rw.emit("Resize", [node.inputs[0], roi, scales],
                 {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"})
    ins = [up, rw.const("W_resize_conv", resize_conv_init(w, geo.group, geo.stride), dtype=w.dtype)]
    if present(node, 2):
        ins.append(node.inputs[2])
    y = rw.emit("Conv", ins, {"kernel_shape": list(geo.kernel), "pads": list(rc.pads),
                              "dilations": list(geo.dilation), "strides": [1] * nd, "group": geo.group})
    conv_len = [n * s + rc.pads[i] + rc.pads[nd + i] - d * (k - 1)
                for i, (n, s, k, d) in enumerate(zip(geo.in_size, geo.stride, geo.kernel, geo.dilation))]
    if list(rc.crop_begin) == [0] * nd and conv_len == list(geo.out_size):
        y.inputs[0].outputs[0] = rw.outputs[0]
    else:
        rw.slice(y, rc.crop_begin, [c + o for c, o in zip(rc.crop_begin, geo.out_size)],
                 range(2, 2 + nd), outputs=rw.outputs[:1])
