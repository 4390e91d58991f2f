"""ONNX files as edgeconv writes them: atomically, and with ONNX external data (``<name>.data``)
for models over protobuf's 2 GB limit; weight-store references streamed, never copied."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import onnx

from ..infra.fsutil import atomic_output_dir, atomic_write_bytes


def save_onnx(model: onnx.ModelProto, path: str | os.PathLike) -> Path:
    """Write atomically; models over protobuf's 2 GB limit get their big weights in
    ``<name>.data`` beside the ``.onnx`` (ONNX external data).  ``model`` is not modified."""
    from ..ir import weights

    path = Path(path)
    if not _too_large_to_serialize(model):
        if weights.has_references(model):
            # the referenced weights streamed from their arrays, never one bytes object
            return atomic_write_bytes(path, lambda out: weights.write_model(model, out))
        return atomic_write_bytes(path, model.SerializeToString())
    with atomic_output_dir(path.parent) as tmp:
        write_with_external_weights(model, tmp / path.name)
    return path


#: Tensors at least this big go to the external data file of a large model.
_EXTERNAL_MIN_BYTES = 1 << 20


def _too_large_to_serialize(model: onnx.ModelProto) -> bool:
    # Initializers dominate a model's size; keep a margin under protobuf's hard limit.
    from ..ir.weights import tensor_bytes

    return sum(tensor_bytes(t) for t in model.graph.initializer) > onnx.checker.MAXIMUM_PROTOBUF - (64 << 20)


@contextlib.contextmanager
def external_references(model: onnx.ModelProto, reference, min_bytes: int = _EXTERNAL_MIN_BYTES):
    """While inside, every initializer of at least ``min_bytes`` holds an external-data reference
    instead of its bytes: ``reference(index, raw_bytes) -> {"location": ..., "offset": ...}``.

    ``onnx.save_model(save_as_external_data=True)`` rewrites the model it is given for good;
    this puts the bytes back on exit, so callers can serialize a large model and keep it."""
    from ..ir import weights

    held = [t for t in model.graph.initializer if weights.tensor_bytes(t) >= min_bytes]
    # a weight-store reference is kept as it is (its fields put back on exit), its array written
    originals = [onnx.TensorProto() if weights.is_reference(t) else t.raw_data for t in held]
    for tensor, original in zip(held, originals):
        if isinstance(original, onnx.TensorProto):
            original.CopyFrom(tensor)
    try:
        for index, (tensor, raw) in enumerate(zip(held, originals)):
            if isinstance(raw, onnx.TensorProto):
                array = weights.array_of(raw)
                raw = memoryview(array if array.flags.c_contiguous else array.copy()).cast("B")
            entries = reference(index, raw)
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            del tensor.external_data[:]
            for key, value in entries.items():
                tensor.external_data.add(key=key, value=str(value))
        yield model
    finally:
        for tensor, raw in zip(held, originals):
            if isinstance(raw, onnx.TensorProto):
                tensor.CopyFrom(raw)
                continue
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
            tensor.raw_data = raw


def write_with_external_weights(model: onnx.ModelProto, path: Path) -> Path:
    """Write ``path`` + ``path.name + '.data'`` (ONNX external data, 64-byte aligned offsets)."""
    location = path.name + ".data"
    with open(path.parent / location, "wb") as data:
        def append(_index, raw):
            offset = (data.tell() + 63) // 64 * 64
            data.write(b"\0" * (offset - data.tell()))
            data.write(raw)
            return {"location": location, "offset": offset, "length": len(raw)}

        with external_references(model, append):
            path.write_bytes(model.SerializeToString())
    return path
