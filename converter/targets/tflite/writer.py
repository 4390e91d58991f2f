"""Collect TFLite tensors, constant buffers and builtin ops, then serialize one flatbuffer.

This is the output format's builder, not a graph IR: graph decisions are made on the ONNX graph
(onnx-graphsurgeon) in ``lower.py``; this module only records what to write and writes it:

* constant buffers are deduplicated by content (two equal weight arrays share one buffer),
* ``--fp16-weights`` stores float constants as FLOAT16 plus a DEQUANTIZE op, as TensorFlow's
  float16 post-training quantization does,
* unreferenced tensors (left behind by activation fusion) are dropped before writing,
* buffer data is 16-byte aligned like TensorFlow's converter does (schema: ``force_align: 16``),
* every op gets the lowest builtin version that its inputs and options need (``versions.py``).
"""

from __future__ import annotations

import hashlib

from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np

from ...ir.graph import unique_name
from ._generated import schema_generated as fb
from .versions import builtin_version

#: numpy dtype -> schema TensorType.
TENSOR_TYPES = {
    np.dtype(np.float32): fb.TensorType.FLOAT32,
    np.dtype(np.float16): fb.TensorType.FLOAT16,
    np.dtype(np.int32): fb.TensorType.INT32,
    np.dtype(np.int64): fb.TensorType.INT64,
    np.dtype(np.bool_): fb.TensorType.BOOL,
    np.dtype(np.int8): fb.TensorType.INT8,
    np.dtype(np.uint8): fb.TensorType.UINT8,
}

#: Float constants smaller than this stay float32 under --fp16-weights (scalars such as an
#: epsilon lose meaning in fp16 and a DEQUANTIZE per scalar costs more than it saves).
FP16_MIN_ELEMENTS = 16

#: Builtin codes above 127 do not fit the deprecated int8 field: it holds this placeholder.
_PLACEHOLDER_FOR_GREATER_OP_CODES = 127


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    buffer: int = 0  # 0 = no data (the schema's empty sentinel buffer)
    variable: bool = False  # a state tensor the runtime keeps between invocations (LSTM state)
    #: Integer encoding (``quantized.QParams``: scale/zero_point per tensor or per channel), or None.
    quant: Any = None


@dataclass
class Op:
    builtin: str  # schema BuiltinOperator name, e.g. "CONV_2D"
    inputs: list[int]
    outputs: list[int]
    options: Any = None  # a schema ...OptionsT object, or None
    options_type: int = 0  # schema BuiltinOptions value
    extra: dict = field(default_factory=dict)  # facts versions.py needs (e.g. grouped conv)


class ModelWriter:
    def __init__(self, fp16_weights: bool = False):
        self.fp16_weights = fp16_weights
        self.tensors: list[Tensor] = []
        self.ops: list[Op] = []
        #: Constant buffers as read-only byte views of the arrays (never copies: a 1 GB weight
        #: stays one array until the builder packs it), deduplicated by content: a new buffer is
        #: compared with the earlier ones of its size (no digest of every weight).
        self._buffers: list[memoryview | bytes] = [b""]
        self._buffers_of_size: dict[int, list[int]] = {}
        self._constant_of: dict[tuple, int] = {}
        self._names: set[str] = set()
        self._values: dict[int, np.ndarray] = {}  # constant tensor index -> float32/int value

    # -- tensors -------------------------------------------------------------------------
    def _unique(self, name: str) -> str:
        return unique_name(name, self._names)

    def tensor(self, name: str, shape, dtype=np.float32) -> int:
        self.tensors.append(Tensor(self._unique(name), tuple(int(d) for d in shape), np.dtype(dtype)))
        return len(self.tensors) - 1

    def rename(self, index: int, name: str) -> None:
        """Give tensor ``index`` the exact ``name``; whoever had it gets a suffixed one."""
        for other in self.tensors:
            if other.name == name and other is not self.tensors[index]:
                self._names.discard(name)
                other.name = self._unique(f"{name}/internal")
        self._names.discard(self.tensors[index].name)
        self.tensors[index].name = name
        self._names.add(name)

    def constant(self, name: str, value: np.ndarray) -> int:
        """A constant tensor; equal constants share one tensor and one buffer."""
        value = np.asarray(value)
        value = value if value.flags.c_contiguous else value.copy(order="C")  # keeps 0-d arrays 0-d
        if value.dtype == np.float64:
            value = value.astype(np.float32)
        if value.dtype not in TENSOR_TYPES:
            raise TypeError(f"constant {name}: dtype {value.dtype} has no TFLite tensor type")
        if self.fp16_weights and value.dtype == np.float32 and value.size >= FP16_MIN_ELEMENTS:
            return self._fp16_constant(name, value)
        return self._stored_constant(name, value)

    def _stored_constant(self, name: str, value: np.ndarray, quant=None) -> int:
        """A constant tensor over a buffer shared by equal bytes; equal constants (and, with
        ``quant``, equal quantization parameters) share one tensor."""
        buffer = self._buffer_for(_view_of(value))
        key = (value.dtype.str, value.shape, buffer) if quant is None else \
            ("quantized", value.dtype.str, value.shape, buffer, quant)
        if key in self._constant_of:
            return self._constant_of[key]
        index = self.tensor(name, value.shape, value.dtype)
        self.tensors[index].buffer = buffer
        self._constant_of[key] = index
        if quant is None:
            self._values[index] = value
        else:
            self.tensors[index].quant = quant
        return index

    def _buffer_for(self, data: memoryview) -> int:
        """The index of the buffer holding exactly ``data``'s bytes (appended when new)."""
        same_size = self._buffers_of_size.setdefault(data.nbytes, [])
        for index in same_size:
            if _same_bytes(self._buffers[index], data):
                return index
        self._buffers.append(data)
        same_size.append(len(self._buffers) - 1)
        return len(self._buffers) - 1

    def _fp16_constant(self, name: str, value: np.ndarray) -> int:
        key = ("fp16->fp32", value.shape, _bytes_of(value)[1])
        if key in self._constant_of:
            return self._constant_of[key]
        half = self._stored_constant(f"{name}/fp16", value.astype(np.float16))
        index = self.tensor(name, value.shape, np.float32)
        self.op("DEQUANTIZE", [half], [index])
        self._constant_of[key] = index
        self._values[index] = value
        return index

    def quantized_constant(self, name: str, value: np.ndarray, quant) -> int:
        """An integer constant with its quantization parameters (int8 weights, int32 biases);
        equal values with equal parameters share one tensor."""
        return self._stored_constant(name, np.ascontiguousarray(value), quant)

    def value(self, index: int) -> np.ndarray | None:
        """The value of a constant tensor (also one made by an fp16 DEQUANTIZE), else None."""
        return self._values.get(index)

    # -- ops -----------------------------------------------------------------------------
    def op(self, builtin: str, inputs, outputs, options=None, **extra) -> Op:
        options_type = 0
        if options is not None:
            options_type = getattr(fb.BuiltinOptions, type(options).__name__[:-1])
        op = Op(builtin, list(inputs), list(outputs), options, options_type, dict(extra))
        self.ops.append(op)
        return op

    # -- serialization -------------------------------------------------------------------
    def serialize(self, inputs: list[int], outputs: list[int], description: str = "edgeconv",
                  streamed: bool = False):
        """The ``.tflite`` bytes (a bytearray); ``streamed=True``: the same bytes as a
        :class:`FlatbufferFile`, whose big weight buffers are never copied into the builder."""
        used = referenced(self.ops, inputs, outputs)
        new_index = {old: new for new, old in enumerate(used)}
        tensors, buffers = self._tensor_table(used)
        code_list, operators = self._operator_table(new_index)

        subgraph = fb.SubGraphT()
        subgraph.tensors = tensors
        subgraph.inputs = [new_index[i] for i in inputs]
        subgraph.outputs = [new_index[i] for i in outputs]
        subgraph.operators = operators
        subgraph.name = "main"

        signature = fb.SignatureDefT()
        signature.signatureKey = "serving_default"
        signature.subgraphIndex = 0
        signature.inputs = [_tensor_map(self.tensors[i].name, new_index[i]) for i in inputs]
        signature.outputs = [_tensor_map(self.tensors[i].name, new_index[i]) for i in outputs]

        model = fb.ModelT()
        model.version = 3
        model.description = description
        model.operatorCodes = code_list
        model.subgraphs = [subgraph]
        model.buffers = buffers
        model.signatureDefs = [signature]

        size = _builder_size(buffers, tensors, operators)
        if streamed:
            return _streamed(model, buffers, size + 4096 * (len(tensors) + len(operators)) + (16 << 20))
        builder = flatbuffers.Builder(size)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        # The finished flatbuffer is the tail of the builder's bytearray: cut the unused head off
        # in place (CPython moves the start pointer) instead of ``bytes(builder.Output())``, which
        # copies the whole model twice.
        data = builder.Bytes
        del data[: builder.Head()]
        return data

    def _tensor_table(self, used: list[int]) -> tuple[list, list]:
        """The file's tensors (``used``, in that order) and the buffers they read (buffer 0 is
        the empty one)."""
        buffer_index: dict[int, int] = {0: 0}
        buffers = [AlignedBuffer(b"")]
        tensors = []
        for old in used:
            t = self.tensors[old]
            if t.buffer not in buffer_index:
                buffer_index[t.buffer] = len(buffers)
                buffers.append(AlignedBuffer(self._buffers[t.buffer]))
            tt = fb.TensorT()
            tt.name = t.name
            tt.shape = list(t.shape)
            tt.type = TENSOR_TYPES[t.dtype]
            tt.buffer = buffer_index[t.buffer]
            tt.isVariable = t.variable
            if t.quant is not None:
                tt.quantization = t.quant.to_flatbuffer()
            tensors.append(tt)
        return tensors, buffers

    def _operator_table(self, new_index: dict[int, int]) -> tuple[list, list]:
        """The file's operator codes (one per builtin, version and custom code) and operators,
        their tensors renumbered by ``new_index``."""
        codes: dict[tuple[str, int], int] = {}
        code_list = []
        operators = []
        for op in self.ops:
            version = builtin_version(op, self.tensors)
            custom_code = op.extra.get("custom_code") if op.builtin == "CUSTOM" else None
            key = (op.builtin, version, custom_code)
            if key not in codes:
                code = getattr(fb.BuiltinOperator, op.builtin)
                oc = fb.OperatorCodeT()
                oc.customCode = custom_code  # CUSTOM ops only (custom-layer remedy, see custom.py)
                oc.builtinCode = code
                oc.deprecatedBuiltinCode = min(code, _PLACEHOLDER_FOR_GREATER_OP_CODES)
                oc.version = version
                codes[key] = len(code_list)
                code_list.append(oc)
            ot = fb.OperatorT()
            ot.opcodeIndex = codes[key]
            ot.inputs = [new_index[i] if i >= 0 else -1 for i in op.inputs]
            ot.outputs = [new_index[i] for i in op.outputs]
            ot.builtinOptionsType = op.options_type
            ot.builtinOptions = op.options
            if op.extra.get("custom_options") is not None:
                ot.customOptions = list(op.extra["custom_options"])
                ot.customOptionsFormat = fb.CustomOptionsFormat.FLEXBUFFERS
            operators.append(ot)
        return code_list, operators


def _view_of(value: np.ndarray) -> memoryview:
    """The bytes of C-contiguous ``value`` as a read-only view (no copy of the array)."""
    return memoryview(value.reshape(-1).view(np.uint8)).toreadonly() if value.size else memoryview(b"")


def _same_bytes(a: memoryview, b: memoryview) -> bool:
    """Equal byte views of one size: the first bytes (where different weights differ) decide
    most pairs; then numpy compares the whole (vectorized, ~20x faster than a SHA-256)."""
    if a[:64] != b[:64]:
        return False
    return bool(np.array_equal(np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8)))


#: Weight buffers at least this big are left out of a streamed builder (written from their arrays).
STREAMED_MIN_BYTES = 1 << 20


def _streamed(model, buffers: list, size: int) -> FlatbufferFile:
    """Build ``model`` in anonymous memory (pages never written cost nothing) with the big
    buffers' bytes left out: the builder only reserves their place, :class:`FlatbufferFile`
    writes them from the arrays."""
    import mmap

    holes: list[tuple[int, memoryview]] = []
    for buffer in buffers:
        buffer.holes = holes
    builder = flatbuffers.Builder(0)
    builder.Bytes = mmap.mmap(-1, min(size, flatbuffers.Builder.MAX_BUFFER_SIZE))
    builder.head = len(builder.Bytes)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return FlatbufferFile(builder.Bytes, builder.Head(), holes)


class FlatbufferFile:
    """A finished flatbuffer as pieces: the builder's memory from ``head`` on, where each hole
    (its distance from the memory's end, the bytes that belong there) takes its bytes from the
    weight array instead.  ``len``, :meth:`write`, :meth:`sha256` and :meth:`tobytes` all see the
    file's bytes."""

    def __init__(self, memory, head: int, holes: list[tuple[int, memoryview]]):
        self.memory, self.head = memory, head
        end = len(memory)
        self.holes = sorted((end - from_end, view) for from_end, view in holes)

    def pieces(self):
        with memoryview(self.memory) as whole:
            at = self.head
            for start, view in self.holes:
                yield whole[at:start]
                yield view
                at = start + view.nbytes
            yield whole[at:]

    def __len__(self) -> int:
        return len(self.memory) - self.head

    def write(self, out) -> None:
        for piece in self.pieces():
            out.write(piece)

    def sha256(self) -> str:
        digest = hashlib.sha256()
        for piece in self.pieces():
            digest.update(piece)
        return digest.hexdigest()

    def sha256_meanwhile(self):
        """A function returning :meth:`sha256`, which a thread computes from now on (hashlib
        releases the GIL: the file is hashed while it is written)."""
        from ...infra.fsutil import meanwhile

        return meanwhile(self.sha256, "edgeconv-sha256", background=len(self) >= STREAMED_MIN_BYTES)

    def tobytes(self) -> bytes:
        return b"".join(bytes(piece) for piece in self.pieces())


def _bytes_of(value: np.ndarray) -> tuple[memoryview, bytes]:
    """(the bytes of C-contiguous ``value`` as a read-only view, their SHA-256 digest with its
    size): the key of an fp16-stored constant's float32 value."""
    view = _view_of(value)
    return view, hashlib.sha256(view).digest() + str(view.nbytes).encode()


def _builder_size(buffers, tensors, operators) -> int:
    """Bytes the finished model needs, over-estimated: a builder that runs out doubles its
    bytearray and copies everything into it (one more whole copy of the weights).  Each buffer
    costs its data + up to 15 bytes of alignment + a 4-byte length + its table; tensors and
    operators their names, shapes, index vectors and tables."""
    weights = sum(_nbytes(b.data) + 64 for b in buffers)
    tables = sum(4 * len(t.name) + 4 * len(t.shape) + 128 for t in tensors)
    tables += sum(4 * (len(o.inputs) + len(o.outputs) + len(o.customOptions or ())) + 256 for o in operators)
    return min((1 << 16) + weights + 2 * tables, flatbuffers.Builder.MAX_BUFFER_SIZE)


def _tensor_map(name: str, index: int):
    tm = fb.TensorMapT()
    tm.name = name
    tm.tensorIndex = index
    return tm


def referenced(ops: list[Op], inputs: list[int], outputs: list[int]) -> list[int]:
    """Indices of tensors the written model needs, in first-use order (graph inputs first)."""
    seen: dict[int, None] = {}
    for i in inputs:
        seen.setdefault(i)
    for op in ops:
        for i in op.inputs + op.outputs:
            if i >= 0:
                seen.setdefault(i)
    for i in outputs:
        seen.setdefault(i)
    return list(seen)


def _nbytes(data) -> int:
    return data.nbytes if isinstance(data, memoryview) else len(data)


class AlignedBuffer:
    """Packs like ``fb.BufferT`` but honours the schema's ``force_align: 16`` on ``data``."""

    def __init__(self, data: bytes):
        self.data = data
        #: a streamed build's list of (distance from the builder's end, bytes) left out
        self.holes: list | None = None

    def Pack(self, builder):  # noqa: N802 (the generated object API's method name)
        vector = None
        n = _nbytes(self.data)
        if n:
            builder.StartVector(1, n, 16)
            builder.head = builder.head - n
            if self.holes is not None and n >= STREAMED_MIN_BYTES:
                self.holes.append((len(builder.Bytes) - builder.head, memoryview(self.data)))
            else:
                # through a memoryview: ``bytearray[a:b] = view`` first copies the view into a
                # temporary bytearray (one more copy of the weight)
                with memoryview(builder.Bytes) as target:
                    target[builder.head : builder.head + n] = self.data
            vector = builder.EndVector()
        fb.BufferStart(builder)
        if vector is not None:
            fb.BufferAddData(builder, vector)
        return fb.BufferEnd(builder)
