"""The MACE ``.data`` file: every constant tensor, raw little-endian, 4-byte aligned.

Layout as MACE's converter writes it (``tools/python/utils/convert_util.py:merge_params``):
tensors in NetDef order; before each tensor that is not (u)int8 the blob is zero-padded to a
4-byte boundary; ``ConstTensor.offset`` is the byte offset and ``ConstTensor.data_size`` the
**element count**.  The runtime checks ``offset + data_size * sizeof(dtype) <= file size``
(``mace/core/workspace.cc``) and maps fp32 tensors zero-copy on CPU.
"""

from __future__ import annotations

import numpy as np

# mace.proto DataType values.
DT_FLOAT = 1
DT_UINT8 = 2
DT_HALF = 3
DT_INT32 = 4

NUMPY_OF = {DT_FLOAT: np.dtype("<f4"), DT_HALF: np.dtype("<f2"), DT_INT32: np.dtype("<i4"),
            DT_UINT8: np.dtype("u1")}


def pack(tensors: list[tuple[np.ndarray, int]]) -> tuple[bytes, list[tuple[int, int]]]:
    """Pack ``(array, mace_dtype)`` pairs; return the blob and ``(offset, data_size)`` per tensor."""
    blob = bytearray()
    placed = []
    for array, dtype in tensors:
        if dtype != DT_UINT8:
            blob.extend(b"\0" * (-len(blob) % 4))
        raw = np.ascontiguousarray(array, dtype=NUMPY_OF[dtype]).tobytes()
        placed.append((len(blob), int(np.asarray(array).size)))
        blob.extend(raw)
    return bytes(blob), placed


def unpack(blob: bytes, dims, dtype: int, offset: int, data_size: int) -> np.ndarray:
    """Read one tensor back, with MACE's bounds check."""
    np_dtype = NUMPY_OF.get(dtype)
    if np_dtype is None:
        raise ValueError(f"unsupported MACE data_type {dtype}")
    end = offset + data_size * np_dtype.itemsize
    if end > len(blob):
        raise ValueError(f"tensor at offset {offset} with {data_size} elements overruns .data "
                         f"({len(blob)} bytes)")
    return np.frombuffer(blob[offset:end], dtype=np_dtype).reshape([int(d) for d in dims]).copy()


def set_arg(arg, name: str, kind: str, value) -> None:
    """Fill a NetDef ``Argument``: ``kind`` i, f, s, ints or floats (``mace/proto/mace.proto``)."""
    arg.name = name
    if kind == "i":
        arg.i = int(value)
    elif kind == "f":
        arg.f = float(value)
    elif kind == "s":
        arg.s = value.encode() if isinstance(value, str) else bytes(value)
    elif kind == "ints":
        arg.ints.extend(int(v) for v in value)
    elif kind == "floats":
        arg.floats.extend(float(v) for v in value)
    else:  # pragma: no cover - programming error
        raise ValueError(kind)
