"""ONNX LSTM -> UNIDIRECTIONAL_SEQUENCE_LSTM (one per direction), time-major.

Follows tensorflow/lite/kernels/unidirectional_sequence_lstm.cc and lstm_shared.h:
24 inputs — 0 input [time, batch, in]; 1-4 input-to-{input, forget, cell, output} weights
[hidden, in]; 5-8 recurrent-to-{...} [hidden, hidden]; 9-11 cell-to-{input, forget, output}
peepholes [hidden] (optional, -1); 12-15 {input, forget, cell, output} gate biases; 16-17
projection (absent); 18 output state and 19 cell state, which must be *variable* tensors
[batch, hidden]; 20-23 layer-norm coefficients (absent).  Output [time, batch, hidden].
The kernel's gates are those of ONNX's default LSTM (sigmoid gates, tanh cell/output activation,
peepholes on i, f from c(t-1) and on o from c(t)); ONNX orders the gate blocks i, o, f, c.

The runtime zero-fills variable tensors at AllocateTensors and they then carry the state from one
Invoke to the next (an application that runs independent sequences calls
``ResetVariableTensors``/``reset_all_variables()`` in between); so initial states must be absent
or zero.  ``direction=reverse`` is REVERSE_V2 on time around the op; ``bidirectional`` is one op
per direction, concatenated on ONNX's num_directions axis.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import attr
from ..onnx_attrs import str_attr, text
from ._generated import schema_generated as fb
from .registry import OPS
from .ops_tensor import builtin_options

_ONNX_GATES = {"i": 0, "o": 1, "f": 2, "c": 3}  # ONNX's block order in W, R, B
_TFLITE_GATES = ("i", "f", "c", "o")  # input order of the TFLite op (1-4, 5-8, 12-15)


def _check(Lw, node, hidden: int, seq: int):
    if int(attr(node, "layout", 0)) != 0:
        raise Lw.unsupported("batch-major LSTM (layout=1) is not mapped")
    if attr(node, "clip") is not None:
        raise Lw.unsupported("LSTM clip clips the gate inputs; TFLite's cell_clip clips the cell state")
    if int(attr(node, "input_forget", 0)):
        raise Lw.unsupported("coupled input-forget gate (input_forget=1) is not mapped")
    acts = [text(a) for a in (attr(node, "activations") or [])]
    if acts and any(a != d for a, d in zip(acts, ["Sigmoid", "Tanh", "Tanh"] * 2)):
        raise Lw.unsupported(f"LSTM activations {acts}: the TFLite kernel has sigmoid gates and one cell activation")
    ins = list(node.inputs) + [None] * (8 - len(node.inputs))
    seq_lens = Lw.const(ins[4])
    if ins[4] is not None and ins[4].name and (seq_lens is None or np.any(np.asarray(seq_lens) != seq)):
        raise Lw.unsupported("sequence_lens shorter than the sequence is not mapped")
    for k, what in ((5, "initial_h"), (6, "initial_c")):
        if ins[k] is not None and ins[k].name:
            value = Lw.const(ins[k])
            if value is None or np.any(np.asarray(value) != 0):
                raise Lw.unsupported(f"a non-zero {what}: TFLite's state tensors start at zero")
    outs = list(node.outputs) + [None] * (3 - len(node.outputs))
    if outs[2] is not None and outs[2].name and outs[2].outputs:
        raise Lw.unsupported("Y_c (the final cell state) is not an output of UNIDIRECTIONAL_SEQUENCE_LSTM")
    return ins, outs


@OPS.register("LSTM")
def lower_lstm(Lw, node):
    """LSTM (forward, reverse or bidirectional) -> UNIDIRECTIONAL_SEQUENCE_LSTM per direction."""
    x = node.inputs[0]
    seq, batch, _ = Lw.shape(x)
    hidden = int(attr(node, "hidden_size"))
    ins, (y_t, yh_t, _) = _check(Lw, node, hidden, seq)
    w, r = (np.asarray(Lw.const(t), np.float32) if Lw.const(t) is not None else None for t in ins[1:3])
    if w is None or r is None:
        raise Lw.unsupported("W and R must be constants")
    given = [k for k in (3, 7) if ins[k] is not None and ins[k].name]
    if any(Lw.const(ins[k]) is None for k in given):  # a runtime bias is not a zero bias
        raise Lw.unsupported("B and P must be constants when given")
    b = Lw.const(ins[3]) if 3 in given else None
    p = Lw.const(ins[7]) if 7 in given else None
    direction = str_attr(node, "direction", "forward")
    reverse = [False] if direction == "forward" else [True] if direction == "reverse" else [False, True]
    src = Lw.get(x, (0, 1, 2))
    results = []
    for d, rev in enumerate(reverse):
        bias = np.zeros(8 * hidden, np.float32) if b is None else np.asarray(b, np.float32)[d]
        peep = None if p is None else np.asarray(p, np.float32)[d]
        seq_in = _time_reversed(Lw, node, src, f"dir{d}_input") if rev else src
        raw = Lw.temp(f"{node.name}/dir{d}_output", (seq, batch, hidden))
        _emit_lstm(Lw, node, d, seq_in, raw, w[d], r[d], bias, peep, hidden, batch)
        results.append((raw, _time_reversed(Lw, node, raw, f"dir{d}_output_in_time") if rev else raw))
    _write_outputs(Lw, node, results, y_t, yh_t, seq, batch, hidden)


def _time_reversed(Lw, node, index, tag):
    out = Lw.temp(f"{node.name}/{tag}", Lw.w.tensors[index].shape)
    Lw.emit("REVERSE_V2", [index, Lw.int32(f"{node.name}/time_axis", [0])], [out], builtin_options("ReverseV2Options"))
    return out


def _emit_lstm(Lw, node, d, seq_in, out, w, r, bias, peep, hidden, batch):
    def block(a, gate):
        k = _ONNX_GATES[gate]
        return np.ascontiguousarray(a[k * hidden:(k + 1) * hidden])

    name = f"{node.name}/dir{d}"
    inputs = [seq_in]
    inputs += [Lw.constant(f"{name}/input_to_{g}", block(w, g)) for g in _TFLITE_GATES]
    inputs += [Lw.constant(f"{name}/recurrent_to_{g}", block(r, g)) for g in _TFLITE_GATES]
    if peep is None:
        inputs += [-1, -1, -1]
    else:  # ONNX P = [p_i, p_o, p_f]
        inputs += [Lw.constant(f"{name}/cell_to_{g}", peep[k * hidden:(k + 1) * hidden])
                   for g, k in (("i", 0), ("f", 2), ("o", 1))]
    inputs += [Lw.constant(f"{name}/{g}_gate_bias", block(bias[:4 * hidden], g) + block(bias[4 * hidden:], g))
               for g in _TFLITE_GATES]
    inputs += [-1, -1]  # no projection
    for state in ("output_state", "cell_state"):
        index = Lw.temp(f"{name}/{state}", (batch, hidden))
        Lw.w.tensors[index].variable = True
        inputs.append(index)
    inputs += [-1, -1, -1, -1]  # no layer normalization
    opts = builtin_options("UnidirectionalSequenceLSTMOptions", fusedActivationFunction=fb.ActivationFunctionType.TANH,
                    cellClip=0.0, projClip=0.0, timeMajor=True)
    Lw.emit("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, [out], opts)


def _write_outputs(Lw, node, results, y_t, yh_t, seq, batch, hidden):
    """Y [seq, dirs, batch, hidden] and Y_h [dirs, batch, hidden] from the per-direction outputs."""
    dirs = len(results)
    if y_t is not None and y_t.name:
        parts = []
        for d, (_, in_time) in enumerate(results):
            part = Lw.define(y_t, (0, 1, 2, 3)) if dirs == 1 else Lw.temp(f"{y_t.name}/dir{d}", (seq, 1, batch, hidden))
            Lw.reshape_to(in_time, part, (seq, 1, batch, hidden))
            parts.append(part)
        if dirs > 1:
            Lw.emit("CONCATENATION", parts, [Lw.define(y_t, (0, 1, 2, 3))],
                    builtin_options("ConcatenationOptions", axis=1))
    if yh_t is not None and yh_t.name:
        lasts = []
        for d, (raw, _) in enumerate(results):
            last = Lw.define(yh_t, (0, 1, 2)) if dirs == 1 else Lw.temp(f"{yh_t.name}/dir{d}", (1, batch, hidden))
            Lw.emit("STRIDED_SLICE", [raw, Lw.int32(f"{node.name}/last_begin", [seq - 1, 0, 0]),
                                      Lw.int32(f"{node.name}/last_end", [seq, batch, hidden]),
                                      Lw.int32(f"{node.name}/last_strides", [1, 1, 1])], [last],
                    builtin_options("StridedSliceOptions"))
            lasts.append(last)
        if dirs > 1:
            Lw.emit("CONCATENATION", lasts, [Lw.define(yh_t, (0, 1, 2))],
                    builtin_options("ConcatenationOptions", axis=0))
