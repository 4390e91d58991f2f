"""Recurrent ONNX ops -> MIL: LSTM as the MIL ``lstm`` op, GRU unrolled over its (static) sequence
(op specs: coremltools ``converters/mil/mil/ops/defs/iOS15/recurrent.py`` lstm / gru).

Only ONNX's default activations and layout 0 ([seq, batch, feature]) are mapped; ``clip``,
``input_forget`` and ragged ``sequence_lens`` are refused.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import attr
from ..onnx_attrs import str_attr
from .mil_registry import OPS, input_shape, unsupported

#: ONNX LSTM gate blocks are [i, o, f, c]; MIL lstm wants [input, forget, output, cell].
_LSTM_GATES = [0, 2, 1, 3]
#: ONNX peepholes are [i, o, f]; MIL's are [input, forget, output].
_PEEPHOLES = [0, 2, 1]


def _check_common(ctx, node, defaults: list[str]) -> tuple[str, int, int, int]:
    """Direction, sequence length, batch and hidden size; refuses what is not mapped."""
    if int(attr(node, "layout", 0)) != 0:
        raise unsupported(node, "layout=1 (batch-first) is not mapped")
    if attr(node, "clip") is not None or int(attr(node, "input_forget", 0)):
        raise unsupported(node, "clip / input_forget are not mapped")
    direction = str_attr(node, "direction", "forward")
    activations = [a.decode() if isinstance(a, bytes) else a for a in (attr(node, "activations") or [])]
    dirs = 2 if direction == "bidirectional" else 1
    if activations and activations != defaults * dirs:
        raise unsupported(node, f"activations {activations} (only the defaults {defaults} are mapped)")
    seq, batch, _ = input_shape(node)
    lens = ctx.optional_const(node, 4)
    if lens is not None and not np.all(np.asarray(lens) == seq):
        raise unsupported(node, "sequence_lens shorter than the sequence are not mapped")
    return direction, seq, batch, int(attr(node, "hidden_size"))


def _initial_state(ctx, node, index: int, dirs: int, batch: int, hidden: int, name: str):
    """ONNX [dirs, batch, H] -> MIL [batch, dirs*H] (zeros when absent)."""
    if index >= len(node.inputs) or not node.inputs[index].name:
        return np.zeros((batch, dirs * hidden), np.float32)
    state = ctx.mb.transpose(x=ctx.value(node.inputs[index]), perm=[1, 0, 2], name=f"{name}_bdh")
    return ctx.mb.reshape(x=state, shape=[batch, dirs * hidden], name=name)


def _gates(array: np.ndarray, order: list[int], hidden: int) -> np.ndarray:
    blocks = array.reshape((len(order), hidden) + array.shape[1:])
    return np.ascontiguousarray(blocks[order].reshape(array.shape)).astype(np.float32)


def _output_names(ctx, node) -> list[str]:
    return [ctx.name(t.name) if t.name else ctx.name(f"{node.name}_unused{i}") for i, t in enumerate(node.outputs)]


@OPS.register("LSTM")
def _lstm(ctx, node) -> None:
    """``lstm`` with output_sequence: y [s, b, dirs*H] -> Y [s, dirs, b, H]; h, c [b, dirs*H] ->
    Y_h, Y_c [dirs, b, H].  Biases are summed (MIL's one bias is input-hidden + hidden-hidden)."""
    out = ctx.out
    mb = ctx.mb
    direction, seq, batch, hidden = _check_common(ctx, node, ["Sigmoid", "Tanh", "Tanh"])
    dirs = 2 if direction == "bidirectional" else 1
    w, r = ctx.const(node, 1, "W"), ctx.const(node, 2, "R")
    b = ctx.optional_const(node, 3)
    b = np.zeros((dirs, 8 * hidden), np.float32) if b is None else b
    p = ctx.optional_const(node, 7)
    names = _output_names(ctx, node)
    weights = {}
    for d, suffix in enumerate(["", "_back"][:dirs]):
        weights[f"weight_ih{suffix}"] = _gates(w[d], _LSTM_GATES, hidden)
        weights[f"weight_hh{suffix}"] = _gates(r[d], _LSTM_GATES, hidden)
        weights[f"bias{suffix}"] = _gates(b[d, :4 * hidden] + b[d, 4 * hidden:], _LSTM_GATES, hidden)
        if p is not None:
            weights[f"peephole{suffix}"] = _gates(p[d], _PEEPHOLES, hidden)
    y, h, c = mb.lstm(
        x=ctx.value(node.inputs[0]),
        initial_h=_initial_state(ctx, node, 5, dirs, batch, hidden, f"{out}_h0"),
        initial_c=_initial_state(ctx, node, 6, dirs, batch, hidden, f"{out}_c0"),
        direction=direction, output_sequence=True, recurrent_activation="sigmoid", cell_activation="tanh",
        activation="tanh", name=f"{out}_lstm", **weights)
    y = mb.reshape(x=y, shape=[seq, batch, dirs, hidden], name=f"{out}_sbdh")
    results = [mb.transpose(x=y, perm=[0, 2, 1, 3], name=names[0])]
    for state, name in zip((h, c), names[1:3]):
        state = mb.reshape(x=state, shape=[batch, dirs, hidden], name=f"{name}_bdh")
        results.append(mb.transpose(x=state, perm=[1, 0, 2], name=name))
    ctx.bind(node, results[:len(node.outputs)])


def _gru_direction(ctx, node, x, d: int, reverse: bool, hidden: int, h, tag: str) -> tuple[list, object]:
    """One direction of ONNX GRU, step by step (gates z, r, h):
    z = sigmoid(x Wz' + h Rz' + Wbz + Rbz), r likewise,
    n = tanh(x Wh' + Wbh + (r*h) Rh' + Rbh)   or, linear_before_reset=1, + r*(h Rh' + Rbh),
    h = (1 - z) * n + z * h."""
    mb = ctx.mb
    w, r = ctx.const(node, 1, "W")[d].astype(np.float32), ctx.const(node, 2, "R")[d].astype(np.float32)
    b = ctx.optional_const(node, 3)
    b = np.zeros(6 * hidden, np.float32) if b is None else b[d].astype(np.float32)
    wb, rb = b[:3 * hidden], b[3 * hidden:]
    before_reset = bool(attr(node, "linear_before_reset", 0))
    seq = input_shape(node)[0]
    projected = mb.linear(x=x, weight=w, bias=wb, name=f"{tag}_xw")  # [s, b, 3H]
    rzr, rh = np.ascontiguousarray(r[:2 * hidden]), np.ascontiguousarray(r[2 * hidden:])
    outputs = [None] * seq
    for t in (reversed(range(seq)) if reverse else range(seq)):
        step = f"{tag}_t{t}"
        xt = mb.squeeze(x=mb.slice_by_index(x=projected, begin=[t, 0, 0], end=[t + 1, 0, 0],
                                            end_mask=[False, True, True], name=f"{step}_x"), axes=[0], name=f"{step}_xs")
        xzr = mb.slice_by_index(x=xt, begin=[0, 0], end=[0, 2 * hidden], end_mask=[True, False], name=f"{step}_xzr")
        xh = mb.slice_by_index(x=xt, begin=[0, 2 * hidden], end=[0, 3 * hidden], end_mask=[True, False],
                               name=f"{step}_xh")
        zr = mb.sigmoid(x=mb.add(x=xzr, y=mb.linear(x=h, weight=rzr, bias=rb[:2 * hidden], name=f"{step}_hzr"),
                                 name=f"{step}_zr_in"), name=f"{step}_zr")
        z, rg = mb.split(x=zr, num_splits=2, axis=-1, name=f"{step}_split")
        if before_reset:
            hh = mb.mul(x=rg, y=mb.linear(x=h, weight=rh, bias=rb[2 * hidden:], name=f"{step}_hh_lin"),
                        name=f"{step}_hh")
        else:
            hh = mb.linear(x=mb.mul(x=rg, y=h, name=f"{step}_rh"), weight=rh, bias=rb[2 * hidden:], name=f"{step}_hh")
        n = mb.tanh(x=mb.add(x=xh, y=hh, name=f"{step}_n_in"), name=f"{step}_n")
        # (1 - z) * n + z * h  ==  n + z * (h - n)
        h = mb.add(x=n, y=mb.mul(x=z, y=mb.sub(x=h, y=n, name=f"{step}_d"), name=f"{step}_zd"), name=f"{step}_h")
        outputs[t] = h
    return outputs, h


@OPS.register("GRU")
def _gru(ctx, node) -> None:
    """Unrolled, not MIL ``gru``: that op computes ``r * (W_ho h) + b_o`` with one summed bias
    (iOS15/recurrent.py gru), which is neither ONNX's default (linear_before_reset=0) nor, with a
    recurrent bias, linear_before_reset=1; coremltools' torch frontend unrolls torch GRU for the
    same reason (frontend/torch/ops.py _add_gru_layer)."""
    out = ctx.out
    mb = ctx.mb
    direction, seq, batch, hidden = _check_common(ctx, node, ["Sigmoid", "Tanh"])
    dirs = 2 if direction == "bidirectional" else 1
    names = _output_names(ctx, node)
    x = ctx.value(node.inputs[0])
    h0 = ctx.value(node.inputs[5]) if len(node.inputs) > 5 and node.inputs[5].name else None
    per_direction, finals = [], []
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        if h0 is None:
            h = np.zeros((batch, hidden), np.float32)
        elif isinstance(h0, np.ndarray):
            h = h0[d].astype(np.float32)
        else:
            h = mb.squeeze(x=mb.slice_by_index(x=h0, begin=[d, 0, 0], end=[d + 1, batch, hidden],
                                               name=f"{out}_h0_{d}"), axes=[0], name=f"{out}_h0s_{d}")
        steps, last = _gru_direction(ctx, node, x, d, reverse, hidden, h, f"{out}_d{d}")
        per_direction.append(mb.stack(values=steps, axis=0, name=f"{out}_seq{d}"))  # [s, b, H]
        finals.append(last)
    y = mb.stack(values=per_direction, axis=1, name=names[0])  # [s, dirs, b, H]
    results = [y]
    if len(node.outputs) > 1:
        results.append(mb.stack(values=finals, axis=0, name=names[1]))
    ctx.bind(node, results)
