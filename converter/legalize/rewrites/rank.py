"""Rank lowering: tensors of rank > 4 re-expressed exactly with tensors of rank <= 4.

Accelerators stop at rank 4 (TFLite's GPU and NNAPI delegates, MACE's GPU, and MACE's CPU
Transpose and StridedSlice), but real models make rank-5/6 tensors in passing: attention splits a
packed projection into ``[B, N, 3, heads, d]`` and permutes it, Swin partitions windows through
``[B, H/w, w, W/w, w, C]``, Swin's shifted-window mask is added at ``[B, nW, heads, N, N]``.
Between two tensors of rank <= 4 such a chain moves data, or computes on dims it does not mix, so
it has an exact rank-4 spelling.

A rule here lowers a whole *component*: the nodes connected through tensors of rank > 4.  Each
such tensor is carried by a stand-in of rank <= 4 holding the same values in the same row-major
order (a reshape of it), so Reshape / Flatten / Squeeze / Unsqueeze cost nothing, and every other
op works on a view that merges the dims it treats alike and drops unit dims:

* Transpose: unit dims dropped, axes that stay adjacent merged; what is still above rank 4 is
  done as block moves ``[X, A, B, Y] -> [X, B, A, Y]``, each a rank-4 Transpose;
* Gather with constant indices / Slice / Concat / Split on axis ``a``: the view ``[P, n, Q]``
  (P = product of the dims before ``a``, Q after), a Slice (or Gather) on axis 1;
* elementwise ops (broadcasting): adjacent dims with the same broadcast pattern merged;
* Softmax / reductions / ArgMax / LayerNormalization: dims merged around the reduced axes;
* MatMul: batch dims merged (into the rows when the right operand has no batch).

Where the component meets the rest of the graph, a Reshape restores the original tensor (its
name, shape and consumers are kept).  Every step only moves data or applies the same op to the
same numbers: the result is bit-identical to the original.  The rules decline, with the reason,
when a tensor's shape is unknown, a graph input/output has rank > 4, or an op in the component
has no lowering here (a 3-D convolution, for one).

Also here: a Gather with a constant scalar index on a tensor of rank <= 4 (which the TFLite GPU
and NNAPI delegates refuse) as a Slice + Reshape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs

from ...ir.graph import attr, constant_value, dtype_name, provenance_of, static_shape, tensor_rank
from .base import const_input, present, rule

#: The lowest rank limit among the matrix's accelerators (``max_rank: 4``, MACE's ``rank`` <= 4
#: constraints on Transpose and StridedSlice).
RANK_LIMIT = 4

#: Ops whose output holds the input's values in the same row-major order.
SAME_ORDER = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
UNARY = ("Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Abs", "Neg", "Sqrt", "Reciprocal", "Floor",
         "Ceil", "Round", "Sin", "Cos", "Sign", "Not", "Cast", "Softplus", "Softsign", "HardSigmoid",
         "HardSwish", "Elu", "Selu", "LeakyRelu", "Celu", "ThresholdedRelu")
BROADCAST = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Equal", "Greater", "Less",
             "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor", "Where", "PRelu", "Clip", "Mod")
REDUCE = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")
SOFTMAX = ("Softmax", "LogSoftmax")


class Refuse(Exception):
    """The component cannot be lowered; the message says why."""


@dataclass
class _Val:
    """A value in the lowered graph: a tensor (None in a dry run) of ``shape`` whose row-major
    data is that of the original tensor it stands for."""

    tensor: gs.Tensor | None
    shape: tuple[int, ...]
    dtype: np.dtype
    const: np.ndarray | None = None
    reshaped_from: _Val | None = None   # set on an emitted Reshape: chains of views fold
    emitted: bool = False


def _prod(dims) -> int:
    return int(math.prod(int(d) for d in dims))


def _dtype(t: gs.Tensor) -> np.dtype:
    name = dtype_name(t)
    try:
        return np.dtype(name) if name else np.dtype(np.float32)
    except TypeError:
        return np.dtype(np.float32)


def _shape(t: gs.Tensor) -> tuple[int, ...]:
    shape = static_shape(t)
    if shape is None:
        raise Refuse(f"tensor {t.name} has no static shape")
    return shape


def _high(t: gs.Tensor) -> bool:
    r = tensor_rank(t)
    return r is not None and r > RANK_LIMIT


# ----------------------------------------------------------------------------------------------
# The component


def _is_graph_io(t: gs.Tensor, graph: gs.Graph) -> bool:
    return any(o is t for o in graph.outputs) or any(i is t for i in graph.inputs)


def component(node: gs.Node, graph: gs.Graph, outputs_of=None) -> list[gs.Node]:
    """The nodes connected to ``node`` through tensors of rank > 4, in topological order."""
    outs = outputs_of or (lambda n: n.outputs)
    if not any(_high(t) for t in list(node.inputs) + list(outs(node)) if t is not None):
        raise Refuse(f"no tensor of rank > {RANK_LIMIT}")
    seen, todo = {id(node): node}, [node]
    while todo:
        n = todo.pop()
        for t in list(n.inputs) + list(outs(n)):
            if t is None or not _high(t):
                continue
            if _is_graph_io(t, graph):
                raise Refuse(f"graph input/output {t.name} has rank {tensor_rank(t)}")
            for m in list(t.inputs) + list(t.outputs):
                if id(m) not in seen:
                    seen[id(m)] = m
                    todo.append(m)
    nodes = list(seen.values())
    # Topological order inside the component (the graph's list may not be sorted mid-pass).
    made_by = {id(t): n for n in nodes for t in outs(n)}
    order, placed = [], set()

    def place(n, depth=0):
        if id(n) in placed:
            return
        for t in n.inputs:
            p = made_by.get(id(t))
            if p is not None and p is not n:
                place(p, depth + 1)
        placed.add(id(n))
        order.append(n)

    for n in sorted(nodes, key=lambda n: n.name):
        place(n)
    return order


# ----------------------------------------------------------------------------------------------
# Emission (or, in a dry run, shape bookkeeping only)


class _Lowering:
    def __init__(self, graph: gs.Graph, rw=None, outputs_of=None):
        self.graph, self.rw = graph, rw
        self.outs = outputs_of or (lambda n: n.outputs)
        self.vals: dict[int, _Val] = {}
        self.views: dict[tuple[int, tuple[int, ...]], _Val] = {}
        self.owner: gs.Node | None = None

    # -- values
    def val(self, t: gs.Tensor) -> _Val:
        if id(t) not in self.vals:
            const = constant_value(t)
            shape = tuple(const.shape) if const is not None else _shape(t)
            if len(shape) > RANK_LIMIT and const is None:
                raise Refuse(f"tensor {t.name} (rank {len(shape)}) has no producer in the component")
            self.vals[id(t)] = _Val(t, shape, _dtype(t), const)
        return self.vals[id(t)]

    def bind(self, t: gs.Tensor, v: _Val) -> None:
        if _prod(v.shape) != _prod(_shape(t)):
            raise Refuse(f"internal: {t.name} has {_prod(_shape(t))} elements, its stand-in {_prod(v.shape)}")
        self.vals[id(t)] = v

    def view(self, v: _Val, shape) -> _Val:
        """``v``'s data as ``shape`` (same element count, rank <= 4)."""
        shape = tuple(int(s) for s in shape)
        if len(shape) > RANK_LIMIT:
            raise Refuse(f"internal: a rank-{len(shape)} view")
        if v.shape == shape:
            return v
        if v.const is not None:
            value = v.const.reshape(shape)
            t = None if self.rw is None else self.rw.const("view", value, dtype=value.dtype)
            return _Val(t, shape, v.dtype, value)
        if v.reshaped_from is not None:
            return self.view(v.reshaped_from, shape)
        key = (id(v), shape)
        if key not in self.views:  # several readers of one view share its Reshape
            self.views[key] = self.emit("Reshape", [v, self.ints(shape)], {}, shape, v.dtype)
            self.views[key].reshaped_from = v
        return self.views[key]

    def ints(self, values) -> _Val:
        arr = np.asarray(list(values), dtype=np.int64)
        t = None if self.rw is None else self.rw.ints("i", arr)
        return _Val(t, arr.shape, arr.dtype, arr)

    def emit(self, op: str, inputs, attrs, shape, dtype, n_out: int = 1, shapes=None):
        shapes = shapes or [shape]
        if self.rw is None:
            vals = [_Val(None, tuple(s), np.dtype(dtype), emitted=True) for s in shapes]
            return vals[0] if n_out == 1 else vals
        ins = [i.tensor if isinstance(i, _Val) else i for i in inputs]
        outs = [gs.Variable(self.rw.names(f"{self.rw.node.name}/{op.lower()}"), dtype=np.dtype(dtype),
                            shape=list(s)) for s in shapes]
        self.rw.emit(op, ins, attrs, outputs=outs)
        new = self.rw.new_nodes[-1]
        if self.owner is not None:
            provenance_of(self.graph).record_node(new.name, self.owner.name, self.rw.by)
        vals = [_Val(o, tuple(s), np.dtype(dtype), emitted=True) for o, s in zip(outs, shapes)]
        return vals[0] if n_out == 1 else vals

    # -- the whole component
    def run(self, nodes: list[gs.Node]) -> None:
        for n in nodes:
            handler = HANDLERS.get(n.op)
            if handler is None:
                raise Refuse(f"{n.op} ({n.name}) on a tensor of rank > {RANK_LIMIT} has no rank lowering")
            self.owner = n
            handler(self, n)

    def finish(self, nodes: list[gs.Node]) -> None:
        """Write every tensor the rest of the graph reads from the component, then detach it."""
        inside = {id(n) for n in nodes}
        exits = []
        for n in nodes:
            for t in self.outs(n):
                read_outside = any(id(c) not in inside for c in t.outputs)
                if read_outside or any(o is t for o in self.graph.outputs):
                    exits.append((n, t))
        for n in nodes:
            n.inputs.clear()
            n.outputs.clear()
        for n, t in exits:
            self.owner = n
            v = self.vals[id(t)]
            shape = _shape(t)
            if v.shape == shape and v.emitted:
                # The stand-in's producer writes the tensor itself (once: later exits read it).
                producer = v.tensor.inputs[0]
                for consumer in list(v.tensor.outputs):
                    for i, x in enumerate(consumer.inputs):
                        if x is v.tensor:
                            consumer.inputs[i] = t
                producer.outputs[producer.outputs.index(v.tensor)] = t
                v.tensor, v.emitted = t, False
            elif v.shape == shape and not any(o is t for o in self.graph.outputs):
                for consumer in list(t.outputs):  # the same values already exist: read them
                    for i, x in enumerate(consumer.inputs):
                        if x is t:
                            consumer.inputs[i] = v.tensor
            else:
                src = v.reshaped_from if v.reshaped_from is not None else v
                self.rw.emit("Reshape", [src.tensor, self.rw.ints("shape", shape)], outputs=[t])
                provenance_of(self.graph).record_node(self.rw.new_nodes[-1].name, n.name, self.rw.by)


# ----------------------------------------------------------------------------------------------
# Per-op lowerings: each reads the stand-ins of its inputs and binds stand-ins for its outputs


def _axis(value, rank: int) -> int:
    a = int(value)
    return a + rank if a < 0 else a


def _same_order(lw: _Lowering, node):
    lw.bind(lw.outs(node)[0], lw.val(node.inputs[0]))


def _transpose_plan(shape, perm):
    """(merged input shape, permutation) with unit dims dropped and adjacent axes merged."""
    order = [d for d in perm if shape[d] != 1]
    runs: list[list[int]] = []
    for d in order:
        if runs and d == runs[-1][-1] + 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    by_input = sorted(runs, key=lambda r: r[0])
    merged = [_prod(shape[d] for d in r) for r in by_input]
    return merged, [by_input.index(r) for r in runs]


def _transpose(lw: _Lowering, node):
    x = lw.val(node.inputs[0])
    shape = _shape(node.inputs[0])
    perm = [int(p) for p in attr(node, "perm", list(range(len(shape)))[::-1])]
    sizes, q = _transpose_plan(shape, perm)
    cur = list(range(len(q)))
    v = x
    if len(q) <= RANK_LIMIT and q != cur:
        v = lw.view(x, sizes)
        v = lw.emit("Transpose", [v], {"perm": q}, [sizes[i] for i in q], x.dtype)
    else:
        # Block moves: bring the next wanted run of axes to its place with one rank-4 Transpose.
        for i in range(len(q)):
            if cur[i] == q[i]:
                continue
            j = cur.index(q[i])
            k = 1
            while i + k < len(q) and j + k < len(q) and cur[j + k] == q[i + k]:
                k += 1
            blocks = [cur[:i], cur[i:j], cur[j:j + k], cur[j + k:]]
            dims = [_prod(sizes[a] for a in b) for b in blocks]
            keep = [b for b in range(4) if dims[b] != 1]
            move = [b for b in (0, 2, 1, 3) if dims[b] != 1]
            v = lw.view(v, [dims[b] for b in keep])
            v = lw.emit("Transpose", [v], {"perm": [keep.index(b) for b in move]}, [dims[b] for b in move], x.dtype)
            cur = blocks[0] + blocks[2] + blocks[1] + blocks[3]
    lw.bind(lw.outs(node)[0], v)


def _around(shape, axis):
    return _prod(shape[:axis]), int(shape[axis]), _prod(shape[axis + 1:])


def _slice_axis(lw: _Lowering, v: _Val, shape, axis, picked: list[int]) -> _Val:
    """Keep the indices ``picked`` of ``axis`` (an arithmetic run: a Slice; else a Gather)."""
    p, n, q = _around(shape, axis)
    if picked == list(range(n)):
        return v
    view = lw.view(v, (p, n, q))
    step = picked[1] - picked[0] if len(picked) > 1 else 1
    if step != 0 and picked == list(range(picked[0], picked[0] + step * len(picked), step)):
        end = picked[-1] + step
        if end < 0:
            end = -n - 1  # "before index 0" for a negative step (a plain -1 would mean n - 1)
        return lw.emit("Slice", [view, lw.ints([picked[0]]), lw.ints([end]), lw.ints([1]), lw.ints([step])],
                       {}, (p, len(picked), q), v.dtype)
    return lw.emit("Gather", [view, lw.ints(picked)], {"axis": 1}, (p, len(picked), q), v.dtype)


def _gather(lw: _Lowering, node):
    shape = _shape(node.inputs[0])
    axis = _axis(attr(node, "axis", 0), len(shape))
    idx = const_input(node, 1)
    if idx is None:
        raise Refuse(f"Gather {node.name} has runtime indices")
    n = shape[axis]
    flat = [int(i) + n if int(i) < 0 else int(i) for i in np.asarray(idx).ravel()]
    if not flat or any(i < 0 or i >= n for i in flat):
        raise Refuse(f"Gather {node.name} indices are empty or out of range")
    lw.bind(lw.outs(node)[0], _slice_axis(lw, lw.val(node.inputs[0]), shape, axis, flat))


def _slice(lw: _Lowering, node):
    shape = list(_shape(node.inputs[0]))
    starts, ends = const_input(node, 1), const_input(node, 2)
    axes = const_input(node, 3) if present(node, 3) else np.arange(len(starts) if starts is not None else 0)
    steps = const_input(node, 4) if present(node, 4) else np.ones(len(axes), np.int64)
    if starts is None or ends is None or axes is None or steps is None:
        raise Refuse(f"Slice {node.name} has runtime starts/ends/axes/steps")
    v = lw.val(node.inputs[0])
    for s, e, a, st in zip(starts.tolist(), ends.tolist(), axes.tolist(), steps.tolist()):
        a = _axis(a, len(shape))
        picked = list(range(*slice(int(s), int(e), int(st)).indices(shape[a])))
        if not picked:
            raise Refuse(f"Slice {node.name} is empty")
        v = _slice_axis(lw, v, shape, a, picked)
        shape[a] = len(picked)
    lw.bind(lw.outs(node)[0], v)


def _concat(lw: _Lowering, node):
    out = lw.outs(node)[0]
    shape = _shape(out)
    axis = _axis(attr(node, "axis"), len(shape))
    p, _, q = _around(shape, axis)
    parts = [lw.view(lw.val(t), (p, _shape(t)[axis], q)) for t in node.inputs if _prod(_shape(t))]
    lw.bind(out, lw.emit("Concat", parts, {"axis": 1}, (p, shape[axis], q), parts[0].dtype))


def _split(lw: _Lowering, node):
    shape = _shape(node.inputs[0])
    axis = _axis(attr(node, "axis", 0), len(shape))
    outs = lw.outs(node)
    sizes = [_shape(o)[axis] for o in outs]
    p, n, q = _around(shape, axis)
    x = lw.view(lw.val(node.inputs[0]), (p, n, q))
    opset = lw.rw.opset if lw.rw is not None else int(lw.graph.opset or 17)
    ins, attrs = [x], {"axis": 1}
    if opset >= 13:
        ins.append(lw.ints(sizes))
    else:
        attrs["split"] = sizes
    parts = lw.emit("Split", ins, attrs, None, x.dtype, n_out=len(outs), shapes=[(p, s, q) for s in sizes])
    for o, part in zip(outs, parts if isinstance(parts, list) else [parts]):
        lw.bind(o, part)


def _groups(out_shape, operand_shapes):
    """Merge neighbouring dims with the same broadcast pattern (dims of size 1 in the output are
    dropped: they do not change the layout).  Returns (merged output dims, each operand's view)."""
    rank = len(out_shape)
    aligned = [(1,) * (rank - len(s)) + tuple(s) for s in operand_shapes]
    groups: list[tuple[list[int], tuple]] = []
    for d in range(rank):
        if out_shape[d] == 1:
            continue
        pattern = tuple(s[d] == out_shape[d] for s in aligned)
        if groups and groups[-1][1] == pattern:
            groups[-1][0].append(d)
        else:
            groups.append(([d], pattern))
    dims = [_prod(out_shape[d] for d in g) for g, _ in groups]
    views = [[dim if pat[k] else 1 for dim, (_, pat) in zip(dims, groups)] for k in range(len(aligned))]
    return dims, views


def _operand_shape(t: gs.Tensor) -> tuple[int, ...]:
    c = constant_value(t)
    return tuple(c.shape) if c is not None else _shape(t)


def _elementwise(lw: _Lowering, node):
    out = lw.outs(node)[0]
    shape = _shape(out)
    given = [i for i, t in enumerate(node.inputs) if not (isinstance(t, gs.Variable) and t.name == "")]
    spread = [0] if node.op == "Clip" else given  # Clip's bounds are scalars: left as they are
    dims, views = _groups(shape, [_operand_shape(node.inputs[i]) for i in spread])
    if len(dims) > RANK_LIMIT:
        raise Refuse(f"{node.op} {node.name}: broadcasting keeps {len(dims)} distinct dims")
    ins = list(node.inputs)
    for i, view in zip(spread, views):
        ins[i] = lw.view(lw.val(node.inputs[i]), view or [1])
    lw.bind(out, lw.emit(node.op, ins, dict(node.attrs), dims or [1], _dtype(out)))


def _unary(lw: _Lowering, node):
    out = lw.outs(node)[0]
    x = lw.val(node.inputs[0])
    lw.bind(out, lw.emit(node.op, [x], dict(node.attrs), x.shape, _dtype(out)))


def _softmax(lw: _Lowering, node):
    shape = _shape(node.inputs[0])
    opset = lw.rw.opset if lw.rw is not None else int(lw.graph.opset or 17)
    axis = _axis(attr(node, "axis", -1 if opset >= 13 else 1), len(shape))
    p, n, q = _around(shape, axis)
    if opset < 13:  # the old Softmax flattens from `axis` on
        n, q = n * q, 1
    view = (p, n) if q == 1 else (p, n, q)
    x = lw.view(lw.val(node.inputs[0]), view)
    lw.bind(lw.outs(node)[0], lw.emit(node.op, [x], {"axis": 1}, view, x.dtype))


def _reduce_axes(lw: _Lowering, node, rank):
    opset = lw.rw.opset if lw.rw is not None else int(lw.graph.opset or 17)
    as_input = opset >= (13 if node.op == "ReduceSum" else 18)
    if as_input:
        axes = const_input(node, 1) if present(node, 1) else None
        if present(node, 1) and axes is None:
            raise Refuse(f"{node.op} {node.name} has runtime axes")
    else:
        axes = attr(node, "axes")
    if axes is None or len(np.asarray(axes).ravel()) == 0:
        if as_input and int(attr(node, "noop_with_empty_axes", 0)):
            return []
        return list(range(rank))
    return sorted({_axis(a, rank) for a in np.asarray(axes).ravel().tolist()})


def _reduce(lw: _Lowering, node):
    shape = _shape(node.inputs[0])
    axes = _reduce_axes(lw, node, len(shape))
    keepdims = int(attr(node, "keepdims", 1))
    # Unit dims do not change the layout: dropped, reduced or not (a reduction over unit dims
    # only is the identity, except for ReduceL1/L2/SumSquare/LogSum).  A reduced dim never
    # merges with a kept one.
    groups: list[list[int]] = []
    for d in range(len(shape)):
        if shape[d] == 1:
            continue
        if groups and (d in axes) == (groups[-1][-1] in axes):
            groups[-1].append(d)
        else:
            groups.append([d])
    if len(groups) > RANK_LIMIT:
        raise Refuse(f"{node.op} {node.name} keeps {len(groups)} distinct dims")
    dims = [_prod(shape[d] for d in g) for g in groups] or [1]
    red = [i for i, g in enumerate(groups) if g[0] in axes]
    x = lw.view(lw.val(node.inputs[0]), dims)
    out_dims = [1 if i in red else d for i, d in enumerate(dims)] if keepdims else \
        [d for i, d in enumerate(dims) if i not in red]
    if not red:
        if node.op in ("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum") and axes:
            raise Refuse(f"{node.op} {node.name} over unit dims only")
        lw.bind(lw.outs(node)[0], x)
        return
    opset = lw.rw.opset if lw.rw is not None else int(lw.graph.opset or 17)
    if opset >= (13 if node.op == "ReduceSum" else 18):
        y = lw.emit(node.op, [x, lw.ints(red)], {"keepdims": keepdims}, out_dims or [1], x.dtype)
    else:
        y = lw.emit(node.op, [x], {"axes": red, "keepdims": keepdims}, out_dims or [1], x.dtype)
    lw.bind(lw.outs(node)[0], y)


def _argmax(lw: _Lowering, node):
    shape = _shape(node.inputs[0])
    axis = _axis(attr(node, "axis", 0), len(shape))
    p, n, q = _around(shape, axis)
    x = lw.view(lw.val(node.inputs[0]), (p, n, q))
    keep = int(attr(node, "keepdims", 1))
    out = lw.outs(node)[0]
    lw.bind(out, lw.emit(node.op, [x], dict(node.attrs, axis=1), (p, 1, q) if keep else (p, q), _dtype(out)))


def _layernorm(lw: _Lowering, node):
    if any(t.outputs for t in lw.outs(node)[1:]):
        raise Refuse(f"LayerNormalization {node.name}: Mean/InvStdDev outputs are used")
    shape = _shape(node.inputs[0])
    axis = _axis(attr(node, "axis", -1), len(shape))
    p, r = _prod(shape[:axis]), _prod(shape[axis:])
    ins = [lw.view(lw.val(node.inputs[0]), (p, r))]
    for i in (1, 2):
        if present(node, i):
            t = node.inputs[i]
            ins.append(lw.view(lw.val(t), (_prod(_shape(t) if constant_value(t) is None else constant_value(t).shape),)))
    lw.bind(lw.outs(node)[0], lw.emit("LayerNormalization", ins, dict(node.attrs, axis=-1), (p, r), ins[0].dtype))


def _matmul(lw: _Lowering, node):
    a_shape, b_shape = _shape(node.inputs[0]), _shape(node.inputs[1])
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise Refuse(f"MatMul {node.name} has a 1-D operand")
    out = lw.outs(node)[0]
    out_shape = _shape(out)
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    batch = out_shape[:-2]
    dims, (va, vb) = _groups(batch, [a_shape[:-2], b_shape[:-2]])
    a, b = lw.val(node.inputs[0]), lw.val(node.inputs[1])
    if all(d == 1 for d in vb):  # right operand without batch: the batch joins the rows
        rows = _prod(dims) * m
        y = lw.emit("MatMul", [lw.view(a, (rows, k)), lw.view(b, (k, n))], {}, (rows, n), _dtype(out))
    else:
        if len(dims) + 2 > RANK_LIMIT:
            raise Refuse(f"MatMul {node.name} keeps {len(dims)} distinct batch dims")
        y = lw.emit("MatMul", [lw.view(a, (*va, m, k)), lw.view(b, (*vb, k, n))], {}, (*dims, m, n), _dtype(out))
    lw.bind(out, y)


def _expand(lw: _Lowering, node):
    out = lw.outs(node)[0]
    shape = _shape(out)
    dims, (view,) = _groups(shape, [_shape(node.inputs[0])])
    if len(dims) > RANK_LIMIT:
        raise Refuse(f"Expand {node.name} keeps {len(dims)} distinct dims")
    dims, view = dims or [1], view or [1]
    x = lw.view(lw.val(node.inputs[0]), view)
    lw.bind(out, lw.emit("Expand", [x, lw.ints(dims)], {}, dims, x.dtype))


HANDLERS = {
    **{op: _same_order for op in SAME_ORDER},
    **{op: _unary for op in UNARY},
    **{op: _elementwise for op in BROADCAST},
    **{op: _reduce for op in REDUCE},
    **{op: _softmax for op in SOFTMAX},
    "Transpose": _transpose, "Gather": _gather, "Slice": _slice, "Concat": _concat, "Split": _split,
    "MatMul": _matmul, "LayerNormalization": _layernorm, "ArgMax": _argmax, "ArgMin": _argmax,
    "Expand": _expand,
}


# ----------------------------------------------------------------------------------------------
# The rules


def lowerable(node: gs.Node, graph: gs.Graph) -> str | None:
    """None when the component of ``node`` lowers to rank <= 4, else why not (a dry run)."""
    try:
        nodes = component(node, graph)
        lw = _Lowering(graph)
        lw.run(nodes)
        return None
    except Refuse as why:
        return str(why)


def rewritten_with(node: gs.Node, graph: gs.Graph) -> list[gs.Node]:
    """The rule's scope: the whole component is rewritten, not just ``node``."""
    try:
        return component(node, graph)
    except Refuse:
        return [node]


def _lower(rw, node):
    def outs(n):
        return (rw.outputs if n is node else n.outputs)
    nodes = component(node, rw.graph, outs)
    lw = _Lowering(rw.graph, rw, outs)
    lw.run(nodes)
    lw.finish(nodes)


_DOC = """Lower the component of tensors of rank > 4 around this node to rank <= 4 (exact).

before: q ─► Reshape[B,N,3,h,d] ─► Transpose(2,0,3,1,4) ─► Gather(axis 0, 0) ─► [B,h,N,d]
after (B = 1):  q ─► Reshape[N,3h,d] ─► Transpose(1,0,2) ─► Reshape[1,3,hNd] ─► Slice(axis 1, 0:1)
                  ─► Reshape[B,h,N,d]
Every tensor of rank > 4 is carried by a rank <= 4 stand-in with the same row-major data; see the
module docstring for how each op of the component is re-expressed.
"""

#: What each op's rule emits besides Reshape (the planner's op-level estimate; the real nodes are
#: checked against the matrix with their shapes when the rule is tried).
_EMITS = {"Transpose": ("Transpose",), "Gather": ("Slice",), "Slice": ("Slice",), "Concat": ("Concat",),
          "Split": ("Split",), "ArgMin": ("ArgMin",)}
LOWERED_OPS = tuple(HANDLERS)


def _register(op: str):
    def lower(rw, node):
        _lower(rw, node)

    lower.__doc__ = _DOC
    emits = ("Reshape",) + (() if op in SAME_ORDER else _EMITS.get(op, (op,)))
    return rule(op, emits=emits, when=lowerable, name=f"lower_rank_{op.lower()}", scope=rewritten_with)(lower)


RULES = {op: _register(op) for op in LOWERED_OPS}


# ----------------------------------------------------------------------------------------------
# Gather with a constant scalar index


def _scalar_gather(node, graph):
    idx = const_input(node, 1)
    if idx is None or idx.ndim != 0:
        return "indices are not a constant scalar"
    shape = static_shape(node.inputs[0])
    if shape is None or len(shape) > RANK_LIMIT:
        return "data has no static shape of rank <= 4"
    i = int(idx)
    if not -shape[_axis(attr(node, "axis", 0), len(shape))] <= i < shape[_axis(attr(node, "axis", 0), len(shape))]:
        return "index out of range"
    return None


@rule("Gather", emits=["Slice", "Reshape"], when=_scalar_gather)
def gather_scalar_to_slice(rw, node):
    """A constant scalar index picks one slice: Slice it out, drop the axis with a Reshape.

    before: x[…, n, …] ─► Gather(axis a, index i) ─► y[… …]
    after:  x ─► Slice(axis a, i:i+1) ─► Reshape(y's shape) ─► y
    (a rank-1/2 x is viewed as [P, n, Q] first: the GPU delegate slices rank 3-4 only)
    """
    x = node.inputs[0]
    shape = static_shape(x)
    axis = _axis(attr(node, "axis", 0), len(shape))
    i = int(const_input(node, 1))
    i = i + shape[axis] if i < 0 else i
    if len(shape) < 3:
        x, axis = rw.reshape(x, _around(shape, axis)), 1
    part = rw.slice(x, [i], [i + 1], [axis])
    rw.reshape(part, [d for k, d in enumerate(shape) if k != _axis(attr(node, "axis", 0), len(shape))],
               outputs=rw.outputs[:1])


# ----------------------------------------------------------------------------------------------
# A packed qkv projection split before its rank-5 reshape


def _sole_reader(t: gs.Tensor, graph: gs.Graph):
    if len(t.outputs) != 1 or any(o is t for o in graph.outputs):
        return None
    return t.outputs[0]


def _qkv_parts(anchor: gs.Node, graph: gs.Graph, anchor_out: gs.Tensor | None = None):
    """The pieces of ``x @ W (+ b) → Reshape[B, N, 3, h, d] → Transpose(2,0,3,1,4) → Gather(0|1|2)``
    seen from its Reshape or its Transpose (``anchor``, whose output is ``anchor_out``), or the
    reason this is not that pattern."""
    anchor_out = anchor.outputs[0] if anchor_out is None else anchor_out
    if anchor.op == "Reshape":
        node, reshaped = anchor, anchor_out
    else:
        reshaped = anchor.inputs[0]
        node = reshaped.inputs[0] if len(reshaped.inputs) == 1 else None
        if node is None or node.op != "Reshape":
            return "not fed by a Reshape to [B, N, 3, heads, dim]"
    shape = static_shape(reshaped)
    if shape is None or len(shape) != 5 or shape[2] != 3:
        return "not a Reshape to [B, N, 3, heads, dim]"
    src = node.inputs[0]
    if static_shape(src) != (shape[0], shape[1], 3 * shape[3] * shape[4]) or _sole_reader(src, graph) is not node:
        return "its input is not a [B, N, 3·heads·dim] projection read only here"
    producer, bias, add = (src.inputs[0] if src.inputs else None), None, None
    if producer is not None and producer.op == "Add":
        add = producer
        for k in (0, 1):
            value = constant_value(add.inputs[k])
            mm = add.inputs[1 - k]
            if value is not None and value.size == 3 * shape[3] * shape[4] and mm.inputs and mm.inputs[0].op == "MatMul" \
                    and _sole_reader(mm, graph) is add:
                bias, producer = value.reshape(-1), mm.inputs[0]
                break
        else:
            return "the projection's Add is not a constant bias on a MatMul"
    if producer is None or producer.op != "MatMul" or constant_value(producer.inputs[1]) is None \
            or constant_value(producer.inputs[1]).ndim != 2:
        return "the projection is not a MatMul with a constant [C, 3·heads·dim] weight"
    perm = anchor if anchor.op == "Transpose" else _sole_reader(reshaped, graph)
    if perm is None or perm.op != "Transpose" or [int(p) for p in attr(perm, "perm", [])] != [2, 0, 3, 1, 4] \
            or _sole_reader(reshaped, graph) is not perm:
        return "the reshaped qkv is not read by one Transpose(2, 0, 3, 1, 4)"
    permuted = anchor_out if anchor is perm else perm.outputs[0]
    gathers = []
    for g in permuted.outputs:
        idx = const_input(g, 1) if g.op == "Gather" else None
        if idx is None or idx.ndim != 0 or _axis(attr(g, "axis", 0), 5) != 0 or not -3 <= int(idx) < 3:
            return "q, k and v are not all taken with Gather(axis 0, constant index)"
        gathers.append((g, int(idx) % 3))
    if any(o is permuted for o in graph.outputs) or not gathers:
        return "the permuted qkv is a graph output or unread"
    return producer, add, bias, gathers, [node, perm], shape


def _qkv_ok(node, graph):
    got = _qkv_parts(node, graph)
    return got if isinstance(got, str) else None


def _split_qkv(rw, node):
    producer, add, bias, gathers, chain, shape = _qkv_parts(node, rw.graph, rw.outputs[0])
    x, w = producer.inputs[0], constant_value(producer.inputs[1])
    hd = shape[3] * shape[4]
    outs: dict[int, list] = {}
    for g, i in gathers:
        outs.setdefault(i, []).append(g.outputs[0])
    for dead in [producer, add] + chain + [g for g, _ in gathers]:
        if dead is not None and dead is not node:  # (``node`` is detached by the caller)
            dead.inputs.clear()
            dead.outputs.clear()
    for i, targets in sorted(outs.items()):
        y = rw.emit("MatMul", [x, rw.const(f"W_{'qkv'[i]}", w[:, i * hd:(i + 1) * hd], dtype=w.dtype)])
        if bias is not None:
            y = rw.emit("Add", [y, rw.const(f"B_{'qkv'[i]}", bias[i * hd:(i + 1) * hd], dtype=bias.dtype)])
        heads = rw.reshape(y, [shape[0], shape[1], shape[3], shape[4]])
        for target in targets:  # (the same index gathered twice: one Transpose per copy)
            rw.emit("Transpose", [heads], {"perm": [0, 2, 1, 3]}, outputs=[target])


_QKV_DOC = """A packed qkv projection as three projections: no rank-5 tensor, no Gather (cost 0: it
removes more nodes than it adds, so it is preferred to the generic rank lowering).

before: x ─► MatMul(W[C, 3hd]) ─► Add(b) ─► Reshape[B,N,3,h,d] ─► Transpose(2,0,3,1,4) ─► Gather(0|1|2) ─► q|k|v
after:  x ─► MatMul(W[:, i·hd:(i+1)·hd]) ─► Add(b_i) ─► Reshape[B,N,h,d] ─► Transpose(0,2,1,3) ─► q|k|v
"""


def _register_qkv(op: str):
    def split(rw, node):
        _split_qkv(rw, node)

    split.__doc__ = _QKV_DOC
    return rule(op, emits=["MatMul", "Add", "Reshape", "Transpose"], when=_qkv_ok, cost=0,
                name=f"attention_qkv_split_at_{op.lower()}")(split)


QKV_RULES = [_register_qkv(op) for op in ("Reshape", "Transpose")]
