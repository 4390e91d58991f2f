"""Walk a normalized ONNX graph and emit TNN layers, one small converter function per ONNX op.

The converter functions live in ``layers.py``, ``layers_nn.py`` and ``layers_shape.py``; each
registers itself with :func:`converts` and appends :class:`~.net.TnnLayer` objects through the
:class:`ExportContext`.  Parameters are written from ONNX semantics (never from the habits of
TNN's own onnx2tnn converter); every parameter list follows the order in which the matching
``source/tnn/interpreter/tnn/layer_interpreter/*.cc`` parser reads it.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...errors import BadInput, Unsupported
from ...graph import constant_value, static_shape, to_graph, unique_name
from .layer_types import DATA_FLOAT, DATA_INT8, DATA_INT32, DATA_UINT32
from .net import RawBuffer, TnnInput, TnnLayer, TnnNet

Converter = Callable[[gs.Node, "ExportContext"], None]
CONVERTERS: dict[str, Converter] = {}

# TNN removes every '"' and newline, splits records on ',' and fields on ' ' (and inputs on ':'),
# model_interpreter.cc:174-300; so none of these may appear inside a name.
_FORBIDDEN = re.compile(r'[,":\s]')


def sanitize(name: str) -> str:
    return _FORBIDDEN.sub("_", name) or "_"


def converts(*ops: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for op in ops:
            CONVERTERS[op] = fn
        return fn

    return register


class _Names:
    """Deterministic unique sanitized names (first come, first served, in graph order)."""

    def __init__(self):
        self.used: set[str] = set()
        self.by_original: dict[str, str] = {}

    def of(self, original: str) -> str:
        if original not in self.by_original:
            self.by_original[original] = self.fresh(sanitize(original))
        return self.by_original[original]

    def fresh(self, base: str) -> str:
        return unique_name(base, self.used)


class ExportContext:
    def __init__(self, graph: gs.Graph, fp16_weights: bool):
        self.graph = graph
        self.fp16 = fp16_weights
        self.layers: list[TnnLayer] = []
        self.constants: dict[str, RawBuffer] = {}
        self.blob_names = _Names()
        self.layer_names = _Names()
        self.node: gs.Node | None = None

    # -- errors -------------------------------------------------------------------------------
    def unsupported(self, reason: str) -> Unsupported:
        node = self.node
        return Unsupported(f"TNN cannot express node '{node.name}' ({node.op}): {reason}")

    # -- tensors ------------------------------------------------------------------------------
    def const(self, tensor: gs.Tensor | None) -> np.ndarray | None:
        if tensor is None or (isinstance(tensor, gs.Variable) and tensor.name == ""):
            return None
        return constant_value(tensor)

    def shape(self, tensor: gs.Tensor) -> tuple[int, ...]:
        value = self.const(tensor)
        if value is not None:
            return tuple(value.shape)
        shape = static_shape(tensor)
        if shape is None:
            raise BadInput(
                f"TNN needs static shapes, but tensor '{tensor.name}' has shape {tensor.shape}; "
                "pass --input-shape to fix the input shapes"
            )
        return shape

    def rank(self, tensor: gs.Tensor) -> int:
        return len(self.shape(tensor))

    def blob(self, tensor: gs.Tensor) -> str:
        """The TNN blob for ``tensor``; a constant becomes an entry of the constant map."""
        name = self.blob_names.of(tensor.name)
        value = self.const(tensor)
        if value is not None and name not in self.constants:
            self.constants[name] = RawBuffer.of(value)
        return name

    def new_blob(self, base: str) -> str:
        return self.blob_names.fresh(sanitize(base))

    def layer_name_hint(self) -> str:
        """The sanitized base name of the current node (not reserved)."""
        return sanitize(self.node.name or (self.node.outputs[0].name if self.node.outputs else self.node.op))

    def layer_name(self, suffix: str = "") -> str:
        base = self.node.name or (self.node.outputs[0].name if self.node.outputs else self.node.op)
        return self.layer_names.fresh(sanitize(base + suffix))

    def raw(self, value: np.ndarray, *, weight: bool = False, dims: tuple[int, ...] | None = None) -> RawBuffer:
        """A resource buffer; ``weight=True`` marks buffers TNN stores in half with --fp16-weights."""
        return RawBuffer.of(value, half=weight and self.fp16, dims=dims)

    # -- layers -------------------------------------------------------------------------------
    def emit(self, type_: str, inputs: list[str], outputs: list[str], params=(), resource=None,
             name: str | None = None) -> TnnLayer:
        layer = TnnLayer(type_, name or self.layer_name(), list(inputs), list(outputs), list(params), resource)
        self.layers.append(layer)
        return layer

    def tnn_dtype(self, tensor: gs.Tensor) -> int:
        """The TNN DataType of the blob holding ``tensor`` (see ``TNN_DTYPES``)."""
        value = self.const(tensor)
        dtype = np.dtype(value.dtype if value is not None else (tensor.dtype or np.float32))
        if dtype not in TNN_DTYPES:
            raise self.unsupported(f"tensor '{tensor.name}' has dtype {dtype}, which TNN blobs cannot hold")
        return TNN_DTYPES[dtype]

    def positive_axis(self, axis: int, rank: int) -> int:
        if not -rank <= axis < rank:
            raise self.unsupported(f"axis {axis} out of range for rank {rank}")
        return axis % rank


#: ONNX dtype -> TNN DataType of a blob.  TNN computes integers in int32 (Shape/Size/NonZero
#: write DATA_TYPE_INT32; GatherND, ScatterND, OneHot, RoiAlign read indices as ``int *``), so
#: int64 tensors become int32 blobs; booleans are int8 (equal_layer.cc writes DATA_TYPE_INT8).
TNN_DTYPES = {np.dtype(np.float32): DATA_FLOAT, np.dtype(np.int32): DATA_INT32, np.dtype(np.int64): DATA_INT32,
              np.dtype(np.bool_): DATA_INT8, np.dtype(np.int8): DATA_INT8, np.dtype(np.uint32): DATA_UINT32}


def build_net(model: onnx.ModelProto, fp16_weights: bool = False) -> tuple[TnnNet, dict[str, str]]:
    """The TNN network for ``model`` and the map original tensor name -> TNN blob name."""
    from . import layers, layers_extra, layers_nn, layers_shape  # noqa: F401  (fill CONVERTERS)

    graph = to_graph(model)
    graph.toposort()
    ctx = ExportContext(graph, fp16_weights)
    inputs = []
    for tensor in graph.inputs:
        if ctx.const(tensor) is not None:
            continue
        dtype = np.dtype(tensor.dtype) if tensor.dtype is not None else np.dtype(np.float32)
        if dtype not in TNN_DTYPES:
            raise Unsupported(f"TNN input '{tensor.name}' has dtype {dtype}, TNN inputs are float32, "
                              "int32/int64 (as int32), bool/int8 (as int8) or uint32")
        inputs.append(TnnInput(ctx.blob(tensor), ctx.shape(tensor), TNN_DTYPES[dtype]))
    if not inputs:
        raise BadInput("the model has no inputs; TNN needs at least one input blob")
    from ...custom import custom_nodes_of  # noqa: PLC0415
    from .custom import convert_custom  # noqa: PLC0415

    marks = custom_nodes_of(model)
    for node in graph.nodes:
        ctx.node = node
        if node.name in marks:  # remedy (4): a layer type registered by the app's TNN plugin
            convert_custom(node, ctx, marks[node.name]["layer"], marks[node.name]["attrs"])
            continue
        convert = CONVERTERS.get(node.op)
        if convert is None or (node.domain or "") not in ("", "ai.onnx"):
            raise Unsupported(f"TNN has no layer for node '{node.name}' (op {node.op})")
        convert(node, ctx)
    if not ctx.layers:
        # model_interpreter.cc:207-209: a .tnnproto with no layer line is rejected.
        raise Unsupported("the model has no operations; TNN needs at least one layer")
    outputs = []
    for tensor in graph.outputs:
        if ctx.const(tensor) is not None or tensor in graph.inputs:
            raise Unsupported(f"output '{tensor.name}' is a constant or an input; TNN outputs must be layer outputs")
        outputs.append(ctx.blob_names.of(tensor.name))
    # Constants only reachable as layer parameters are not blobs: keep the map minimal.
    used = {name for layer in ctx.layers for name in layer.inputs}
    constants = {k: v for k, v in sorted(ctx.constants.items()) if k in used}
    net = TnnNet(inputs, outputs, ctx.layers, constants)
    return net, dict(ctx.blob_names.by_original)
