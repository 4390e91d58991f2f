"""Folds: a node absorbed into its neighbour's weights or attributes (no node is emitted)."""

from __future__ import annotations

import numpy as np

from ...ir.graph import attr, tensor_rank
from .base import const_input, present, rule, used_outputs

_BN_HOSTS = ("Conv", "ConvTranspose", "Gemm")


def _producer(t):
    return t.inputs[0] if len(t.inputs) == 1 else None


def _bn_foldable(node, graph):
    if present(node, 5) or attr(node, "training_mode", 0):
        return "BatchNormalization runs in training mode"
    if any(i > 0 for i in used_outputs(node, graph)):
        return "running statistics outputs are used"
    if any(const_input(node, i) is None for i in range(1, 5)):
        return "scale/bias/mean/var are not constants"
    host = _producer(node.inputs[0])
    if host is None or host.op not in _BN_HOSTS:
        return "not preceded by Conv, ConvTranspose or Gemm"
    x = node.inputs[0]
    if len(x.outputs) != 1 or any(t is x for t in graph.outputs):
        return f"the {host.op} output has other readers"
    if const_input(host, 1) is None or (present(host, 2) and const_input(host, 2) is None):
        return f"{host.op} weights are not constants"
    if host.op == "Gemm":
        if tensor_rank(x) != 2:
            return "Gemm output rank unknown"
        if attr(host, "transA", 0) not in (0, 1):
            return "bad Gemm"
    return None


@rule("BatchNormalization", emits=[], when=_bn_foldable, cost=0)
def fold_batchnorm(rw, node):
    """Scale and shift the preceding layer's weights and bias by the normalization.

    before: x ─► Conv(W, b) ─► BatchNormalization(γ, β, μ, σ²) ─► y
    after:  x ─► Conv(W·a, (b − μ)·a + β) ─► y        with a = γ / √(σ² + ε)
    (the same for ConvTranspose, whose output channels are weight axis 1 per group, and Gemm)
    """
    gamma, beta, mean, var = (const_input(node, i).astype(np.float64) for i in range(1, 5))
    eps = float(attr(node, "epsilon", 1e-5))
    a = gamma / np.sqrt(var + eps)
    shift = beta - mean * a
    host = _producer(node.inputs[0])
    w = const_input(host, 1)
    dtype = w.dtype
    w64 = w.astype(np.float64)
    if host.op == "Conv":
        w_new = w64 * a.reshape((-1,) + (1,) * (w.ndim - 1))
        bias = const_input(host, 2) if present(host, 2) else np.zeros(w.shape[0])
        b_new = bias.astype(np.float64) * a + shift
    elif host.op == "ConvTranspose":
        g = int(attr(host, "group", 1))
        cin, cout_g = w.shape[0], w.shape[1]
        w_new = (w64.reshape((g, cin // g, cout_g) + w.shape[2:])
                 * a.reshape((g, 1, cout_g) + (1,) * (w.ndim - 2))).reshape(w.shape)
        bias = const_input(host, 2) if present(host, 2) else np.zeros(g * cout_g)
        b_new = bias.astype(np.float64) * a + shift
    else:  # Gemm: Y = alpha·A·B + beta·C, output channels are B's N axis
        axis = 0 if attr(host, "transB", 0) else 1
        w_new = w64 * (a.reshape(-1, 1) if axis == 0 else a.reshape(1, -1))
        beta_c = float(attr(host, "beta", 1.0))
        c = const_input(host, 2).astype(np.float64) * beta_c if present(host, 2) else np.zeros(a.shape)
        b_new = c * a + shift
        host.attrs["beta"] = 1.0
    host.inputs[1] = rw.const("W_bn", w_new, dtype=dtype)
    bias_const = rw.const("B_bn", b_new, dtype=dtype)
    if present(host, 2):
        host.inputs[2] = bias_const
    else:
        host.inputs.append(bias_const)
    host.outputs[0] = rw.outputs[0]


def _pad_foldable(node, graph):
    if attr(node, "mode", "constant") not in ("constant", b"constant"):
        return "Pad mode is not constant"
    if present(node, 3):
        return "Pad has axes"
    pads = _pads_of(node)
    if pads is None:
        return "pads are not constant"
    if present(node, 2):
        v = const_input(node, 2)
        if v is None or float(np.asarray(v).reshape(-1)[0]) != 0.0:
            return "pad value is not zero"
    elif float(attr(node, "value", 0.0)) != 0.0:
        return "pad value is not zero"
    rank = len(pads) // 2
    if rank < 3 or any(pads[i] != 0 or pads[i + rank] != 0 for i in (0, 1)) or min(pads) < 0:
        return "pads touch batch/channel axes or are negative"
    y = node.outputs[0]
    if len(y.outputs) != 1 or any(t is y for t in graph.outputs):
        return "padded tensor has other readers"
    consumer = y.outputs[0]
    if consumer.op not in ("Conv", "AveragePool") or consumer.inputs[0] is not y:
        return "not followed by Conv or AveragePool"
    if attr(consumer, "auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
        return f"{consumer.op} uses auto_pad"
    if consumer.op == "AveragePool" and not attr(consumer, "count_include_pad", 0):
        return "AveragePool excludes padding from its average"
    return None


def _pads_of(node):
    if node.inputs and len(node.inputs) > 1 and present(node, 1):
        p = const_input(node, 1)
        return None if p is None else [int(v) for v in p]
    p = attr(node, "pads")
    return None if p is None else [int(v) for v in p]


@rule("Pad", emits=[], when=_pad_foldable, cost=0)
def fold_pad(rw, node):
    """Zero padding before a Conv (or an AveragePool that counts padding) joins its pads.

    before: x ─► Pad(0, pads) ─► Conv(pads=p) ─► y          after: x ─► Conv(pads=p + pads) ─► y
    """
    pads = _pads_of(node)
    rank = len(pads) // 2
    consumer = rw.outputs[0].outputs[0]
    spatial = rank - 2
    own = list(attr(consumer, "pads", [0] * (2 * spatial)))
    merged = [own[i] + pads[2 + i] for i in range(spatial)] + [
        own[spatial + i] + pads[rank + 2 + i] for i in range(spatial)]
    consumer.attrs["pads"] = merged
    consumer.inputs[0] = node.inputs[0]
