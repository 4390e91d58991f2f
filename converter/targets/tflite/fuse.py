"""Fusions: two on the ONNX graph before lowering (onnx-graphsurgeon), three on the written ops.

ONNX level (``gs.Graph`` edits):
* :func:`fuse_gelu` — Erf-GELU -> one ``Gelu`` node (TFLite builtin GELU; no FlexErf).
* :func:`fold_crd_into_conv` — Conv -> DepthToSpace(CRD) becomes Conv' -> DepthToSpace(DCR).
* :func:`fold_channel_affine_into_conv` — per-channel (x - m) · a (input normalization) before
  a Conv goes into the Conv's weights and bias (plus a constant border correction when the Conv
  pads).

TFLite level (:class:`~.writer.ModelWriter` ops):
* :func:`fold_bias_add` — FULLY_CONNECTED(zero bias) -> ADD(const) becomes one FULLY_CONNECTED.
* :func:`fuse_activations` — CONV/FC/ADD/... -> RELU|RELU6|RELU_N1_TO_1 becomes the op with a
  fused activation (TFLite's ``fused_activation_function``).
* :func:`prune_dead_ops` — drop ops whose results nobody reads (e.g. a replaced bias' DEQUANTIZE).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs

from ...ir.graph import attr, constant_value
from ...matrix.patterns import gelu_erf
from .ops_nn import crd_to_dcr_channels

# -- ONNX level ------------------------------------------------------------------------------


def _only_consumer(t: gs.Tensor, graph: gs.Graph) -> gs.Node | None:
    if len(t.outputs) != 1 or t in graph.outputs:
        return None
    return t.outputs[0]


def fuse_gelu(graph: gs.Graph) -> int:
    """Rewrite the exact-GELU subgraph torch exports into one ``Gelu`` node.

    Before::  u = Div(x, 1.4142) | Mul(x, 0.7071);  e = Erf(u);  a = Add(e, 1)
              y = Mul(Mul(x, a), 0.5)   or   y = Mul(Mul(x, 0.5), a)
    After::   y = Gelu(x)                (lowered to the builtin GELU, approximate=False)

    The subgraph is the matrix's ``gelu_erf`` pattern (``converter/matrix/patterns.py``), so an
    Erf the support matrix accepts on TFLite is exactly an Erf fused here.  Intermediates that
    something else reads (or that are graph outputs) block the rewrite.  Returns the number of
    rewrites.
    """
    keep = {t.name for t in graph.outputs}
    count = 0
    for erf in [n for n in graph.nodes if n.op == "Erf"]:
        found = gelu_erf(erf, keep)
        if found is None:
            continue
        found.output.inputs[0].outputs.clear()  # detach y from the subgraph's last Mul
        graph.nodes.append(gs.Node("Gelu", name=f"{erf.name}/gelu", attrs={"approximate": "none"},
                                   inputs=[found.input], outputs=[found.output]))
        count += 1
    if count:
        graph.cleanup().toposort()
    return count


def fold_crd_into_conv(graph: gs.Graph) -> int:
    """Fold DepthToSpace's CRD channel order into the producing convolution's weights.

    Before::  c = Conv(x, W, b);  y = DepthToSpace(c, mode=CRD)
    After::   c' = Conv(x, W[order], b[order]);  y = DepthToSpace(c', mode=DCR)

    ``order`` = :func:`~.ops_nn.crd_to_dcr_channels`; TFLite's DEPTH_TO_SPACE is DCR.
    """
    count = 0
    for d2s in [n for n in graph.nodes if n.op == "DepthToSpace"]:
        mode = attr(d2s, "mode", "DCR")
        if (mode.decode() if isinstance(mode, bytes) else mode) != "CRD":
            continue
        src = d2s.inputs[0]
        if len(src.inputs) != 1 or _only_consumer(src, graph) is not d2s:
            continue
        conv = src.inputs[0]
        if conv.op != "Conv" or constant_value(conv.inputs[1]) is None:
            continue
        bias_t = conv.inputs[2] if len(conv.inputs) > 2 else None
        if bias_t is not None and constant_value(bias_t) is None:
            continue
        weights = np.asarray(constant_value(conv.inputs[1]))
        order = crd_to_dcr_channels(weights.shape[0], int(attr(d2s, "blocksize")))
        conv.inputs[1] = gs.Constant(f"{conv.name}/W_dcr", np.ascontiguousarray(weights[order]))
        if bias_t is not None:
            bias = np.asarray(constant_value(bias_t))
            conv.inputs[2] = gs.Constant(f"{conv.name}/B_dcr", np.ascontiguousarray(bias[order]))
        d2s.attrs["mode"] = "DCR"
        count += 1
    return count


def _per_channel(value, channels: int) -> np.ndarray | None:
    """A constant that broadcasts as ``[1, C, 1, 1]`` (or a scalar) -> its C values, else None."""
    if value is None:
        return None
    v = np.asarray(value)
    if v.ndim > 4 or not np.issubdtype(v.dtype, np.floating):
        return None
    shape = (1,) * (4 - v.ndim) + v.shape
    if shape[0] != 1 or shape[2] != 1 or shape[3] != 1 or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(v.reshape(-1).astype(np.float64), (channels,))


def _affine_step(node: gs.Node, channels: int):
    """``Sub/Add/Mul/Div(t, const)`` -> (t, shift, scale) meaning ``(t + shift) · scale``."""
    if node.op not in ("Sub", "Add", "Mul", "Div") or len(node.inputs) != 2:
        return None
    t, c = node.inputs
    v = _per_channel(constant_value(c), channels)
    if v is None or constant_value(t) is not None:
        return None
    if node.op == "Div" and np.any(v == 0):
        return None
    ones, zeros = np.ones(channels), np.zeros(channels)
    return t, {"Sub": -v, "Add": v}.get(node.op, zeros), {"Mul": v, "Div": 1.0 / v}.get(node.op, ones)


def _valid_taps(out: int, size: int, k: int, stride: int, dilation: int, pad: int) -> np.ndarray:
    """``[out, k]``: 1 where output position o's tap t reads inside the (unpadded) input."""
    pos = np.arange(out)[:, None] * stride - pad + np.arange(k)[None, :] * dilation
    return ((pos >= 0) & (pos < size)).astype(np.float64)


#: A padded Conv needs the border correction, a constant as large as its output: worth it for
#: narrow inputs (an image's 1-4 channels, slow as NHWC elementwise ops), not for feature maps.
_AFFINE_BORDER_MAX_CHANNELS = 4


def fold_channel_affine_into_conv(graph: gs.Graph) -> int:
    """Fold a per-channel affine map of a Conv's input into the Conv.

    Before::  u = Sub(x, m) | Add(x, m);  v = Div(u, s) | Mul(u, a);  y = Conv(v, W, b)
              (either step alone too; m, s, a per input channel: [1, C, 1, 1] or scalars)
    After::   y = Conv(x, W·a, b - K0) + (K0 - K)       (the Add only when the Conv pads)

    Exact up to float rounding: the Conv is linear, so Conv(pad0(a·(x - m))) =
    Conv(pad0(x), W·a) - K, where K[o, i, j] = Σ W[o, c, ky, kx]·a_c·m_c over the taps of output
    (i, j) that read inside the input.  K is K0 (all taps) everywhere but the border that reads
    padding, so the correction is zero inside.  Why: TFLite runs the affine map on NHWC with a
    3-wide channel axis, where XNNPACK works in rows of 3 elements; a ResNet-style input
    normalization cost as much as two small convolutions (zoo ``normalized_input``: 1.09 ->
    0.48 ms in LiteRT, 1 thread).  Group-1 2-D Convs with constant weights and a static input
    shape only; a padded Conv only for inputs of at most ``_AFFINE_BORDER_MAX_CHANNELS``.
    """
    count = 0
    for conv in [n for n in graph.nodes if n.op == "Conv"]:
        fold = _affine_fold(conv, graph)
        if fold is not None:
            _apply_affine_fold(graph, conv, fold)
            count += 1
    if count:
        graph.cleanup(remove_unused_graph_inputs=False).toposort()
    return count


@dataclass(frozen=True)
class _AffineFold:
    """What :func:`fold_channel_affine_into_conv` writes into one Conv."""

    source: gs.Tensor  # x, which the Conv reads instead of the affine map's result
    weights: np.ndarray  # W·a, in the Conv's dtype
    bias: np.ndarray  # the bias with the constant image's K0 folded in
    replaces_bias: bool  # the Conv had a bias input (else the new bias is appended)
    border: np.ndarray | None  # [1, O, H', W'] K0 - K, added after the Conv when it pads


def _affine_fold(conv: gs.Node, graph: gs.Graph) -> _AffineFold | None:
    """The fold of the affine map in front of ``conv``, or None when there is none to fold."""
    found = _plain_conv(conv)
    if found is None:
        return None
    w, bias_t = found
    channels = w.shape[1]
    affine = _affine_source(conv, graph, channels)
    if affine is None:
        return None
    x, shift, scale = affine
    size = _static_image_size(x, channels)
    if size is None:
        return None
    # y = Conv(x·scale + shift·scale): W' = W·scale; the constant image shift·scale -> K
    w_new = w.astype(np.float64) * scale.reshape(1, -1, 1, 1)
    per_tap = np.einsum("ocyx,c->oyx", w_new, shift)  # V[o, ky, kx]
    vy, vx = _tap_masks(conv, w.shape[2:], size)
    padded = not (vy.all() and vx.all())
    if padded and channels > _AFFINE_BORDER_MAX_CHANNELS:
        return None
    k0 = per_tap.sum(axis=(1, 2))
    bias = np.asarray(constant_value(bias_t)).astype(np.float64) if bias_t is not None else np.zeros(w.shape[0])
    border = None
    if padded:  # some outputs read padding: correct the border
        k_full = np.einsum("oab,ya,xb->oyx", per_tap, vy, vx)
        border = (k_full - k0[:, None, None])[None].astype(w.dtype)
    return _AffineFold(x, w_new.astype(w.dtype), (bias + k0).astype(w.dtype), bias_t is not None, border)


def _plain_conv(conv: gs.Node) -> tuple[np.ndarray, gs.Tensor | None] | None:
    """(weights, bias tensor or None) of a group-1 2-D Conv with constant weights and bias and
    explicit pads, else None."""
    weights = constant_value(conv.inputs[1]) if len(conv.inputs) > 1 else None
    if weights is None or np.asarray(weights).ndim != 4 or int(attr(conv, "group", 1)) != 1:
        return None
    auto_pad = attr(conv, "auto_pad", "NOTSET")
    if (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) != "NOTSET":
        return None
    bias_t = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] is not None \
        and getattr(conv.inputs[2], "name", "") else None
    if bias_t is not None and constant_value(bias_t) is None:
        return None
    return np.asarray(weights), bias_t


def _affine_source(conv: gs.Node, graph: gs.Graph, channels: int):
    """(x, shift, scale) with the Conv's input = (x + shift)·scale per channel, walking up from
    the Conv through at most a shift then a scale, each read by the next only; None when not even
    one step is there."""
    shift, scale, x, steps = np.zeros(channels), np.ones(channels), conv.inputs[0], 0
    for _ in range(2):
        if len(x.inputs) != 1 or _only_consumer(x, graph) is None:
            break
        step = _affine_step(x.inputs[0], channels)
        if step is None:
            break
        src, step_shift, step_scale = step
        if np.any(step_scale == 0.0):
            break
        # (src + step_shift)·step_scale, then the steps already taken: (· + shift)·scale
        shift, scale = step_shift + shift / step_scale, step_scale * scale
        steps += 1
        x = src
    return (x, shift, scale) if steps else None


def _static_image_size(x: gs.Tensor, channels: int) -> tuple[int, int] | None:
    """(H, W) of ``x`` when it is a static ``[N, channels, H, W]`` tensor, else None."""
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) != 4 or not all(isinstance(d, (int, np.integer)) for d in shape) \
            or shape[1] != channels:
        return None
    return int(shape[2]), int(shape[3])


def _tap_masks(conv: gs.Node, kernel, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Per spatial axis of ``conv`` on an input of ``size``, the ``[out, k]`` taps that read
    inside the input (:func:`_valid_taps`)."""
    kh, kw = kernel
    h, wd = size
    strides = [int(v) for v in attr(conv, "strides", [1, 1])]
    dil = [int(v) for v in attr(conv, "dilations", [1, 1])]
    pads = [int(v) for v in attr(conv, "pads", [0, 0, 0, 0])]
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    return _valid_taps(oh, h, kh, strides[0], dil[0], pads[0]), _valid_taps(ow, wd, kw, strides[1], dil[1], pads[1])


def _apply_affine_fold(graph: gs.Graph, conv: gs.Node, fold: _AffineFold) -> None:
    conv.inputs[0] = fold.source
    conv.inputs[1] = gs.Constant(f"{conv.name}/W_affine", np.ascontiguousarray(fold.weights))
    new_bias = gs.Constant(f"{conv.name}/B_affine", np.ascontiguousarray(fold.bias))
    if fold.replaces_bias:
        conv.inputs[2] = new_bias
    else:
        conv.inputs.append(new_bias)
    if fold.border is not None:
        y = conv.outputs[0]
        inner = gs.Variable(f"{conv.name}/affine_conv", dtype=y.dtype, shape=y.shape)
        conv.outputs[0] = inner
        graph.nodes.append(gs.Node("Add", name=f"{conv.name}/affine_border",
                                   inputs=[inner, gs.Constant(f"{conv.name}/affine_border_k",
                                                              np.ascontiguousarray(fold.border))],
                                   outputs=[y]))


# -- TFLite level ----------------------------------------------------------------------------

_ACTIVATIONS = {"RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}
# Not CONCATENATION: its options carry an activation, but the kernel ignores it and Prepare refuses
# any (google-ai-edge/LiteRT@f674577:tflite/kernels/concatenation.cc#L51 and #L143) — a Relu after a
# Concat (or after a grouped ConvTranspose, which ends in one) must stay a RELU op.
_TAKES_ACTIVATION = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "ADD", "SUB",
                     "MUL", "DIV", "AVERAGE_POOL_2D", "MAX_POOL_2D"}


def _readers(ops) -> dict[int, list]:
    readers: dict[int, list] = {}
    for op in ops:
        for i in op.inputs:
            if i >= 0:
                readers.setdefault(i, []).append(op)
    return readers


def _producers(ops) -> dict[int, object]:
    return {o: op for op in ops for o in op.outputs}


def fold_bias_add(writer, keep: set[int]) -> int:
    """FULLY_CONNECTED with a zero bias followed by ADD of a per-output constant -> one op."""
    readers, producers = _readers(writer.ops), _producers(writer.ops)
    drop = []
    for add in writer.ops:
        if add.builtin != "ADD" or add.options.fusedActivationFunction:
            continue
        for k in (0, 1):
            fc = producers.get(add.inputs[k])
            bias = writer.value(add.inputs[1 - k])
            if fc is None or fc.builtin != "FULLY_CONNECTED" or bias is None or fc.options.fusedActivationFunction:
                continue
            zero = writer.value(fc.inputs[2]) if len(fc.inputs) > 2 and fc.inputs[2] >= 0 else None
            n_out = writer.tensors[fc.outputs[0]].shape[-1]
            if zero is None or np.any(zero) or bias.size != n_out or bias.shape[-1:] != (n_out,):
                continue
            if add.inputs[k] in keep or len(readers.get(add.inputs[k], [])) != 1:
                continue
            if writer.tensors[add.outputs[0]].shape != writer.tensors[fc.outputs[0]].shape:
                continue
            fc.inputs[2] = writer.constant(writer.tensors[add.inputs[1 - k]].name, bias.reshape(-1))
            fc.outputs = list(add.outputs)
            drop.append(add)
            break
    writer.ops = [op for op in writer.ops if all(op is not d for d in drop)]
    return len(drop)


def fold_channel_offset_into_conv(writer, keep: set[int]) -> int:
    """A per-output-channel constant added to or subtracted from a convolution's output goes
    into the convolution's bias.

    Before::  y = CONV_2D | DEPTHWISE_CONV_2D(x, W, b);  z = ADD(y, c) | ADD(c, y) | SUB(y, c)
              (c: [C] or [1, 1, 1, C] float32; y read by nothing else)
    After::   z = CONV_2D | DEPTHWISE_CONV_2D(x, W, b + c | b - c)   (the ADD/SUB's activation kept)

    Exact up to float rounding ((acc + b) + c vs acc + (b + c)).  Why: a detection head that
    subtracts a per-channel offset from a convolution's output read and wrote the whole output
    once more; litert-torch's file has the offset in the bias (zoo ``detector``).
    """
    readers, producers = _readers(writer.ops), _producers(writer.ops)
    drop = []
    for op in writer.ops:
        if op.builtin not in ("ADD", "SUB") or len(op.inputs) != 2:
            continue
        sides = (0, 1) if op.builtin == "ADD" else (0,)
        for k in sides:
            conv, offset = producers.get(op.inputs[k]), writer.value(op.inputs[1 - k])
            if conv is None or conv.builtin not in ("CONV_2D", "DEPTHWISE_CONV_2D") or offset is None:
                continue
            y = op.inputs[k]
            out = writer.tensors[y]
            if y in keep or len(readers.get(y, [])) != 1 or conv.options.fusedActivationFunction:
                continue
            channels = out.shape[-1] if out.shape else 0
            if (out.dtype != np.float32 or out.quant is not None or offset.dtype != np.float32
                    or offset.size != channels or offset.shape[-1:] != (channels,) or offset.ndim > len(out.shape)
                    or writer.tensors[op.outputs[0]].shape != out.shape):
                continue
            has_bias = len(conv.inputs) > 2 and conv.inputs[2] >= 0
            bias = writer.value(conv.inputs[2]) if has_bias else np.zeros(channels, np.float32)
            if bias is None or bias.dtype != np.float32 or bias.shape != (channels,):
                continue
            sign = np.float32(1.0 if op.builtin == "ADD" else -1.0)
            new_bias = (bias + sign * offset.reshape(-1)).astype(np.float32)
            name = f"{writer.tensors[conv.inputs[2]].name if has_bias else writer.tensors[y].name + '/bias'}/offset"
            inputs = list(conv.inputs) + [-1] * (3 - len(conv.inputs))
            inputs[2] = writer.constant(name, new_bias)
            conv.inputs = inputs
            conv.options.fusedActivationFunction = op.options.fusedActivationFunction if op.options else 0
            conv.outputs = list(op.outputs)
            drop.append(op)
            break
    writer.ops = [op for op in writer.ops if all(op is not d for d in drop)]
    return len(drop)


_REDUCERS = {"MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"}


def fold_reshape_into_reduce(writer, keep: set[int]) -> int:
    """A reduction that keeps its reduced dims, followed by a RESHAPE that only drops them,
    becomes the reduction without kept dims.

    Before::  m = MEAN(x, axes, keep_dims=True);  y = RESHAPE(m, shape)   (shape = x's shape
              without ``axes``; m read by nothing else)
    After::   y = MEAN(x, axes, keep_dims=False)

    Exact (the same values in the same order).  Why: a global average pool + flatten (every
    torchvision classifier) ran one more op; litert-torch's file has the one MEAN.
    """
    readers, producers = _readers(writer.ops), _producers(writer.ops)
    drop = []
    for op in writer.ops:
        if op.builtin != "RESHAPE" or not op.inputs:
            continue
        red = producers.get(op.inputs[0])
        if red is None or red.builtin not in _REDUCERS or not getattr(red.options, "keepDims", False):
            continue
        m = op.inputs[0]
        if m in keep or len(readers.get(m, [])) != 1 or len(red.inputs) != 2:
            continue
        axes = writer.value(red.inputs[1])
        shape = writer.tensors[red.inputs[0]].shape
        if axes is None or not shape:
            continue
        dropped = {int(a) % len(shape) for a in np.asarray(axes).reshape(-1)}
        if writer.tensors[op.outputs[0]].shape != tuple(d for i, d in enumerate(shape) if i not in dropped):
            continue
        red.options.keepDims = False
        red.outputs = list(op.outputs)
        drop.append(op)
    writer.ops = [op for op in writer.ops if all(op is not d for d in drop)]
    return len(drop)


def fuse_activations(writer, keep: set[int]) -> int:
    """Fold RELU / RELU6 / RELU_N1_TO_1 into the producing op's fused_activation_function."""
    readers, producers = _readers(writer.ops), _producers(writer.ops)
    drop = []
    for act in writer.ops:
        if act.builtin not in _ACTIVATIONS:
            continue
        src = act.inputs[0]
        op = producers.get(src)
        if op is None or op.builtin not in _TAKES_ACTIVATION or len(op.outputs) != 1:
            continue
        if src in keep or len(readers.get(src, [])) != 1 or op.options.fusedActivationFunction:
            continue
        op.options.fusedActivationFunction = _ACTIVATIONS[act.builtin]
        op.outputs = list(act.outputs)
        drop.append(act)
    writer.ops = [op for op in writer.ops if all(op is not d for d in drop)]
    return len(drop)


def prune_dead_ops(writer, keep: set[int]) -> int:
    removed = 0
    while True:
        read = {i for op in writer.ops for i in op.inputs} | keep
        alive = [op for op in writer.ops if any(o in read for o in op.outputs)]
        if len(alive) == len(writer.ops):
            return removed
        removed += len(writer.ops) - len(alive)
        writer.ops = alive
