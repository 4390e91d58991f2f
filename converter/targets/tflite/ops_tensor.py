"""ONNX element-wise, reduction and shape ops -> TFLite builtins, in whatever layout the data has.

Each ``lower_*`` takes the :class:`~.lower.Lowering` and one ``gs.Node``.  None of these ops needs
a particular layout: axes are renumbered to memory positions (``layout.position``) and the
output inherits the input's layout, so NHWC data flowing out of a convolution stays NHWC.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_graphsurgeon as gs

from ...ir.graph import attr
from . import layout as L
from ._generated import schema_generated as fb
from .registry import OPS


@dataclass
class SubNode:
    """A node a lowering function builds to reuse another lowering function (e.g. a 1-D Conv as a
    2-D one).  Plain lists: unlike ``gs.Node`` it does not register itself as a consumer of its
    inputs, so the graph being lowered is left untouched."""

    op: str
    name: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)
    domain: str = ""


def positive_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def layout_of(Lw, inputs, rank: int) -> tuple[int, ...]:
    """The layout an n-ary op works in: that of its first non-constant input of full rank."""
    for t in inputs:
        if Lw.const(t) is None and Lw.rank(t) == rank and Lw.home(t) is not None:
            return Lw.home(t)
    return L.identity(rank)


def input_for(Lw, t, rank: int, perm) -> int:
    if Lw.const(t) is None and L.is_identity(perm) and Lw.home(t) is not None and L.is_identity(Lw.home(t)):
        return Lw.get(t)  # TFLite broadcasts lower ranks numpy-style by itself
    return Lw.broadcast_input(t, rank, perm)


def builtin_options(cls_name: str, **fields):
    opts = getattr(fb, cls_name + "T")()
    for k, v in fields.items():
        setattr(opts, k, v)
    return opts


# -- element-wise -----------------------------------------------------------------------------
def binary(builtin: str, options: str | None = None):
    def lower(Lw, node):
        out_t = node.outputs[0]
        rank = Lw.rank(out_t)
        perm = layout_of(Lw, node.inputs[:2], rank)
        a = input_for(Lw, node.inputs[0], rank, perm)
        b = input_for(Lw, node.inputs[1], rank, perm)
        Lw.emit(builtin, [a, b], [Lw.define(out_t, perm)], builtin_options(options) if options else None)

    lower.__doc__ = f"ONNX {builtin.title()} -> {builtin} (numpy broadcasting, any layout)."
    return lower


def unary(builtin: str, options: str | None = None, **fields):
    def lower(Lw, node):
        x = node.inputs[0]
        perm = Lw.home(x) or L.identity(Lw.rank(x))
        out = Lw.define(node.outputs[0], perm)
        Lw.emit(builtin, [Lw.get(x, perm)], [out], builtin_options(options, **fields) if options else None)

    return lower


@OPS.register("Pow")
def lower_pow(Lw, node):
    """x ** 2 -> MUL(x, x) (exact, XNNPACK-friendly); x ** 0.5 -> SQRT; else POW."""
    exponent = Lw.const(node.inputs[1])
    if exponent is not None and np.asarray(exponent).size == 1:
        e = float(np.asarray(exponent).reshape(()))
        x = node.inputs[0]
        perm = Lw.home(x) or L.identity(Lw.rank(x))
        if e == 2.0 and Lw.rank(node.outputs[0]) == Lw.rank(x):
            xi = Lw.get(x, perm)
            Lw.emit("MUL", [xi, xi], [Lw.define(node.outputs[0], perm)], builtin_options("MulOptions"))
            return
        if e == 0.5 and Lw.rank(node.outputs[0]) == Lw.rank(x):
            Lw.emit("SQRT", [Lw.get(x, perm)], [Lw.define(node.outputs[0], perm)])
            return
    binary("POW", "PowOptions")(Lw, node)


@OPS.register("Clip")
def lower_clip(Lw, node):
    """Clip(0, 6) -> RELU6, Clip(0, inf) -> RELU, Clip(-1, 1) -> RELU_N1_TO_1, else MAXIMUM/MINIMUM."""
    lo = Lw.const(node.inputs[1]) if len(node.inputs) > 1 else attr(node, "min")
    hi = Lw.const(node.inputs[2]) if len(node.inputs) > 2 else attr(node, "max")
    lo = None if lo is None else float(np.asarray(lo).reshape(()))
    hi = None if hi is None else float(np.asarray(hi).reshape(()))
    x = node.inputs[0]
    perm = Lw.home(x) or L.identity(Lw.rank(x))
    src = Lw.get(x, perm)
    out = Lw.define(node.outputs[0], perm)
    named = {(0.0, 6.0): "RELU6", (0.0, None): "RELU", (-1.0, 1.0): "RELU_N1_TO_1"}
    if (lo, hi) in named:
        Lw.emit(named[(lo, hi)], [src], [out])
        return
    dtype = Lw.w.tensors[src].dtype
    stored = Lw.w.tensors[out].shape
    if lo is not None and hi is not None:
        mid = Lw.temp(f"{node.outputs[0].name}/max", stored, dtype)
        Lw.emit("MAXIMUM", [src, Lw.constant(f"{node.name}/min", np.array(lo, dtype))], [mid])
        Lw.emit("MINIMUM", [mid, Lw.constant(f"{node.name}/max", np.array(hi, dtype))], [out])
    elif lo is not None:
        Lw.emit("MAXIMUM", [src, Lw.constant(f"{node.name}/min", np.array(lo, dtype))], [out])
    elif hi is not None:
        Lw.emit("MINIMUM", [src, Lw.constant(f"{node.name}/max", np.array(hi, dtype))], [out])
    else:
        Lw.bind(node.outputs[0], perm, src)


@OPS.register("PRelu")
def lower_prelu(Lw, node):
    """PRelu(x, slope) -> PRELU with the slope broadcast and laid out like x."""
    x, slope = node.inputs[:2]
    rank = Lw.rank(x)
    perm = Lw.home(x) or L.identity(rank)
    Lw.emit("PRELU", [Lw.get(x, perm), Lw.broadcast_input(slope, rank, perm)],
            [Lw.define(node.outputs[0], perm)])


@OPS.register("Identity", "Dropout")
def lower_identity(Lw, node):
    x = node.inputs[0]
    perm = Lw.home(x) or L.identity(Lw.rank(x))
    Lw.bind(node.outputs[0], perm, Lw.get(x, perm), Lw.shape(x))


@OPS.register("Erf")
def lower_erf(Lw, node):
    """Erf without a builtin: Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7), builtins only.

        erf(x) = sign(x) * (1 - t*(a1 + t*(a2 + t*(a3 + t*(a4 + t*a5)))) * exp(-x*x)),
        t = 1 / (1 + p*|x|)

    A GELU pattern never gets here: ``fuse.fuse_gelu`` turns it into one GELU op first.
    """
    p, coeffs = 0.3275911, (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
    x = node.inputs[0]
    perm = Lw.home(x) or L.identity(Lw.rank(x))
    xi = Lw.get(x, perm)
    stored = Lw.w.tensors[xi].shape
    name = node.outputs[0].name

    def t_(tag):
        return Lw.temp(f"{name}/{tag}", stored)

    def c(tag, v):
        return Lw.constant(f"{name}/{tag}", np.array(v, np.float32))

    ax, px, den, t, sq, nsq, e, sign = (t_(k) for k in ("abs", "px", "den", "t", "sq", "nsq", "exp", "sign"))
    Lw.emit("ABS", [xi], [ax])
    Lw.emit("MUL", [ax, c("p", p)], [px], builtin_options("MulOptions"))
    Lw.emit("ADD", [px, c("one", 1.0)], [den], builtin_options("AddOptions"))
    Lw.emit("DIV", [c("one", 1.0), den], [t], builtin_options("DivOptions"))
    acc = c("a5", coeffs[4])
    for k in (3, 2, 1, 0):
        prod, nxt = t_(f"h{k}m"), t_(f"h{k}")
        Lw.emit("MUL", [acc, t], [prod], builtin_options("MulOptions"))
        Lw.emit("ADD", [prod, c(f"a{k + 1}", coeffs[k])], [nxt], builtin_options("AddOptions"))
        acc = nxt
    poly = t_("poly")
    Lw.emit("MUL", [acc, t], [poly], builtin_options("MulOptions"))
    Lw.emit("MUL", [xi, xi], [sq], builtin_options("MulOptions"))
    Lw.emit("NEG", [sq], [nsq])
    Lw.emit("EXP", [nsq], [e])
    pe, y = t_("pe"), t_("y")
    Lw.emit("MUL", [poly, e], [pe], builtin_options("MulOptions"))
    Lw.emit("SUB", [c("one", 1.0), pe], [y], builtin_options("SubOptions"))
    Lw.emit("SIGN", [xi], [sign])
    Lw.emit("MUL", [sign, y], [Lw.define(node.outputs[0], perm)], builtin_options("MulOptions"))


@OPS.register("Gelu")
def lower_gelu(Lw, node):
    """Gelu (made by ``fuse.fuse_gelu`` from Erf-GELU) -> builtin GELU."""
    approximate = attr(node, "approximate", "none") == "tanh"
    unary("GELU", "GeluOptions", approximate=approximate)(Lw, node)


# -- softmax and reductions ---------------------------------------------------------------
@OPS.register("Softmax")
def lower_softmax(Lw, node, builtin="SOFTMAX"):
    """Softmax over any axis: SOFTMAX works on the innermost axis, so the layout is chosen to put
    ``axis`` there (free when it already is, e.g. NHWC channels; else one TRANSPOSE).  A softmax
    over a short axis with many rows is decomposed instead, in a layout where the axis is strided
    (:func:`lower_short_softmax`)."""
    x = node.inputs[0]
    rank = Lw.rank(x)
    axis = positive_axis(attr(node, "axis", -1), rank)
    perm = Lw.home(x) or L.identity(rank)
    builtin_perm = perm if perm[-1] == axis else L.axis_last(perm, axis)
    if builtin == "SOFTMAX" and Lw.short_axis_layouts and L.short_axis(Lw.shape(x), axis, L.SHORT_SOFTMAX_AXIS):
        lower_short_softmax(Lw, node, axis, perm)
        keep_interface(Lw, node.outputs[0], builtin_perm)
        return
    perm = builtin_perm
    opts = builtin_options("SoftmaxOptions", beta=1.0) if builtin == "SOFTMAX" else builtin_options("LogSoftmaxOptions")
    Lw.emit(builtin, [Lw.get(x, perm)], [Lw.define(node.outputs[0], perm)], opts)


def lower_short_softmax(Lw, node, axis: int, perm) -> None:
    """Softmax over a short axis (``layout.short_axis``) -> [REDUCE_MAX, SUB,] EXP, SUM, DIV where
    the axis is strided: in ``perm`` if it is not innermost there, else in
    ``layout.strided_layout`` (one TRANSPOSE).  SOFTMAX itself only reduces the innermost axis,
    where a few elements per row make it ~6x slower (``layout.SHORT_SOFTMAX_AXIS``).

    The max subtraction is left out when the input is already ``x - ReduceMax(x)`` over the same
    axis (a hand-written stable softmax): its max is then exactly 0, so subtracting it again
    changes no bit."""
    x, out_t = node.inputs[0], node.outputs[0]
    shape = Lw.shape(x)
    if L.innermost(shape, perm, axis):
        perm = L.strided_layout(shape, perm, axis)
    kept = tuple(1 if a == axis else d for a, d in enumerate(shape))
    stored, stored_kept = L.stored_shape(shape, perm), L.stored_shape(kept, perm)
    axes = Lw.int32(f"{node.name}/axes", [L.position(perm, axis)])
    keep = builtin_options("ReducerOptions", keepDims=True)
    shifted = Lw.get(x, perm)
    if not _max_subtracted(Lw, x, axis):
        peak = Lw.temp(f"{out_t.name}/max", stored_kept)
        Lw.emit("REDUCE_MAX", [shifted, axes], [peak], keep)
        below = Lw.temp(f"{out_t.name}/shifted", stored)
        Lw.emit("SUB", [shifted, peak], [below], builtin_options("SubOptions"))
        shifted = below
    exp = Lw.temp(f"{out_t.name}/exp", stored)
    Lw.emit("EXP", [shifted], [exp])
    total = Lw.temp(f"{out_t.name}/sum", stored_kept)
    Lw.emit("SUM", [exp, axes], [total], keep)
    Lw.emit("DIV", [exp, total], [Lw.define(out_t, perm)], builtin_options("DivOptions"))


def keep_interface(Lw, t, layout) -> None:
    """A graph output computed by the short-axis rule is handed out as it was without it: a rank-4
    output's interface is NHWC exactly when it is stored NHWC (see ``convert``), so where the rule
    changed that, one conversion at the end restores ``layout``."""
    home = Lw.home(t)
    if t.name in Lw.graph_outputs and (home == L.NHWC) != (tuple(layout) == L.NHWC):
        Lw.get(t, layout)
        Lw.set_home(t, layout)


def _max_subtracted(Lw, x, axis: int) -> bool:
    """Is ``x`` = ``a - ReduceMax(a, [axis], keepdims=1)`` (each element <= 0, the max exactly 0)?"""
    if len(x.inputs) != 1 or x.inputs[0].op != "Sub":
        return False
    a, peak = x.inputs[0].inputs[:2]
    if Lw.const(a) is not None or len(peak.inputs) != 1 or peak.inputs[0].op != "ReduceMax":
        return False
    reducer = peak.inputs[0]
    found = reduce_axes(Lw, reducer)
    return reducer.inputs[0] is a and found is not None and found == ([axis], True) and Lw.shape(a) == Lw.shape(x)


@OPS.register("LogSoftmax")
def lower_log_softmax(Lw, node):
    lower_softmax(Lw, node, "LOG_SOFTMAX")


_REDUCERS = {"ReduceMean": "MEAN", "ReduceMax": "REDUCE_MAX", "ReduceMin": "REDUCE_MIN",
             "ReduceSum": "SUM", "ReduceProd": "REDUCE_PROD",
             "GlobalAveragePool": "MEAN", "GlobalMaxPool": "REDUCE_MAX"}


def reduce_axes(Lw, node) -> tuple[list[int], bool] | None:
    """(sorted non-negative axes, keepdims) of a Reduce*/Global*Pool node; None = no-op (identity)."""
    rank = Lw.rank(node.inputs[0])
    if node.op.startswith("Global"):
        return list(range(2, rank)), True
    axes = attr(node, "axes")
    if axes is None and len(node.inputs) > 1:
        axes = Lw.const(node.inputs[1])
        if axes is None and node.inputs[1].name:
            raise Lw.unsupported("axes must be a constant")
    axes = [] if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    if not axes:
        if attr(node, "noop_with_empty_axes", 0):
            return None
        axes = list(range(rank))
    return sorted({positive_axis(a, rank) for a in axes}), bool(attr(node, "keepdims", 1))


@OPS.register("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd", "GlobalAveragePool", "GlobalMaxPool")
def lower_reduce(Lw, node):
    """Reduce* / Global*Pool -> MEAN, SUM, REDUCE_MAX, ... over the memory positions of the axes.

    One short axis that is innermost in the data's layout (``layout.short_axis``, e.g. 5 classes
    after an NHWC convolution) is reduced in ``layout.strided_layout`` instead (one TRANSPOSE;
    a reduction over a few contiguous elements per row is ~4x slower, ``layout.SHORT_REDUCED_AXIS``).
    When the result cannot come back to the data's layout by a RESHAPE, the data follows it:
    that layout becomes its home, so ``x - ReduceMax(x)`` runs there too (no second TRANSPOSE)."""
    x = node.inputs[0]
    rank = Lw.rank(x)
    found = reduce_axes(Lw, node)
    if found is None:
        lower_identity(Lw, node)
        return
    axes, keep = found
    perm = home = Lw.home(x) or L.identity(rank)
    shape = Lw.shape(x)
    if (Lw.short_axis_layouts and len(axes) == 1 and L.innermost(shape, perm, axes[0])
            and L.short_axis(shape, axes[0], L.SHORT_REDUCED_AXIS)):
        strided = L.strided_layout(shape, perm, axes[0])
        out_shape = Lw.shape(node.outputs[0])
        out_home, out_strided = (p if keep else L.drop_axes(p, axes) for p in (perm, strided))
        if not L.only_unit_axes_move(out_shape, out_strided, out_home) and all(
                n.op in _LAYOUT_FREE for n in x.outputs):
            Lw.get(x, strided)
            Lw.set_home(x, strided)
        perm = strided
    out_perm = perm if keep else L.drop_axes(perm, axes)
    positions = sorted(L.position(perm, a) for a in axes)
    Lw.emit(_REDUCERS[node.op], [Lw.get(x, perm), Lw.int32(f"{node.name}/axes", positions)],
            [Lw.define(node.outputs[0], out_perm)], builtin_options("ReducerOptions", keepDims=keep))
    keep_interface(Lw, node.outputs[0], home if keep else L.drop_axes(home, axes))


#: Consumers that take any layout: a tensor they alone read may change its home layout.
_LAYOUT_FREE = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Abs", "Neg",
                "Sqrt", "Softmax", *_REDUCERS}


# -- shape ops ---------------------------------------------------------------------------------
@OPS.register("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def lower_reshape(Lw, node):
    """Reshape / Flatten / Squeeze / Unsqueeze -> RESHAPE, keeping the layout when the merged or
    split axes are contiguous in memory (``layout.reshape_layout``), else via identity layout."""
    x, out_t = node.inputs[0], node.outputs[0]
    in_shape, out_shape = Lw.shape(x), Lw.shape(out_t)
    perm = Lw.home(x) or L.identity(len(in_shape))
    out_perm = perm if tuple(in_shape) == tuple(out_shape) else L.reshape_layout(in_shape, perm, out_shape)
    if out_perm is None:
        perm = L.identity(len(in_shape))
        out_perm = L.identity(len(out_shape))
    src = Lw.get(x, perm)
    if (L.stored_shape(in_shape, perm) == L.stored_shape(out_shape, out_perm)
            and not (out_t.name in Lw.graph_outputs and not x.inputs)):
        # the same bytes in the same stored shape (a Reshape to its own shape, or one that only
        # relabels unit axes the layout already has in place): no RESHAPE, the tensor is reused
        Lw.bind(out_t, out_perm, src, out_shape)
        return
    out = Lw.define(out_t, out_perm)
    Lw.reshape_to(src, out, Lw.w.tensors[out].shape)


@OPS.register("Transpose")
def lower_transpose(Lw, node):
    """Transpose costs nothing: the output is the input's bytes with relabelled axes."""
    x = node.inputs[0]
    rank = Lw.rank(x)
    onnx_perm = attr(node, "perm") or list(reversed(range(rank)))
    perm = Lw.home(x) or L.identity(rank)
    Lw.bind(node.outputs[0], L.relabel(perm, onnx_perm), Lw.get(x, perm))


@OPS.register("Concat")
def lower_concat(Lw, node):
    out_t = node.outputs[0]
    rank = Lw.rank(out_t)
    axis = positive_axis(attr(node, "axis"), rank)
    perm = layout_of(Lw, node.inputs, rank)
    inputs = [Lw.get(t, perm) for t in node.inputs]
    Lw.emit("CONCATENATION", inputs, [Lw.define(out_t, perm)],
            builtin_options("ConcatenationOptions", axis=L.position(perm, axis)))


@OPS.register("Split")
def lower_split(Lw, node):
    x = node.inputs[0]
    rank = Lw.rank(x)
    axis = positive_axis(attr(node, "axis", 0), rank)
    perm = Lw.home(x) or L.identity(rank)
    pos = L.position(perm, axis)
    sizes = [Lw.shape(t)[axis] for t in node.outputs]
    outs = [Lw.define(t, perm) for t in node.outputs]
    src = Lw.get(x, perm)
    if len(set(sizes)) == 1:
        Lw.emit("SPLIT", [Lw.int32(f"{node.name}/axis", pos), src], outs,
                builtin_options("SplitOptions", numSplits=len(outs)))
    else:
        Lw.emit("SPLIT_V", [src, Lw.int32(f"{node.name}/sizes", sizes), Lw.int32(f"{node.name}/axis", pos)],
                outs, builtin_options("SplitVOptions", numSplits=len(outs)))


@OPS.register("Slice")
def lower_slice(Lw, node):
    """Slice with constant starts/ends/axes/steps -> STRIDED_SLICE on the stored axes."""
    x = node.inputs[0]
    shape = Lw.shape(x)
    rank = len(shape)
    vals = [Lw.const(t) if i < len(node.inputs) else None for i, t in enumerate(node.inputs[1:5], 1)]
    vals += [None] * (4 - len(vals))
    starts, ends, axes, steps = vals
    if starts is None or ends is None or (len(node.inputs) > 3 and node.inputs[3].name and axes is None) \
            or (len(node.inputs) > 4 and node.inputs[4].name and steps is None):
        raise Lw.unsupported("Slice needs constant starts/ends/axes/steps")
    starts = [int(v) for v in np.asarray(starts).reshape(-1)]
    ends = [int(v) for v in np.asarray(ends).reshape(-1)]
    axes = (list(range(len(starts))) if axes is None
            else [positive_axis(int(a), rank) for a in np.asarray(axes).reshape(-1)])
    steps = [1] * len(starts) if steps is None else [int(s) for s in np.asarray(steps).reshape(-1)]
    perm = Lw.home(x) or L.identity(rank)
    begin = [0] * rank
    end = [int(shape[a]) for a in perm]
    stride = [1] * rank
    end_mask = 0
    for s, e, a, st in zip(starts, ends, axes, steps):
        dim, pos = shape[a], L.position(perm, a)
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
            if e == -1:
                end_mask |= 1 << pos
                e = 0
        begin[pos], end[pos], stride[pos] = s, e, st
    name = node.name
    Lw.emit("STRIDED_SLICE", [Lw.get(x, perm), Lw.int32(f"{name}/begin", begin), Lw.int32(f"{name}/end", end),
                              Lw.int32(f"{name}/strides", stride)],
            [Lw.define(node.outputs[0], perm)], builtin_options("StridedSliceOptions", endMask=end_mask))


@OPS.register("Gather")
def lower_gather(Lw, node):
    x, indices = node.inputs[:2]
    rank = Lw.rank(x)
    axis = positive_axis(attr(node, "axis", 0), rank)
    perm = Lw.home(x) or L.identity(rank)
    value = Lw.const(indices)
    if value is not None:
        value = np.asarray(value).astype(np.int64)
        value = np.where(value < 0, value + Lw.shape(x)[axis], value).astype(np.int32)
        idx = Lw.constant(f"{node.name}/indices", value)
        index_rank = value.ndim
    else:
        idx = Lw.get(indices, L.identity(Lw.rank(indices)))
        index_rank = Lw.rank(indices)
    out_perm = L.gather_layout(perm, axis, index_rank)
    Lw.emit("GATHER", [Lw.get(x, perm), idx], [Lw.define(node.outputs[0], out_perm)],
            builtin_options("GatherOptions", axis=L.position(perm, axis)))


@OPS.register("Pad")
def lower_pad(Lw, node):
    x = node.inputs[0]
    rank = Lw.rank(x)
    pads = Lw.const(node.inputs[1]) if len(node.inputs) > 1 else attr(node, "pads")
    if pads is None:
        raise Lw.unsupported("pads must be constant")
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    axes = Lw.const(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3].name else None
    axes = list(range(rank)) if axes is None else [positive_axis(int(a), rank) for a in np.asarray(axes).reshape(-1)]
    n = len(axes)
    begin_end = {a: (pads[i], pads[i + n]) for i, a in enumerate(axes)}
    if any(p < 0 for p in pads):
        raise Lw.unsupported("negative pads (cropping) are not mapped")
    perm = Lw.home(x) or L.identity(rank)
    paddings = [begin_end.get(a, (0, 0)) for a in perm]
    mode = attr(node, "mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    src, out = Lw.get(x, perm), Lw.define(node.outputs[0], perm)
    pad_const = Lw.int32(f"{node.name}/paddings", paddings)
    if mode == "constant":
        value = Lw.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2].name else None
        value = 0.0 if value is None else float(np.asarray(value).reshape(()))
        if value == 0.0:
            Lw.emit("PAD", [src, pad_const], [out], builtin_options("PadOptions"))
        else:
            fill = Lw.constant(f"{node.name}/value", np.array(value, Lw.w.tensors[src].dtype))
            Lw.emit("PADV2", [src, pad_const, fill], [out], builtin_options("PadV2Options"))
    elif mode == "reflect":
        Lw.emit("MIRROR_PAD", [src, pad_const], [out],
                builtin_options("MirrorPadOptions", mode=fb.MirrorPadMode.REFLECT))
    elif mode == "edge":
        _edge_pad(Lw, node, src, out, [begin_end.get(a, (0, 0)) for a in perm])
    else:
        raise Lw.unsupported(f"Pad mode '{mode}' has no TFLite builtin")


def _edge_pad(Lw, node, src, out, paddings):
    """Edge padding (MIRROR_PAD has only REFLECT/SYMMETRIC, schema.fbs MirrorPadMode) as one GATHER
    per padded stored axis with clamped source indices: index i reads x[clip(i - begin, 0, n-1)]."""
    padded = [(pos, b, e) for pos, (b, e) in enumerate(paddings) if b or e]
    shape = list(Lw.w.tensors[src].shape)
    if not padded:
        Lw.reshape_to(src, out, shape)
    for k, (pos, b, e) in enumerate(padded):
        n = shape[pos]
        shape[pos] = n + b + e
        dst = out if k == len(padded) - 1 else Lw.temp(f"{node.name}/edge{pos}", shape, Lw.w.tensors[src].dtype)
        index = np.clip(np.arange(-b, n + e), 0, n - 1)
        Lw.emit("GATHER", [src, Lw.int32(f"{node.name}/edge_index{pos}", index)], [dst],
                builtin_options("GatherOptions", axis=pos))
        src = dst


@OPS.register("Expand")
def lower_expand(Lw, node):
    out_t = node.outputs[0]
    rank = Lw.rank(out_t)
    x = node.inputs[0]
    perm = layout_of(Lw, [x], rank)
    out = Lw.define(out_t, perm)
    Lw.emit("BROADCAST_TO", [Lw.broadcast_input(x, rank, perm),
                             Lw.int32(f"{node.name}/shape", Lw.w.tensors[out].shape)], [out])


@OPS.register("Tile")
def lower_tile(Lw, node):
    x = node.inputs[0]
    reps = Lw.const(node.inputs[1])
    if reps is None:
        raise Lw.unsupported("repeats must be constant")
    reps = [int(r) for r in np.asarray(reps).reshape(-1)]
    perm = Lw.home(x) or L.identity(Lw.rank(x))
    Lw.emit("TILE", [Lw.get(x, perm), Lw.int32(f"{node.name}/multiples", [reps[a] for a in perm])],
            [Lw.define(node.outputs[0], perm)])


@OPS.register("Reciprocal")
def lower_reciprocal(Lw, node):
    """Reciprocal(x) -> DIV(1, x)."""
    x = node.inputs[0]
    perm = Lw.home(x) or L.identity(Lw.rank(x))
    one = Lw.constant(f"{node.name}/one", np.array(1.0, np.float32))
    Lw.emit("DIV", [one, Lw.get(x, perm)], [Lw.define(node.outputs[0], perm)], builtin_options("DivOptions"))


@OPS.register("LeakyRelu")
def lower_leaky_relu(Lw, node):
    unary("LEAKY_RELU", "LeakyReluOptions", alpha=float(attr(node, "alpha", 0.01)))(Lw, node)


@OPS.register("Div")
def lower_div(Lw, node):
    """x / c, c a constant without zeros -> MUL(x, 1/c): XNNPACK multiplies faster than it divides
    (a per-channel input normalization ran 2x slower as DIV than litert-torch's MUL); the
    product is within an ulp or two of the quotient.  Anything else -> DIV."""
    divisor = Lw.const(node.inputs[1])
    if divisor is not None and Lw.const(node.inputs[0]) is None:
        divisor = np.asarray(divisor)
        if divisor.dtype.kind == "f" and np.all(np.isfinite(divisor)) and np.all(divisor != 0):
            # np.asarray: 1 / a 0-d array is a numpy scalar, which graphsurgeon refuses
            reciprocal = gs.Constant(f"{node.name}/reciprocal", np.asarray(1 / divisor, dtype=divisor.dtype))
            out_t = node.outputs[0]
            rank = Lw.rank(out_t)
            perm = layout_of(Lw, node.inputs[:2], rank)
            Lw.emit("MUL", [input_for(Lw, node.inputs[0], rank, perm), input_for(Lw, reciprocal, rank, perm)],
                    [Lw.define(out_t, perm)], builtin_options("MulOptions"))
            return
    binary("DIV", "DivOptions")(Lw, node)


for _op, _builtin in (("Add", "ADD"), ("Sub", "SUB"), ("Mul", "MUL")):
    OPS.register(_op)(binary(_builtin, f"{_op}Options"))
for _op, _builtin, _options in (
        ("Relu", "RELU", None), ("Sigmoid", "LOGISTIC", None), ("Tanh", "TANH", None), ("Exp", "EXP", "ExpOptions"),
        ("Log", "LOG", None), ("Sqrt", "SQRT", None), ("Abs", "ABS", "AbsOptions"), ("Neg", "NEG", "NegOptions"),
        ("Floor", "FLOOR", None), ("Sign", "SIGN", None), ("Ceil", "CEIL", None), ("Sin", "SIN", None),
        ("Cos", "COS", "CosOptions"), ("HardSwish", "HARD_SWISH", "HardSwishOptions"), ("Round", "ROUND", None)):
    OPS.register(_op)(unary(_builtin, _options))
