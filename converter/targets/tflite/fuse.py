"""Fusions: two on the ONNX graph before lowering (onnx-graphsurgeon), three on the written ops.

ONNX level (``gs.Graph`` edits):
* :func:`fuse_gelu` — Erf-GELU -> one ``Gelu`` node (TFLite builtin GELU; no FlexErf).
* :func:`fold_crd_into_conv` — Conv -> DepthToSpace(CRD) becomes Conv' -> DepthToSpace(DCR).

TFLite level (:class:`~.writer.ModelWriter` ops):
* :func:`fold_bias_add` — FULLY_CONNECTED(zero bias) -> ADD(const) becomes one FULLY_CONNECTED.
* :func:`fuse_activations` — CONV/FC/ADD/... -> RELU|RELU6|RELU_N1_TO_1 becomes the op with a
  fused activation (TFLite's ``fused_activation_function``).
* :func:`prune_dead_ops` — drop ops whose results nobody reads (e.g. a replaced bias' DEQUANTIZE).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...graph import attr, constant_value
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
