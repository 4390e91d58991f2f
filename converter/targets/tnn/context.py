"""The context TNN's layer converters write into (see ``emit.py`` and ``layers*.py``).

:class:`ExportContext` collects :class:`~.net.TnnLayer` objects, the constant map and unique,
sanitized blob and layer names; it knows the node being converted (``ctx.node``, set by the
driver) so ``raise ctx.unsupported("...")`` names it.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...errors import BadInput
from ...ir.graph import constant_value, static_shape, unique_name
from ..driver import NodeContext
from ..naming import NameRule
from .layer_types import DATA_FLOAT, DATA_INT8, DATA_INT32, DATA_UINT32
from .net import RawBuffer, TnnLayer
from .registry import OPS

#: TNN removes every '"' and newline, splits records on ',' and fields on ' ' (and inputs on
#: ':'), model_interpreter.cc:174-300; so none of these may appear inside a name.
sanitize = NameRule(r'[,":\s]')


class UniqueNames:
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


class ExportContext(NodeContext):
    """What a layer converter writes into: layers, blobs, constants, unique names."""

    title = OPS.title

    def __init__(self, graph: gs.Graph, fp16_weights: bool):
        self.graph = graph
        self.fp16 = fp16_weights
        self.layers: list[TnnLayer] = []
        self.constants: dict[str, RawBuffer] = {}
        self.blob_names = UniqueNames()
        self.layer_names = UniqueNames()
        self.node: gs.Node | None = None

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
