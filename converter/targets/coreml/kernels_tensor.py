"""numpy kernels for MIL indexing and recurrent ops without a coremltools ``value_inference``:
gather_nd, scatter_nd, one_hot, lstm; and concat, whose value inference ignores ``interleave``.

Each follows the op's docstring in coremltools ``converters/mil/mil/ops/defs/iOS15/
{scatter_gather,tensor_operation,recurrent}.py`` (``iOS16/scatter_gather.py`` for gather_nd's
``batch_dims``) and is tested against onnxruntime in ``tests/test_coreml_kernels_more.py``.
"""

from __future__ import annotations

import numpy as np

from ...errors import Unsupported
from .kernel_registry import KERNELS, as_f32, text


@KERNELS.register("gather_nd")
def gather_nd(op, args) -> np.ndarray:
    """V = K[:-1] + D[batch_dims + K[-1]:]: each index row picks a slice of its batch's x."""
    x, indices = np.asarray(args["x"]), np.asarray(args["indices"]).astype(np.int64)
    batch_dims = int(np.asarray(args.get("batch_dims", 0)))
    batch_shape = x.shape[:batch_dims]
    xb = x.reshape((-1,) + x.shape[batch_dims:])
    ib = indices.reshape((-1,) + indices.shape[batch_dims:])
    out = [xb[b][tuple(np.moveaxis(ib[b], -1, 0))] for b in range(xb.shape[0])]
    return np.stack(out).reshape(batch_shape + indices.shape[batch_dims:-1] + x.shape[batch_dims + indices.shape[-1]:])


_SCATTER = {"update": lambda old, new: new, "add": np.add, "sub": np.subtract, "mul": np.multiply,
            "div": np.divide, "max": np.maximum, "min": np.minimum}


@KERNELS.register("scatter_nd")
def scatter_nd(op, args) -> np.ndarray:
    """output = data; then for each index row in order, output[idx] = mode(output[idx], update)."""
    data = np.array(args["data"], copy=True)
    indices = np.asarray(args["indices"]).astype(np.int64)
    updates = np.asarray(args["updates"])
    mode = text(args.get("mode", "add"))
    if mode not in _SCATTER:
        raise Unsupported(f"scatter_nd mode '{mode}' is not implemented")
    rows = indices.reshape(-1, indices.shape[-1])
    slices = updates.reshape((rows.shape[0],) + data.shape[indices.shape[-1]:])
    for row, update in zip(rows, slices):
        where = tuple(row)
        data[where] = _SCATTER[mode](data[where], update)
    return data


@KERNELS.register("one_hot")
def one_hot(op, args) -> np.ndarray:
    """A new axis of length ``one_hot_vector_size`` at ``axis``: on_value where it equals the index."""
    indices = np.asarray(args["indices"]).astype(np.int64)
    depth = int(np.asarray(args["one_hot_vector_size"]))
    axis = int(np.asarray(args.get("axis", -1)))
    on, off = np.asarray(args.get("on_value", 1)), np.asarray(args.get("off_value", 0))
    hot = indices[..., None] == np.arange(depth)
    out = np.where(hot, on, off)
    return np.moveaxis(out, -1, axis % (indices.ndim + 1))


_ACTIVATIONS = {"sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh, "relu": lambda v: np.maximum(v, 0),
                "linear": lambda v: v}


def _lstm_direction(x, h, c, w_ih, w_hh, bias, peep, acts, reverse):
    """One direction; gate blocks [input, forget, output, cell] (lstm spec).  Peepholes feed
    c_{t-1} to the input and forget gates and c_t to the output gate."""
    rec, cell, out_act = acts
    hidden = h.shape[-1]
    ys = [None] * x.shape[0]
    for t in (reversed(range(x.shape[0])) if reverse else range(x.shape[0])):
        gates = x[t] @ w_ih.T + h @ w_hh.T + bias
        gi, gf, go, gz = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
        i = rec(gi + peep[0] * c)
        f = rec(gf + peep[1] * c)
        c = f * c + i * cell(gz)
        o = rec(go + peep[2] * c)
        h = o * out_act(c)
        ys[t] = h  # outputs stay aligned with their input position in both directions
    return np.stack(ys), h, c


@KERNELS.register("lstm")
def lstm(op, args):
    """Outputs (y [s or 1, b, DIRECTIONS*H], h [b, DIRECTIONS*H], c [b, DIRECTIONS*H])."""
    x = as_f32(args["x"])
    direction = text(args.get("direction", "forward"))
    acts = []
    for name, default in (("recurrent_activation", "sigmoid"), ("cell_activation", "tanh"), ("activation", "tanh")):
        act = text(args.get(name, default))
        if act not in _ACTIVATIONS:
            raise Unsupported(f"lstm activation '{act}' is not implemented")
        acts.append(_ACTIVATIONS[act])
    if args.get("clip") is not None:
        raise Unsupported("lstm clip is not implemented")
    hidden = np.asarray(args["weight_hh"]).shape[1]
    h0, c0 = as_f32(args["initial_h"]), as_f32(args["initial_c"])
    runs = []
    for d, suffix in enumerate(["", "_back"] if direction == "bidirectional" else [""]):
        peep = args.get(f"peephole{suffix}")
        peep = np.zeros((3, hidden), np.float32) if peep is None else as_f32(peep).reshape(3, hidden)
        bias = args.get(f"bias{suffix}")
        bias = np.zeros(4 * hidden, np.float32) if bias is None else as_f32(bias)
        state = slice(d * hidden, (d + 1) * hidden)
        runs.append(_lstm_direction(x, h0[:, state], c0[:, state], as_f32(args[f"weight_ih{suffix}"]),
                                    as_f32(args[f"weight_hh{suffix}"]), bias, peep, acts,
                                    reverse=direction == "reverse" or d == 1))
    y = np.concatenate([r[0] for r in runs], axis=-1)
    h = np.concatenate([r[1] for r in runs], axis=-1)
    if not bool(np.asarray(args.get("output_sequence", False))):
        y = h[None]  # the hidden states of each direction's final step
    return y, h, np.concatenate([r[2] for r in runs], axis=-1)


@KERNELS.register("concat")
def concat(op, args):
    """``concat(values, axis, interleave)`` (iOS15 tensor_operation.py).  With ``interleave`` the
    inputs (all of one shape) alternate slice by slice along ``axis``: output index i*N + k holds
    input k's slice i — what coremltools' ``detect_concat_interleave`` pass makes of a channel
    shuffle (concat, reshape to [B, groups, C/groups, H, W], transpose, reshape back).
    coremltools' own value inference concatenates and ignores ``interleave``."""
    values = [np.asarray(v) for v in args["values"]]
    axis = int(np.asarray(args["axis"]))
    interleave = args.get("interleave") is not None and bool(np.asarray(args["interleave"]))
    if values[0].ndim == 0:
        return np.stack(values, axis=axis)
    axis = axis % values[0].ndim
    if not interleave:
        return np.concatenate(values, axis=axis)
    stacked = np.stack(values, axis=axis + 1)
    shape = list(values[0].shape)
    shape[axis] *= len(values)
    return stacked.reshape(shape)
