"""The adapter object, its registry, and what adapters share.

An adapter takes one node of one operator version (``Gelu-20``, ``Softmax-11``) to what the
canonical opset (17) computes the same way.  It is written as a function decorated with
:func:`adapter`; the docstring shows the node before and the graph after, the body either edits
the node in place (an attribute renamed, an input made an attribute) or builds the replacement
with a :class:`~converter.rewrites.base.Rewrite` whose last node writes into the node's output
tensors.  Whatever the canonical opset cannot express exactly is refused with
:class:`Unadaptable` naming the attribute or input: the driver makes that one line naming the
node, the operator and its version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...ir.graph import CANONICAL_OPSET, attr, constant_value, static_shape, tensor_rank


class Unadaptable(Exception):
    """This node has no exact form in the canonical opset; ``str`` says which attribute or input
    makes it so (the driver adds the node, the operator and its version)."""


class NeedsValues(Unadaptable):
    """The adapter needs a rank, a static shape or a constant that inference has not given yet:
    the driver folds the model's constant subgraphs at its own opset and tries again."""


@dataclass(frozen=True)
class Adapter:
    name: str
    op: str
    #: the operator versions (``since_version`` of the schema in force) this adapter takes
    versions: tuple[int, ...]
    doc: str
    fn: Callable = field(repr=False)


#: (op, version) -> the adapter that takes a node of that operator version to opset 17.
ADAPTERS: dict[tuple[str, int], Adapter] = {}


def adapter(op: str, *versions: int, name: str | None = None):
    """Register the decorated ``fn(rw, node)`` for ``op`` at each of ``versions`` (``name``: when
    one function serves several operators)."""

    def register(fn) -> Adapter:
        made = Adapter(name or fn.__name__, op, tuple(versions), fn.__doc__ or "", fn)
        for version in versions:
            key = (op, version)
            if key in ADAPTERS:
                raise ValueError(f"two adapters for {op}-{version}: {ADAPTERS[key].name}, {made.name}")
            ADAPTERS[key] = made
        return made

    return register


# -- reading a node: every helper refuses with the reason instead of returning None


def constant_ints(node: gs.Node, index: int, what: str) -> list[int] | None:
    """Input ``index`` as a list of ints (see :func:`constant_array`)."""
    value = constant_array(node, index, what)
    return None if value is None else [int(v) for v in value.reshape(-1)]


def constant_array(node: gs.Node, index: int, what: str) -> np.ndarray | None:
    """Input ``index`` as an array; None when the input is absent; refuses (for now: the driver
    folds and asks again) when it is computed at run time."""
    if index >= len(node.inputs) or is_absent(node.inputs[index]):
        return None
    value = constant_value(node.inputs[index])
    if value is None:
        raise NeedsValues(f"its {what} input '{node.inputs[index].name}' is computed at run time, "
                          "not a constant")
    return np.asarray(value)


def is_absent(tensor: gs.Tensor) -> bool:
    """An omitted optional input (ONNX: an empty name)."""
    return isinstance(tensor, gs.Variable) and tensor.name == ""


def rank_of(tensor: gs.Tensor) -> int:
    rank = tensor_rank(tensor)
    if rank is None:
        raise NeedsValues(f"the rank of '{tensor.name}' is unknown (give --input-shape)")
    return rank


def shape_of(tensor: gs.Tensor) -> tuple[int, ...]:
    shape = static_shape(tensor)
    if shape is None:
        raise NeedsValues(f"the shape of '{tensor.name}' is not static (give --input-shape)")
    return shape


def positive_axes(axes, rank: int) -> list[int]:
    return [int(a) + rank if int(a) < 0 else int(a) for a in axes]


def text(node: gs.Node, name: str, default: str) -> str:
    value = attr(node, name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def set_inputs(node: gs.Node, inputs: list) -> None:
    """Replace the node's inputs, trailing omitted ones dropped."""
    while inputs and (inputs[-1] is None or is_absent(inputs[-1])):
        inputs.pop()
    node.inputs.clear()
    # a list, not a generator: graphsurgeon's extend iterates twice (to link each tensor back)
    node.inputs.extend([gs.Variable.empty() if t is None else t for t in inputs])


def check_types(node: gs.Node, version: int) -> None:
    """The node's known tensor types are ones ``node.op``-``version`` takes."""
    schema = onnx.defs.get_schema(node.op, version, "")
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    for tensors, formals, kind in ((node.inputs, schema.inputs, "input"), (node.outputs, schema.outputs, "output")):
        for i, tensor in enumerate(tensors):
            if not formals or tensor.dtype is None or is_absent(tensor):
                continue
            formal = formals[min(i, len(formals) - 1)]
            spelled = _type_string(tensor.dtype)
            if spelled is not None and spelled not in allowed.get(formal.type_str, {formal.type_str}):
                raise Unadaptable(f"{kind} '{tensor.name}' is {spelled[7:-1]}, which {node.op}-{version} "
                                  f"(opset {CANONICAL_OPSET}) does not take")


def _type_string(dtype) -> str | None:
    try:
        code = dtype if isinstance(dtype, int) else onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        return f"tensor({onnx.TensorProto.DataType.Name(code).lower()})"
    except Exception:  # noqa: BLE001 - a dtype onnx cannot name: nothing to check
        return None
