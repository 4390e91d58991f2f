"""Write the binary ``.tnnmodel`` exactly as ``ModelInterpreter::InterpretModel`` reads it.

Little-endian (model_interpreter.cc:400-476, objseri.h, writer model_packer.cc:191-351):
``uint32 magic ; int32 layer_cnt ; layer_cnt x {int32 type ; string type_str ; string name ;
payload}`` then, when present, the constant map ``uint32 magic ; int32 count ; count x {string
blob ; RawBuffer}``.  A string is ``int32 byte length + bytes``; a RawBuffer is ``uint32 magic ;
int32 data_type ; int32 byte_length ; [int32 ndims ; int32 dims[ndims] ; bytes]`` (the dims and
bytes only when byte_length > 0, Serializer::PutRaw).  Only layers with resources are listed.
"""

from __future__ import annotations

import struct

import numpy as np

from .layer_types import LAYER_TYPE, MAGIC_V2
from .net import RawBuffer, TnnNet


def _int(value: int) -> bytes:
    return struct.pack("<i", int(value))


def _uint(value: int) -> bytes:
    return struct.pack("<I", int(value))


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return _int(len(data)) + data


def _raw(buffer: RawBuffer) -> bytes:
    data = buffer.data.astype(buffer.data.dtype.newbyteorder("<"), copy=False).tobytes()
    out = _uint(MAGIC_V2) + _int(buffer.data_type) + _int(len(data))
    if not data:
        return out
    return out + _int(len(buffer.dims)) + b"".join(_int(d) for d in buffer.dims) + data


def _item(kind: str, value) -> bytes:
    if kind == "str":
        return _string(value)
    if kind == "int":
        return _int(value)
    if kind == "bool":  # Serializer::PutBool writes one byte (objseri.h put_basic_t<bool>)
        return struct.pack("<?", bool(value))
    if kind == "raw":
        return _raw(value)
    raise ValueError(f"unknown resource item {kind!r}")


def model_bytes(net: TnnNet) -> bytes:
    with_resource = [layer for layer in net.layers if layer.resource is not None]
    parts = [_uint(MAGIC_V2), _int(len(with_resource) + len(net.blob_scales))]
    for layer in with_resource:
        # layer_header::serialize (model_interpreter.h): enum, type string, layer name; the
        # name keys net_resource->resource_map, so it must equal the .tnnproto layer name.
        parts += [_int(LAYER_TYPE[layer.type]), _string(layer.type), _string(layer.name)]
        parts += [_item(kind, value) for kind, value in layer.resource]
    for blob, scale in sorted(net.blob_scales.items()):
        # an int8 blob's scale (blob_scale_layer_interpreter.cc SaveResource): zero point (int8),
        # scale (float), bias (int32), keyed "<blob>_scale_data_" (objseri.h BLOB_SCALE_SUFFIX)
        parts += [_int(LAYER_TYPE["BlobScale"]), _string("BlobScale"), _string(f"{blob}_scale_data_")]
        parts += [_raw(RawBuffer.of(np.zeros(1, np.int8))), _raw(RawBuffer.of(np.array([scale], np.float32))),
                  _raw(RawBuffer.of(np.zeros(1, np.int32)))]
    if net.constants:
        parts += [_uint(MAGIC_V2), _int(len(net.constants))]
        for name, buffer in sorted(net.constants.items()):
            parts += [_string(name), _raw(buffer)]
    return b"".join(parts)
