"""Lower the moved ONNX nodes to a straight-line program both code generators read.

A :class:`Step` is one kernel call: its data inputs are tensor names (boundary tensors, values
computed by earlier steps, or constants embedded in the generated code); attribute-like inputs
(Reshape's shape, Slice's starts, TopK's K, Clip's bounds, ReduceSum's axes, ...) must be
constants and become Python literals in ``params`` (ordered: the C++ generator passes them
positionally in this order).  :func:`lower_node` returns a reason string instead of a Step when
the node cannot be generated, which is how the cut decides what may move.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..ir.graph import attr, constant_value

#: dtypes the generated Python and C++ handle (bool is uint8_t 0/1 in C++).
DTYPES = ("float32", "float64", "int64", "int32", "int8", "uint8", "bool")

_BINARY = ("Add", "Sub", "Mul", "Div", "Greater", "Less", "Equal")
_VARIADIC = ("Max", "Min")
_UNARY = ("Exp", "Log", "Sqrt", "Neg", "Abs", "Tanh", "Relu", "Sigmoid", "Identity")
_REDUCE_ATTR_AXES = ("ReduceMax", "ReduceMin", "ReduceMean")

#: Every ONNX op the generators cover.
SUPPORTED_OPS = tuple(sorted(
    _BINARY + _VARIADIC + _UNARY + _REDUCE_ATTR_AXES + (
        "Softmax", "Clip", "Cast", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze",
        "Concat", "Split", "Slice", "Gather", "ReduceSum", "ArgMax", "ArgMin", "TopK", "Where",
    )
))


@dataclass
class Step:
    node: str
    op: str
    inputs: list[str]
    outputs: list[str]  # "" for an output the node does not produce
    params: dict = field(default_factory=dict)


class _Refuse(Exception):
    pass


def node_label(node: gs.Node) -> str:
    return f"node '{node.name}' ({node.op})"


def _present(tensor: gs.Tensor | None) -> bool:
    return tensor is not None and tensor.name != ""


def _const_input(node: gs.Node, index: int, what: str, required: bool = True):
    if index >= len(node.inputs) or not _present(node.inputs[index]):
        if required:
            raise _Refuse(f"has no {what} input")
        return None
    value = constant_value(node.inputs[index])
    if value is None:
        raise _Refuse(f"its {what} is computed at run time; generated post-processing needs it constant")
    return value


def _ints(value) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _scalar(value):
    item = np.asarray(value).reshape(-1)[0].item()
    return float(item) if isinstance(item, float) else int(item)


def _data_inputs(node: gs.Node, count: int | None = None) -> list[str]:
    tensors = node.inputs if count is None else node.inputs[:count]
    return [t.name for t in tensors]


def _check_dtypes(node: gs.Node) -> None:
    for tensor in list(node.inputs) + list(node.outputs):
        if not _present(tensor) or tensor.dtype is None:
            continue
        try:
            name = np.dtype(tensor.dtype).name
        except TypeError:
            name = str(tensor.dtype)
        if name not in DTYPES:
            raise _Refuse(f"tensor '{tensor.name}' has dtype {name}; post-processing code handles {', '.join(DTYPES)}")


def lower_node(node: gs.Node) -> Step | str:
    """The Step for ``node``, or the reason it cannot run in generated post-processing."""
    if node.op not in SUPPORTED_OPS:
        return f"{node_label(node)}: no post-processing kernel for {node.op} (covered: {', '.join(SUPPORTED_OPS)})"
    if node.domain not in (None, "", "ai.onnx"):
        return f"{node_label(node)}: custom domain '{node.domain}'"
    try:
        _check_dtypes(node)
        return _lower(node)
    except _Refuse as why:
        return f"{node_label(node)}: {why}"


def _lower(node: gs.Node) -> Step:
    op = node.op
    outputs = [t.name for t in node.outputs]

    def step(inputs, **params):
        return Step(node.name, op, list(inputs), outputs, params)

    if op in _BINARY or op in _VARIADIC or op in _UNARY or op == "Where":
        return step(_data_inputs(node))
    if op == "Softmax":
        return step(_data_inputs(node), axis=int(attr(node, "axis", -1)))
    if op == "Clip":
        low = _const_input(node, 1, "min", required=False)
        high = _const_input(node, 2, "max", required=False)
        return step(_data_inputs(node, 1), min=None if low is None else _scalar(low),
                    max=None if high is None else _scalar(high))
    if op == "Cast":
        to = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(attr(node, "to")))).name
        if to not in DTYPES:
            raise _Refuse(f"casts to {to}")
        return step(_data_inputs(node), to=to)
    if op == "Reshape":
        return step(_data_inputs(node, 1), shape=_ints(_const_input(node, 1, "shape")),
                    allowzero=int(attr(node, "allowzero", 0)))
    if op == "Flatten":
        return step(_data_inputs(node), axis=int(attr(node, "axis", 1)))
    if op == "Transpose":
        perm = attr(node, "perm")
        return step(_data_inputs(node), perm=None if perm is None else [int(p) for p in perm])
    if op == "Squeeze":
        axes = _const_input(node, 1, "axes", required=False)
        return step(_data_inputs(node, 1), axes=None if axes is None else _ints(axes))
    if op == "Unsqueeze":
        return step(_data_inputs(node, 1), axes=_ints(_const_input(node, 1, "axes")))
    if op == "Concat":
        return step(_data_inputs(node), axis=int(attr(node, "axis")))
    if op == "Split":
        sizes = _const_input(node, 1, "split", required=False)
        return step(_data_inputs(node, 1), axis=int(attr(node, "axis", 0)),
                    split=None if sizes is None else _ints(sizes), num_outputs=len(outputs))
    if op == "Slice":
        starts = _ints(_const_input(node, 1, "starts"))
        ends = _ints(_const_input(node, 2, "ends"))
        axes = _const_input(node, 3, "axes", required=False)
        steps = _const_input(node, 4, "steps", required=False)
        if steps is not None and 0 in _ints(steps):
            raise _Refuse("has a zero step")
        return step(_data_inputs(node, 1), starts=starts, ends=ends,
                    axes=None if axes is None else _ints(axes), steps=None if steps is None else _ints(steps))
    if op == "Gather":
        return step(_data_inputs(node), axis=int(attr(node, "axis", 0)))
    if op in _REDUCE_ATTR_AXES:
        axes = attr(node, "axes")
        return step(_data_inputs(node), axes=None if axes is None else [int(a) for a in axes],
                    keepdims=int(attr(node, "keepdims", 1)))
    if op == "ReduceSum":
        axes = _const_input(node, 1, "axes", required=False)
        axes = None if axes is None else _ints(axes)
        if not axes and int(attr(node, "noop_with_empty_axes", 0)):
            return Step(node.name, "Identity", _data_inputs(node, 1), outputs, {})
        return step(_data_inputs(node, 1), axes=axes or None, keepdims=int(attr(node, "keepdims", 1)))
    if op in ("ArgMax", "ArgMin"):
        return step(_data_inputs(node), axis=int(attr(node, "axis", 0)), keepdims=int(attr(node, "keepdims", 1)),
                    select_last_index=int(attr(node, "select_last_index", 0)))
    if op == "TopK":
        return step(_data_inputs(node, 1), k=_ints(_const_input(node, 1, "K"))[0],
                    axis=int(attr(node, "axis", -1)), largest=int(attr(node, "largest", 1)))
    raise _Refuse(f"no lowering for {op}")  # pragma: no cover - SUPPORTED_OPS lists the cases above
