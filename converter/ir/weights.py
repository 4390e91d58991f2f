"""Big weights held once, by reference, while a port runs.

A port keeps several models at once (the original for the reference run, the normalized and the
legalized one), and each ``ModelProto`` held its own copy of every weight: a 1 GB embedding table
made a 5 GB process.  While a :class:`WeightStore` is active (``with holding(store):``), the big
initializers of those models are *references* into the store instead of bytes::

    TensorProto(name, dims, data_type, data_location=EXTERNAL,
                external_data=[location="edgeconv-weights:<store>", edgeconv.key=<k>])

and every stage shares the one numpy array behind ``<k>``:

* :func:`converter.ir.graph.to_graph` gives graphsurgeon constants the stored array itself (no copy),
* :func:`converter.ir.graph.to_model` exports a big constant's array as a reference (the same key
  when the array is a stored one: normalize and legalize pass the table through untouched),
* :func:`converter.frontend.load.save_onnx` streams the arrays into the file (:func:`write_model`),
  byte for byte what the model with its bytes put back would serialize to,
* onnxruntime sessions get the arrays as external initializers (:func:`session_weights`).

The stored arrays are read-only: a stage that changed one in place would change every model.
A reference the store cannot resolve (the store is gone) is an error, never silent zeros.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
import weakref

import numpy as np
import onnx

#: Initializers at least this big are held by reference.
MIN_BYTES = 1 << 20
_LOCATION = "edgeconv-weights:"
_KEY = "edgeconv.key"
#: The tensor's own ``data_location`` field before it became a reference (onnx's external-data
#: loader sets it explicitly to DEFAULT; graphsurgeon carries it through an export).
_DATA_LOCATION = "edgeconv.data_location"

_ids = itertools.count(1)
_STORES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("edgeconv_weight_store", default=None)


class WeightStore:
    """The arrays behind the references of one port (each held once, read-only)."""

    def __init__(self):
        self.id = next(_ids)
        self.arrays: list[np.ndarray] = []
        self._keys: dict[int, int] = {}  # id(array) -> key
        #: key -> (file, byte offset) holding the array's bytes (read from there at load):
        #: onnxruntime maps that file instead of copying the array into its own buffers
        self.sources: dict[int, tuple[str, int]] = {}
        self._lock = threading.Lock()  # `port --to tflite --hw all -j 2` exports in two threads
        _STORES[self.id] = self

    def key(self, array: np.ndarray) -> int:
        """The key of ``array`` (added when new; the same object always gets the same key)."""
        with self._lock:
            key = self._keys.get(id(array))
            if key is not None and self.arrays[key] is array:
                return key
            array.flags.writeable = False
            self.arrays.append(array)
            self._keys[id(array)] = len(self.arrays) - 1
            return len(self.arrays) - 1

    def clear(self) -> None:
        """Drop every array (once no model refers to them any more)."""
        with self._lock:
            self.arrays, self._keys, self.sources = [], {}, {}

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)


@contextlib.contextmanager
def holding(store: WeightStore | None):
    """Models exported inside refer to ``store`` for their big weights (``None``: no store)."""
    token = _ACTIVE.set(store)
    try:
        yield store
    finally:
        _ACTIVE.reset(token)


def active() -> WeightStore | None:
    return _ACTIVE.get()


# ------------------------------------------------------------------------------ references


def _numpy_type(array: np.ndarray) -> int | None:
    try:
        return onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
    except (KeyError, TypeError, ValueError):
        return None


def reference_tensor(store: WeightStore, array: np.ndarray, name: str, data_location: int | None) -> onnx.TensorProto:
    """A TensorProto referring to ``array`` (added to ``store``)."""
    tensor = onnx.TensorProto(name=name, dims=array.shape, data_type=_numpy_type(array),
                              data_location=onnx.TensorProto.EXTERNAL)
    tensor.external_data.add(key="location", value=f"{_LOCATION}{store.id}")
    tensor.external_data.add(key=_KEY, value=str(store.key(array)))
    if data_location is not None:
        tensor.external_data.add(key=_DATA_LOCATION, value=str(int(data_location)))
    return tensor


def is_reference(tensor: onnx.TensorProto) -> bool:
    return (tensor.data_location == onnx.TensorProto.EXTERNAL and len(tensor.external_data) > 0
            and tensor.external_data[0].key == "location" and tensor.external_data[0].value.startswith(_LOCATION))


def _entries(tensor: onnx.TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in tensor.external_data}


def array_of(tensor: onnx.TensorProto) -> np.ndarray | None:
    """The stored array a reference stands for (None when ``tensor`` is no reference)."""
    if not is_reference(tensor):
        return None
    entries = _entries(tensor)
    store = _STORES.get(int(entries["location"][len(_LOCATION):]))
    if store is None:
        raise RuntimeError(f"initializer '{tensor.name}' refers to a weight store that no longer exists")
    return store.arrays[int(entries[_KEY])]


def data_location_of(tensor: onnx.TensorProto) -> int | None:
    """The ``data_location`` the tensor had before it became a reference (None: unset)."""
    value = _entries(tensor).get(_DATA_LOCATION)
    return None if value is None else int(value)


def store_of(model: onnx.ModelProto) -> WeightStore | None:
    """The store ``model``'s references point into (None when it holds all its bytes)."""
    for tensor in model.graph.initializer:
        if is_reference(tensor):
            return _STORES.get(int(_entries(tensor)["location"][len(_LOCATION):]))
    return None


def has_references(model: onnx.ModelProto) -> bool:
    return any(is_reference(t) for t in model.graph.initializer)


def tensor_bytes(tensor: onnx.TensorProto) -> int:
    """Bytes of a tensor's values, held in the proto or by reference."""

    array = array_of(tensor)
    return array.nbytes if array is not None else raw_nbytes(tensor)


def to_array(tensor: onnx.TensorProto) -> np.ndarray:
    """``numpy_helper.to_array`` that also reads references."""
    array = array_of(tensor)
    if array is not None:
        return array
    from onnx import numpy_helper

    return numpy_helper.to_array(tensor)


def _holdable(model: onnx.ModelProto, min_bytes: int):
    """(tensor, numpy dtype) of the in-proto initializers :func:`hold` moves, by their header
    fields (reading ``raw_data`` copies the bytes)."""
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.data_type in (
                onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED) or not tensor.HasField("raw_data"):
            continue
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
        if dtype.itemsize * int(np.prod(tensor.dims, dtype=np.int64)) >= min_bytes:
            yield tensor, dtype


def holdable_bytes(model: onnx.ModelProto, min_bytes: int = MIN_BYTES) -> int:
    """Bytes :func:`hold` would move into a store (at most: it skips a tensor whose ``raw_data``
    does not match its shape)."""
    return sum(dtype.itemsize * int(np.prod(t.dims, dtype=np.int64)) for t, dtype in _holdable(model, min_bytes))


def hold(model: onnx.ModelProto, store: WeightStore, min_bytes: int = MIN_BYTES) -> None:
    """Move ``model``'s big in-proto initializers into ``store`` (in place)."""
    for tensor, dtype in list(_holdable(model, min_bytes)):
        raw = tensor.raw_data
        if len(raw) < min_bytes or dtype.itemsize * int(np.prod(tensor.dims, dtype=np.int64)) != len(raw):
            continue
        array = np.frombuffer(raw, dtype=dtype).reshape(tuple(tensor.dims))
        refer(tensor, store, array)


def refer(tensor: onnx.TensorProto, store: WeightStore, array: np.ndarray,
          source: tuple[str, int] | None = None) -> None:
    """Make ``tensor`` (in place) a reference to ``array``, keeping its other fields;
    ``source`` = (file, offset) where the same bytes are (the external-data file it was read from)."""
    location = tensor.data_location if tensor.HasField("data_location") else None
    tensor.ClearField("raw_data")
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.EXTERNAL
    key = store.key(array)
    if source is not None:
        store.sources[key] = source
    tensor.external_data.add(key="location", value=f"{_LOCATION}{store.id}")
    tensor.external_data.add(key=_KEY, value=str(key))
    if location is not None:
        tensor.external_data.add(key=_DATA_LOCATION, value=str(int(location)))


def _restore_fields(tensor: onnx.TensorProto) -> None:
    """A reference's fields as they were before it became one (without the bytes)."""
    location = data_location_of(tensor)
    del tensor.external_data[:]
    tensor.ClearField("data_location")
    if location is not None:
        tensor.data_location = location


def materialize(model: onnx.ModelProto) -> None:
    """Put the bytes of every referenced initializer back into ``model`` (in place)."""
    for tensor in model.graph.initializer:
        array = array_of(tensor)
        if array is not None:
            _restore_fields(tensor)
            tensor.raw_data = np.ascontiguousarray(array).tobytes()


def materialized(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` holding all its bytes (``model`` itself when it has no references)."""
    if not has_references(model):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    materialize(copy)
    return copy


# ------------------------------------------------------------------------------ streaming


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _length_delimited(field: int) -> bytes:
    return _varint(field << 3 | 2)


def _fields(message, low: int, high: int) -> bytes:
    """The serialized fields of ``message`` numbered in [low, high): protobuf writes known fields
    in field-number order, so these are the same bytes as in the whole message."""

    part = type(message)()
    copy_fields(message, part, skip=tuple(d.name for d, _ in message.ListFields() if not low <= d.number < high))
    return part.SerializeToString()


_RAW_DATA = onnx.TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number
_INITIALIZER = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number
_GRAPH = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number


def _initializer_pieces(tensor: onnx.TensorProto) -> list:
    """The bytes of one ``initializer`` entry of the materialized model: bytes objects and, for
    a reference, the array itself (a memoryview written without a copy)."""
    array = array_of(tensor)
    if array is None:
        body = tensor.SerializeToString()
        return [_length_delimited(_INITIALIZER), _varint(len(body)), body]
    plain = onnx.TensorProto()
    plain.CopyFrom(tensor)
    _restore_fields(plain)
    head, tail = _fields(plain, 0, _RAW_DATA), _fields(plain, _RAW_DATA + 1, 1 << 29)
    data = memoryview(np.ascontiguousarray(array)).cast("B")
    raw_head = _length_delimited(_RAW_DATA) + _varint(data.nbytes) if data.nbytes else b""
    size = len(head) + len(raw_head) + data.nbytes + len(tail)
    return [_length_delimited(_INITIALIZER), _varint(size), head, raw_head, data if data.nbytes else b"", tail]


def write_model(model: onnx.ModelProto, out) -> int:
    """Write to the binary file ``out`` exactly ``materialized(model).SerializeToString()``,
    streaming each referenced array from its memory instead of building the bytes; returns the
    byte count."""

    graph = model.graph
    light = onnx.GraphProto()
    copy_fields(graph, light, skip=("initializer",))
    graph_head, graph_tail = _fields(light, 0, _INITIALIZER), _fields(light, _INITIALIZER + 1, 1 << 29)
    entries = [_initializer_pieces(t) for t in graph.initializer]
    graph_size = len(graph_head) + len(graph_tail) + sum(len(p) if isinstance(p, bytes) else p.nbytes
                                                         for e in entries for p in e)
    pieces = [_fields(model, 0, _GRAPH)]
    if model.HasField("graph"):
        pieces += [_length_delimited(_GRAPH), _varint(graph_size), graph_head]
        pieces += [p for e in entries for p in e]
        pieces.append(graph_tail)
    pieces.append(_fields(model, _GRAPH + 1, 1 << 29))
    total = 0
    for piece in pieces:
        out.write(piece)
        total += len(piece) if isinstance(piece, bytes) else piece.nbytes
    return total


# ------------------------------------------------------------------------------ onnxruntime

#: onnxruntime reads external data of a model given as bytes from this folder (memory-mapped).
_ORT_FOLDER = "session.model_external_initializers_file_folder_path"


class SessionWeights:
    """How one onnxruntime session gets the referenced weights: the ones read from a file are
    external data in that file (onnxruntime maps it: no copy in this process's memory); the others
    are external initializers (onnxruntime copies those into its own buffers when it creates the
    session).  Only files in one folder can be mapped per session (``folder``)."""

    def __init__(self):
        self.folder: str | None = None
        self.arrays: dict[str, np.ndarray] = {}

    def stub(self, tensor: onnx.TensorProto, index: int) -> onnx.TensorProto:
        """The external-data stub the session's model carries for reference ``tensor``."""
        import os

        stub = onnx.TensorProto()
        stub.CopyFrom(tensor)
        del stub.external_data[:]
        entries = _entries(tensor)
        store = _STORES.get(int(entries["location"][len(_LOCATION):]))
        source = store.sources.get(int(entries[_KEY])) if store is not None else None
        array = array_of(tensor)
        if source is not None and os.path.isfile(source[0]) and self.folder in (None, os.path.dirname(source[0])):
            self.folder = os.path.dirname(source[0])
            for key, value in (("location", os.path.basename(source[0])), ("offset", source[1]),
                               ("length", array.nbytes)):
                stub.external_data.add(key=key, value=str(value))
            return stub
        stub.external_data.add(key="location", value=f"edgeconv-in-memory:{index}")
        self.arrays[tensor.name] = _contiguous(array)
        return stub

    def configure(self, options) -> None:
        """Tell onnxruntime (``options``) where the mapped files are."""
        if self.folder is not None:
            options.add_session_config_entry(_ORT_FOLDER, self.folder)

    def apply(self, options) -> list:
        """Configure ``options``; returns the OrtValues the session reads (keep them alive)."""
        self.configure(options)
        if not self.arrays:
            return []
        import onnxruntime as ort

        values = [ort.OrtValue.ortvalue_from_numpy(a) for a in self.arrays.values()]
        options.add_external_initializers(list(self.arrays), values)
        return values


def onnxruntime_source(model: onnx.ModelProto, options):
    """What ``ort.InferenceSession(source, options)`` takes to run ``model``: its serialized
    bytes, the references given as mapped files or external initializers (:class:`SessionWeights`;
    the OrtValues are returned too: keep them alive as long as the session)."""
    if not has_references(model):
        return model.SerializeToString(), []
    shell = onnx.ModelProto()
    shell.CopyFrom(model)
    plan = SessionWeights()
    for index, tensor in enumerate(shell.graph.initializer):
        if is_reference(tensor):
            tensor.CopyFrom(plan.stub(tensor, index))
    return shell.SerializeToString(), plan.apply(options)


def _contiguous(array: np.ndarray) -> np.ndarray:
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 14: 8, 15: 16, 16: 2,
             17: 1, 18: 1, 19: 1, 20: 1}


def raw_nbytes(tensor) -> int:
    """``len(tensor.raw_data)`` without reading the field: protobuf hands out a *copy* of a bytes
    field, so summing ``len(t.raw_data)`` over a model copied all its weights (45 MB of
    page-faulted memory per call for a ResNet-18).  From the dims and the element size: what the
    values take (onnx's checker refuses raw data shorter than that; bytes past it are ignored by
    every reader), which is what the size thresholds that call this are about."""
    if not tensor.HasField("raw_data"):
        return 0
    itemsize = _ITEMSIZE.get(tensor.data_type)
    if itemsize is None:
        return len(tensor.raw_data)
    count = 1
    for d in tensor.dims:
        count *= d
    return count * itemsize


def copy_fields(source, target, skip=()) -> None:
    """Copy every set field of protobuf message ``source`` into ``target`` but those in ``skip``."""
    for descriptor, value in source.ListFields():
        if descriptor.name in skip:
            continue
        if _repeated(descriptor):
            getattr(target, descriptor.name).extend(value)
        elif descriptor.message_type is not None:
            getattr(target, descriptor.name).CopyFrom(value)
        else:
            setattr(target, descriptor.name, value)


def _repeated(descriptor) -> bool:
    # protobuf >= 6 has ``is_repeated``; older releases only the ``label``.
    if hasattr(descriptor, "is_repeated"):
        return descriptor.is_repeated
    return descriptor.label == descriptor.LABEL_REPEATED
