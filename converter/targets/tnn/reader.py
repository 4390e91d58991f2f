"""Read a ``.tnnproto`` + ``.tnnmodel`` pair the way TNN's interpreter does.

Written from TNN's *parsers*, not from edgeconv's writers: record splitting and field defaults
follow ``source/tnn/interpreter/tnn/model_interpreter.cc`` and the ``GET_*_OR_DEFAULT`` macros of
``layer_interpreter/layer_interpreter_macro.h``; each resource block is read with the field
sequence of the layer's ``InterpretResource``.  :func:`~.reader_onnx.load_as_onnx` then turns the network into
an ONNX model (``reader_onnx.py``) that onnxruntime executes.
"""

from __future__ import annotations

import io
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...errors import BadInput
from .layer_types import (DATA_FLOAT, DATA_HALF, DATA_INT8, DATA_INT32, DATA_INT64, DATA_UINT32, HAS_INTERPRETER,
                          LAYER_TYPE, MAGIC_V1, MAGIC_V2)


def atoi(text: str) -> int:
    match = re.match(r"\s*[+-]?\d+", text)
    return int(match.group()) if match else 0


def atof(text: str) -> float:
    match = re.match(r"\s*[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf|nan)", text, re.I)
    return float(match.group()) if match else 0.0


class Fields:
    """The parameter tokens of one layer line, consumed like the interpreter macros do."""

    def __init__(self, tokens: list[str], start: int, layer: str):
        self.tokens, self.index, self.layer = tokens, start, layer

    def _next(self, default, convert):
        if self.index < len(self.tokens):
            self.index += 1
            return convert(self.tokens[self.index - 1])
        if default is None:  # parsers that index without a bounds check
            raise BadInput(f"TNN layer '{self.layer}': missing parameter #{self.index}")
        return default

    def int(self, default: int | None = None) -> int:
        return self._next(default, atoi)

    def float(self, default: float | None = None) -> float:
        return self._next(default, atof)

    def ints(self, n: int, default: int | None = None) -> list[int]:
        return [self.int(default) for _ in range(n)]

    def text(self, default: str | None = None) -> str:
        return self._next(default, str)

    def rest_ints(self) -> list[int]:
        out = [atoi(t) for t in self.tokens[self.index:]]
        self.index = len(self.tokens)
        return out


@dataclass
class ProtoLayer:
    type_str: str
    type: int
    name: str
    inputs: list[str]
    outputs: list[str]
    fields: Fields


@dataclass
class ParsedNet:
    magic: int
    inputs: dict[str, tuple[list[int], int]]  # name -> (dims, data type)
    outputs: list[str]
    layers: list[ProtoLayer]
    resources: dict[str, dict] = field(default_factory=dict)  # layer name -> resource fields
    constants: dict[str, np.ndarray] = field(default_factory=dict)


# -- .tnnproto ------------------------------------------------------------------------------------

def parse_proto(text: str) -> ParsedNet:
    content = text.replace('"', "").replace("\n", "")
    records = [r.strip() for r in content.split(",")]
    if len(records) <= 5:
        raise BadInput("TNN proto: content line <= 5 (no layer)")
    head = records[0].split()
    magic = atoi(head[3]) if len(head) >= 4 else 0
    inputs: dict[str, tuple[list[int], int]] = {}
    for entry in records[1].split(":"):
        tokens = entry.split()
        if len(tokens) < 2:
            raise BadInput("TNN proto: split input line error")
        if magic == MAGIC_V2:
            ndims = atoi(tokens[1])
            if len(tokens) < ndims + 2:
                raise BadInput("TNN proto: get input dims error")
            inputs[tokens[0]] = ([atoi(t) for t in tokens[2:ndims + 2]], atoi(tokens[-1]))
        elif magic == MAGIC_V1:
            inputs[tokens[0]] = ([atoi(t) for t in tokens[1:]], DATA_FLOAT)
        else:
            raise BadInput("TNN proto: Do not support tnn proto type")
    outputs = records[3].split()
    if not outputs:
        raise BadInput("TNN proto: split output line error")
    layers = []
    for record in records[5:]:
        if not record:
            continue
        tokens = record.split()
        type_str = tokens[0]
        if type_str not in LAYER_TYPE:
            raise BadInput(f"TNN proto: layer type {type_str} is not supported")
        n_in, n_out = atoi(tokens[2]), atoi(tokens[3])
        ins = tokens[4:4 + n_in]
        outs = tokens[4 + n_in:4 + n_in + n_out]
        layers.append(ProtoLayer(type_str, LAYER_TYPE[type_str], tokens[1], ins, outs,
                                 Fields(tokens, 4 + n_in + n_out, tokens[1])))
    return ParsedNet(magic, inputs, outputs, layers)


# -- .tnnmodel ------------------------------------------------------------------------------------

class Deserializer:
    """objseri.h ``Deserializer``: little-endian ints, length-prefixed strings, RawBuffers."""

    def __init__(self, data: bytes):
        self.stream = io.BytesIO(data)
        self.size = len(data)

    def remaining(self) -> int:
        return self.size - self.stream.tell()

    def int(self) -> int:
        chunk = self.stream.read(4)
        if len(chunk) < 4:
            raise BadInput("TNN model: unexpected end of file")
        return struct.unpack("<i", chunk)[0]

    def bool(self) -> bool:
        chunk = self.stream.read(1)  # objseri.h get_basic_t<bool>: one byte
        if len(chunk) < 1:
            raise BadInput("TNN model: unexpected end of file")
        return chunk != b"\x00"

    def string(self) -> str:
        length = self.int()
        return self.stream.read(length).decode("utf-8")

    def raw(self) -> np.ndarray:
        return self.raw_with_dims()[0]

    def raw_with_dims(self) -> tuple[np.ndarray, list[int]]:
        """The buffer, shaped by its stored dims, and those dims ([] when none were stored)."""
        magic = self.int() & 0xFFFFFFFF
        data_type = self.int()
        length = self.int()
        if length <= 0:
            return np.zeros(0, np.float32), []
        dims = [self.int() for _ in range(self.int())] if magic == MAGIC_V2 else None
        data = self.stream.read(length)
        dtype = {DATA_FLOAT: "<f4", DATA_HALF: "<f2", DATA_INT8: "i1", DATA_INT32: "<i4",
                 DATA_INT64: "<i8", DATA_UINT32: "<u4"}.get(data_type)
        if dtype is None:
            raise BadInput(f"TNN model: unsupported RawBuffer data type {data_type}")
        array = np.frombuffer(data, dtype)
        if dims == [] and array.size == 1:
            # A scalar (a Gather index): TNN's GetBufferDims() is then empty, and Gather drops
            # the axis as ONNX does (gather_layer.cc InferOutputShape).
            return array.reshape(()), []
        if dims and int(np.prod(dims)) == array.size:
            return array.reshape(dims), dims
        return array, []


def _int8_scales(d: Deserializer, res: dict) -> dict:
    """An int8 resource's tail: ``zero_point (int8) ; scale (float)``, or the old ``scale`` only
    (the first buffer's data type tells, conv/inner_product/blob_scale_layer_interpreter.cc)."""
    first = d.raw()
    if first.dtype == np.int8:
        res["zero_point"], res["scale"] = first, d.raw()
    else:
        res["zero_point"], res["scale"] = np.zeros(first.shape, np.int8), first
    return res


def _conv_resource(d: Deserializer) -> dict:
    # conv_layer_interpreter.cc InterpretResource (Convolution and Deconvolution)
    res = {"name": d.string(), "has_bias": d.int()}
    res["filter"] = d.raw()
    if res["has_bias"]:
        res["bias"] = d.raw()
    return _int8_scales(d, res) if res["filter"].dtype == np.int8 else res


def _inner_product_resource(d: Deserializer) -> dict:
    res = {"name": d.string(), "weight": d.raw(), "bias": d.raw()}  # inner_product_layer_interpreter.cc
    return _int8_scales(d, res) if res["weight"].dtype == np.int8 else res


def _blob_scale_resource(d: Deserializer) -> dict:
    res = _int8_scales(d, {})  # blob_scale_layer_interpreter.cc
    res["bias"] = d.raw()
    return res


def _element_resource(d: Deserializer) -> dict:
    element, dims = d.raw_with_dims()
    return {"element": element, "element_dims": dims}  # add/sub/mul/div/max/min_layer_interpreter.cc: no name string


def _matmul_resource(d: Deserializer) -> dict:
    return {"weight": d.raw()}  # mat_mul_layer_interpreter.cc


def _scale_bias_resource(d: Deserializer) -> dict:
    return {"scale": d.raw(), "bias": d.raw()}  # batch_norm / instance_norm_layer_interpreter.cc


def _prelu_resource(d: Deserializer) -> dict:
    return {"name": d.string(), "slope": d.raw()}  # prelu_layer_interpreter.cc


def _gather_resource(d: Deserializer) -> dict:
    res = {}
    if d.int() == 1:  # gather_layer_interpreter.cc
        res["data"] = d.raw()
    if d.int() == 1:
        res["indices"] = d.raw()
    return res


def _value_resource(d: Deserializer) -> dict:
    return {"value": d.raw()}  # constantofshape_layer_interpreter.cc GET_BUFFER_FOR_ATTR(value)


def _scatter_nd_resource(d: Deserializer) -> dict:
    res = {}
    if d.bool():  # scatter_nd_layer_interpreter.cc: bool has_indices ; [Raw] ; bool has_update ; [Raw]
        res["indices"] = d.raw()
    if d.bool():
        res["updates"] = d.raw()
    return res


_RESOURCE_READERS = {
    308: _value_resource, 305: _scatter_nd_resource,
    1: _conv_resource, 22: _conv_resource, 19: _inner_product_resource,
    38: _element_resource, 108: _element_resource, 42: _element_resource, 175: _element_resource,
    137: _element_resource, 140: _element_resource, 105: _matmul_resource,
    2: _scale_bias_resource, 43: _scale_bias_resource, 35: _prelu_resource, 104: _gather_resource,
    600: _blob_scale_resource,
}


def parse_model(data: bytes, net: ParsedNet) -> None:
    d = Deserializer(data)
    first = d.int() & 0xFFFFFFFF
    if first not in (MAGIC_V1, MAGIC_V2):
        d.stream.seek(0)
    count = d.int() & 0x1FFFFFFF
    if count >= 10000:
        raise BadInput("TNN model: tnnmodel is invalid")
    for _ in range(count):
        type_v = d.int()
        type_str = d.string()
        if type_str in LAYER_TYPE:
            type_v, name = LAYER_TYPE[type_str], d.string()
        else:  # old format: the second string is already the name
            name = type_str
        if type_v not in HAS_INTERPRETER:
            raise BadInput(f"TNN model: layer_interpreter is nil for '{name}' (type {type_v})")
        reader = _RESOURCE_READERS.get(type_v)
        net.resources[name] = reader(d) if reader else {}
    if d.remaining() >= 4:
        d.int()  # magic, ignored by the interpreter
        for _ in range(d.int()):
            key = d.string()
            net.constants[key] = d.raw()


def read(proto_path: str | Path, model_path: str | Path) -> ParsedNet:
    try:
        net = parse_proto(Path(proto_path).read_text(encoding="utf-8"))
        parse_model(Path(model_path).read_bytes(), net)
    except (OSError, UnicodeDecodeError) as err:
        raise BadInput(f"cannot read TNN model: {err}") from None
    return net
