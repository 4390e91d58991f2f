"""The in-memory TNN network edgeconv writes: layers, interface and resources.

A :class:`TnnLayer` holds exactly what one .tnnproto layer line and one .tnnmodel resource block
carry, already in the order TNN's layer interpreter reads them, so the writers only serialize.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .layer_types import DATA_FLOAT, DATA_HALF, DATA_INT8, DATA_INT32, DATA_INT64, DATA_UINT32


@dataclass(frozen=True)
class RawBuffer:
    """One ``RawBuffer`` as ``Serializer::PutRaw`` writes it (objseri.h:49-77)."""

    data: np.ndarray  # already in the stored dtype (float32 / float16 / int8 / int32 / int64 / uint32)
    dims: tuple[int, ...]

    @property
    def data_type(self) -> int:
        return {np.float32: DATA_FLOAT, np.float16: DATA_HALF, np.int8: DATA_INT8, np.int32: DATA_INT32,
                np.int64: DATA_INT64, np.uint32: DATA_UINT32}[self.data.dtype.type]

    @classmethod
    def of(cls, value: np.ndarray, *, half: bool = False, dims: tuple[int, ...] | None = None) -> RawBuffer:
        value = np.asarray(value)
        if value.dtype.kind == "f":
            value = value.astype(np.float16 if half else np.float32)
        elif value.dtype == np.int64:
            # TNN's integer resources (Gather indices, shapes) are int32.
            value = value.astype(np.int32)
        elif value.dtype == np.bool_:
            # TNN holds booleans as int8 0/1 (equal_layer.cc InferOutputDataType: DATA_TYPE_INT8;
            # cpu_where_layer_acc.cc reads the condition as char).
            value = value.astype(np.int8)
        shape = tuple(int(d) for d in (value.shape if dims is None else dims))
        return cls(np.ascontiguousarray(value).reshape(-1), shape)


#: A resource payload item: ("str", text) | ("int", value) | ("bool", value) | ("raw", RawBuffer).
Item = tuple[str, object]


@dataclass
class TnnLayer:
    type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    params: list = field(default_factory=list)  # ints and floats, in the parser's order
    #: Items of the .tnnmodel block in the order the layer's InterpretResource reads them;
    #: ``None`` = the layer has no resource block.
    resource: list[Item] | None = None


@dataclass
class TnnInput:
    name: str
    shape: tuple[int, ...]
    data_type: int = DATA_FLOAT


@dataclass
class TnnNet:
    inputs: list[TnnInput]
    outputs: list[str]
    layers: list[TnnLayer]
    #: Blob name -> constant value (the optional constant map at the end of the .tnnmodel).
    constants: dict[str, RawBuffer] = field(default_factory=dict)
    #: int8 networks: blob name -> symmetric scale, written as ``BlobScale`` resources
    #: ``<blob>_scale_data_`` (quantized.py).
    blob_scales: dict[str, float] = field(default_factory=dict)

    def blobs(self) -> list[str]:
        names = {i.name for i in self.inputs}
        for layer in self.layers:
            names.update(layer.inputs)
            names.update(layer.outputs)
        return sorted(names)
