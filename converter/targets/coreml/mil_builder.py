"""Legalized ONNX -> a MIL program, built with coremltools' own ``mb`` builder.

coremltools (>= 6) no longer reads ONNX, so this module is the ONNX frontend: one small function
per ONNX op, each calling the MIL op(s) Apple documents for it (op specs: the op docstrings in
apple/coremltools@e0e2f42 ``coremltools/converters/mil/mil/ops/defs/iOS1x/*.py``; coremltools'
torch frontend ``coremltools/converters/mil/frontend/torch/ops.py`` maps the same operations from
torch and was read for the conventions, e.g. ConvTranspose ``output_padding`` as a post-crop).

Every MIL op output is named after the ONNX tensor it computes (sanitized to an identifier), so
the program reads like the ONNX graph and graph outputs keep their names.  An ONNX op without a
mapping raises :class:`~converter.errors.Unsupported` naming the node and the op.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...errors import BadInput, Unsupported
from ...ir.graph import constant_value, static_shape, to_graph, unique_name
from ..driver import NodeContext, lower_nodes
from ..naming import NameRule
from .mil_mappings import OPS, supported_onnx_ops  # noqa: F401  (re-exported)
from .mil_registry import unsupported


@dataclass
class IOSpec:
    """One model input or output: its ONNX name, the name in the CoreML model, shape, dtype."""

    onnx_name: str
    name: str
    shape: tuple[int, ...]
    dtype: str

    def to_json(self) -> dict[str, Any]:
        return {"onnx_name": self.onnx_name, "name": self.name, "shape": list(self.shape),
                "dtype": self.dtype}


@dataclass
class BuiltProgram:
    program: Any  # coremltools.converters.mil.mil.Program
    inputs: list[IOSpec]
    outputs: list[IOSpec]
    #: ONNX op type -> count, for reports and tests.
    onnx_ops: dict[str, int] = field(default_factory=dict)
    #: ONNX tensor name -> the MIL name given to the op output computing it.
    tensor_names: dict[str, str] = field(default_factory=dict)


#: A MIL identifier for an ONNX tensor name ('/conv/Conv_output_0' -> 'conv_Conv_output_0').
sanitize = NameRule(r"[^A-Za-z0-9_]", strip="_", empty="t", digit_prefix="t_")


class BuildContext(NodeContext):
    """What an op mapping needs: MIL values of ONNX tensors and unique MIL names."""

    title = OPS.title

    def __init__(self, mb, types):
        self.mb, self.types = mb, types
        self.values: dict[str, Any] = {}  # ONNX tensor name -> MIL Var or numpy constant
        self.names: dict[str, str] = {}  # ONNX tensor name -> MIL name
        self._used: set[str] = set()
        #: The MIL name of the current node's first output (reserved before the mapping runs).
        self.out: str | None = None

    def begin(self, node) -> None:
        super().begin(node)
        self.out = self.name(node.outputs[0].name) if node is not None else None

    def bind(self, node: gs.Node, result) -> None:
        """The mapping's result for ``node``: a MIL Var, a list of them (one per output) or a
        numpy value MIL needs at build time (a shape, a range)."""
        results = result if isinstance(result, list) else [result]
        for tensor, var in zip(node.outputs, results):
            if tensor.name:
                self.values[tensor.name] = var

    def name(self, onnx_name: str) -> str:
        if onnx_name not in self.names:
            self.names[onnx_name] = unique_name(sanitize(onnx_name), self._used)
        return self.names[onnx_name]

    def value(self, tensor: gs.Tensor):
        const = constant_value(tensor)
        if const is not None:
            return _mil_const(const)
        try:
            value = self.values[tensor.name]
            return _mil_const(value) if isinstance(value, np.ndarray) else value
        except KeyError:
            raise BadInput(f"tensor '{tensor.name}' is used before it is computed") from None

    def const(self, node: gs.Node, index: int, what: str) -> np.ndarray:
        """An input that MIL needs at build time (weights, shapes, axes)."""
        if index >= len(node.inputs) or node.inputs[index].name == "":
            raise unsupported(node, f"missing input {what}")
        value = constant_value(node.inputs[index])
        if value is None and isinstance(self.values.get(node.inputs[index].name), np.ndarray):
            value = self.values[node.inputs[index].name]
        if value is None:
            raise unsupported(node, f"{what} must be a constant for CoreML")
        return value

    def optional_const(self, node: gs.Node, index: int) -> np.ndarray | None:
        if index >= len(node.inputs) or node.inputs[index].name == "":
            return None
        return self.const(node, index, f"input {index}")


def _mil_const(value: np.ndarray):
    """ML Programs have no 64-bit types: narrow int64 -> int32, float64 -> float32."""
    value = np.asarray(value)
    if value.dtype == np.int64:
        return value.astype(np.int32)
    if value.dtype == np.float64:
        return value.astype(np.float32)
    if value.dtype == np.bool_:
        return value
    return value


# --------------------------------------------------------------------------------------------


#: ONNX I/O dtype -> the MIL dtype of the placeholder.  ML Programs have no 64-bit ints (int64
#: becomes int32); a bool input/output is stored as fp32 in the model's interface by coremltools'
#: pass ``adjust_io_to_supported_types`` (backend/mil/passes/adjust_io_to_supported_types.py),
#: which inserts the casts.  ``run`` converts values back to the ONNX dtype.
IO_DTYPES = {"float32": "fp32", "int64": "int32", "int32": "int32", "bool": "bool"}


def _io_dtype(tensor: gs.Tensor) -> str:
    dtype = np.dtype(tensor.dtype) if tensor.dtype is not None else np.dtype(np.float32)
    if dtype.name not in IO_DTYPES:
        raise Unsupported(f"tensor '{tensor.name}': CoreML model I/O supports "
                          f"{', '.join(IO_DTYPES)}, got {dtype.name}")
    return dtype.name


def _shape_of(var) -> tuple[int, ...]:
    """A MIL var's shape with -1 for data-dependent (symbolic) dimensions."""
    return tuple(int(d) if isinstance(d, (int, np.integer)) else -1 for d in var.shape)


def build_program(model: onnx.ModelProto, opset) -> BuiltProgram:
    """Build the MIL program for a legalized, normalized ONNX model (static shapes)."""
    from .quiet import coremltools

    coremltools()  # imported without its TF/torch frontends, unless something imported it before
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, Program, types

    graph = to_graph(model)
    graph.toposort()
    ctx = BuildContext(mb, types)

    inputs: list[IOSpec] = []
    placeholders = {}
    for tensor in graph.inputs:
        shape = static_shape(tensor)
        if shape is None:
            raise BadInput(f"input '{tensor.name}' needs a static shape for CoreML (use --input-shape)")
        spec = IOSpec(tensor.name, ctx.name(tensor.name), shape, _io_dtype(tensor))
        inputs.append(spec)
        placeholders[spec.name] = mb.placeholder(shape=shape, dtype=getattr(types, IO_DTYPES[spec.dtype]))

    outputs: list[IOSpec] = []
    with Function(placeholders, opset_version=opset) as func:
        for spec in inputs:
            ctx.values[spec.onnx_name] = func.inputs[spec.name]
        # Constant nodes are skipped (read through constant_value() where used); a mapping error,
        # e.g. a type or value check of MIL's builder, is Unsupported (the driver's error mapping).
        lower_nodes(OPS, ctx, graph.nodes)
        final = []
        for tensor in graph.outputs:
            var = ctx.value(tensor)
            name = ctx.name(tensor.name)
            if not hasattr(var, "op") or var.name != name or var in final:
                var = mb.identity(x=var, name=ctx.name(f"{tensor.name}_out") if var in final else name)
            final.append(var)
            shape = static_shape(tensor) or _shape_of(var)
            outputs.append(IOSpec(tensor.name, var.name, tuple(shape), _io_dtype(tensor)))
        func.set_outputs(final)

    program = Program()
    program.add_function("main", func)
    hist: dict[str, int] = {}
    for node in graph.nodes:
        hist[node.op] = hist.get(node.op, 0) + 1
    return BuiltProgram(program, inputs, outputs, dict(sorted(hist.items())), dict(ctx.names))
