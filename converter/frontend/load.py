"""Read any supported model file and return an ONNX model (not yet normalized).

One function per source kind; :func:`load_model` picks by file type and turns every failure into
one :class:`~converter.errors.BadInput` line.  torch and tensorflow are imported only here, and only
for their own file kinds.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import tempfile
import warnings
import zipfile
from pathlib import Path

import onnx

from ..errors import BadInput, MissingExtra
from ..infra.fsutil import regular_file, remember_sha256
from .declared_inputs import integer_role, keyed_by_model
from .pickle_guard import refuse_unsafe_pickles
from ..ir.onnx_file import save_onnx, write_with_external_weights  # noqa: F401  (part of this module's API)

from .source_kinds import EXPORTED_PROGRAM_SUFFIXES, ONNX_SUFFIXES, SUPPORTED, TF_SUFFIXES, TORCHSCRIPT_SUFFIXES

# The TorchScript-based exporter's opset; the dynamo exporter (ExportedPrograms, live modules)
# writes torch's default opset (20 in torch 2.13).  normalize() brings either to CANONICAL_OPSET
# (converter/frontend/opsets).
_TORCH_EXPORT_OPSET = 17


def load_model(
    path: str | os.PathLike,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    trust_pickle: bool = False,
    timeout: float | None = None,
    meanwhile=(),
    store=None,
    sha256: bool = False,
    input_dtypes: dict[str, str] | None = None,
) -> onnx.ModelProto:
    """Load ``path`` as ONNX.  ``input_shapes`` fixes shapes (required for TorchScript);
    ``input_dtypes`` (numpy type names by input) are what TorchScript is traced with (float32
    where not given; :mod:`converter.frontend.declared_inputs`).
    ``sha256``: the caller will want the file's digest (:func:`converter.infra.fsutil.sha256_file`):
    an ``.onnx`` file is hashed from the bytes read here.

    torch and TensorFlow sources run user code or a converter (TorchScript ``forward``, tracing,
    export; tf2onnx): that runs in a child process stopped after ``timeout`` seconds (default :data:`converter.infra.limits.DEFAULT_TIMEOUT`;
    ``0``: no limit, in this process); this process runs the ``meanwhile`` steps while it waits."""
    path = Path(path)
    if not path.exists():
        raise BadInput(f"{path}: no such file or directory")
    if path.is_dir():
        for name in ("saved_model.pb", "saved_model.pbtxt"):
            if (path / name).exists() or (path / name).is_symlink():
                regular_file(path / name, "SavedModel's graph")
                return load_tf(path, input_shapes, trust_pickle, timeout, meanwhile)
        raise BadInput(f"{path}: a directory, but not a TF SavedModel (no saved_model.pb inside)")
    regular_file(path, "model")  # a FIFO or a device would block or never end
    suffix = path.suffix.lower()
    if suffix in ONNX_SUFFIXES:
        return load_onnx(path, store, sha256)
    if suffix in TORCHSCRIPT_SUFFIXES | EXPORTED_PROGRAM_SUFFIXES:
        from .isolate import DEFAULT_TIMEOUT, run_models

        if not zipfile.is_zipfile(path):
            kind = "an ExportedProgram archive" if suffix in EXPORTED_PROGRAM_SUFFIXES else \
                "a TorchScript archive or torch.save file"
            raise BadInput(f"{path}: not {kind} (not a zip archive)")
        if importlib.util.find_spec("torch") is None:
            raise MissingExtra("torch", "loading PyTorch files")
        # Before torch reads anything: no pickle in the archive may name a callable we do not know.
        if suffix in EXPORTED_PROGRAM_SUFFIXES:
            refuse_unsafe_pickles(path, "ExportedProgram archive", trust_pickle)
            loader, args = load_exported_program, (path,)
        else:
            if _is_torchscript_archive(path):
                refuse_unsafe_pickles(path, "TorchScript archive", trust_pickle, torchscript=True)
            elif not trust_pickle and _pickles_code(path):
                raise BadInput(_PICKLED_MODULE.format(path=path))
            loader, args = load_torch, (path, input_shapes, trust_pickle, True, input_dtypes)
        limit = DEFAULT_TIMEOUT if timeout is None else timeout
        return run_models(loader, args, limit, f"{path.name}: loading and exporting the torch model",
                          meanwhile)[0]
    if suffix in TF_SUFFIXES:
        return load_tf(path, input_shapes, trust_pickle, timeout, meanwhile)
    raise BadInput(f"{path}: unrecognized model file extension '{path.suffix}'; edgeconv reads {SUPPORTED}")


# --------------------------------------------------------------------------------------- ONNX


def all_tensors(model: onnx.ModelProto):
    """Every TensorProto of ``model``: initializers and tensor attributes, of subgraphs and
    local functions too (the tensors onnx's external-data helper walks)."""

    def of_nodes(nodes):
        for node in nodes:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors
                if attr.HasField("g"):
                    yield from of_graph(attr.g)
                for graph in attr.graphs:
                    yield from of_graph(graph)

    def of_graph(graph):
        yield from graph.initializer
        yield from of_nodes(graph.node)

    yield from of_graph(model.graph)
    for function in model.functions:
        yield from of_nodes(function.node)


def load_onnx(path: Path, store=None, sha256: bool = False) -> onnx.ModelProto:
    """The model at ``path`` with its external data; with a :class:`~converter.ir.weights.WeightStore`,
    big external tensors are read straight into arrays the store holds (the model refers to them).

    The file is read once: its bytes are parsed and checked, and with ``sha256`` hashed in a
    thread meanwhile (:func:`converter.infra.fsutil.sha256_file` then finds the digest: the report's
    ``model_sha256``)."""
    from onnx import external_data_helper as ext

    if zipfile.is_zipfile(path):
        raise BadInput(f"{path}: not an ONNX file (it is a zip archive, like a torch .pt file)")
    data = b""
    try:
        with open(path, "rb") as f:
            status = os.fstat(f.fileno())
            data = f.read()
        if sha256:
            remember_sha256(path, status, data)
        model = onnx.load(_ReadOnce(path, data), load_external_data=False)
        external = any(ext.uses_external_data(t) for t in all_tensors(model))
        if external:
            _external_files_are_regular(model, Path(path).parent)
            if store is None:
                ext.load_external_data_for_model(model, os.path.dirname(os.path.abspath(path)))
            else:
                _load_external_data(model, Path(path).parent, store)
    except Exception as err:
        raise BadInput(f"{path}: not a valid ONNX model ({_one_line(err) or 'protobuf parse failed'})") from None
    if not model.graph.node and not model.graph.output:
        raise BadInput(f"{path}: not a valid ONNX model (empty or truncated graph)")
    _lower_ir_version(model)
    try:
        # The bytes already read: checking the loaded model would first serialize it again (one
        # more copy of every weight, 0.07 s per 45 MB), the path would read and parse the file
        # again.  External data is checked against the model's directory: those take the path.
        if external or len(data) > onnx.checker.MAXIMUM_PROTOBUF or not _binary_format(path):
            onnx.checker.check_model(str(path))
        else:
            onnx.checker.check_model(data)
    except Exception as err:
        text = _one_line(err)
        if "topologically sorted" in text:
            raise BadInput(f"{path}: the graph has a cycle or is not topologically sorted ({text.split(',')[0]})") from None
        raise BadInput(f"{path}: invalid ONNX model: {text}") from None
    return model


class _ReadOnce:
    """The bytes of a file already read, as ``onnx.load`` takes a file object: its ``name``
    picks the format (by extension) as the path itself would."""

    def __init__(self, path, data: bytes):
        self.name, self._data = str(path), data

    def read(self) -> bytes:
        return self._data


def _binary_format(path) -> bool:
    """Whether onnx reads ``path`` as binary protobuf (not one of its text formats)."""
    from onnx import serialization

    fmt = serialization.registry.get_format_from_file_extension(os.path.splitext(str(path))[1])
    return fmt in (None, "protobuf")


def _external_files_are_regular(model: onnx.ModelProto, base_dir: Path) -> None:
    """Each external data file a tensor names is a regular file (a FIFO would block the read);
    onnx's own loader checks the rest (paths outside the model's directory)."""
    from onnx import external_data_helper as ext

    for tensor in all_tensors(model):
        if ext.uses_external_data(tensor):
            location = ext.ExternalDataInfo(tensor).location
            candidate = base_dir / location
            if location and (candidate.exists() or candidate.is_symlink()) and candidate.resolve().is_relative_to(
                    base_dir.resolve()):
                regular_file(candidate, "model's external data file")


def _load_external_data(model: onnx.ModelProto, base_dir: Path, store) -> None:
    """onnx's external-data loading, except that big top-level initializers are read into arrays
    held by ``store`` (one copy; onnx's loader reads bytes, then copies them into the proto)."""
    import numpy as np
    from onnx import external_data_helper as ext

    from ..ir import weights

    top = {id(t) for t in model.graph.initializer}
    # onnx's own opener: its checks that the file lies inside the model's directory (no "..",
    # absolute paths or symlinks out of it); without it, onnx's reader for every tensor
    opener = getattr(ext, "_open_external_data_fd", None)
    for tensor in all_tensors(model):
        if not ext.uses_external_data(tensor):
            continue
        info = ext.ExternalDataInfo(tensor)
        count = int(np.prod(tensor.dims, dtype=np.int64))
        dtype = None if tensor.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED,
                                             onnx.TensorProto.BFLOAT16) else \
            np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
        nbytes = count * dtype.itemsize if dtype is not None else 0
        if (opener is None or id(tensor) not in top or dtype is None or dtype.kind not in "fiub"
                or nbytes < weights.MIN_BYTES or (info.length is not None and int(info.length) != nbytes)):
            ext.load_external_data_for_tensor(tensor, str(base_dir))  # its checks, its errors
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]
            continue
        offset = int(info.offset or 0)
        with os.fdopen(opener(str(base_dir), info.location, tensor.name, True), "rb") as f:
            if os.fstat(f.fileno()).st_size < offset + nbytes:
                raise ValueError(f"external data of tensor {tensor.name!r} ({nbytes} bytes from offset {offset}) "
                                 "runs past the end of its file")
            f.seek(offset)
            array = np.fromfile(f, dtype=dtype, count=count)
            path = os.path.realpath(f"/proc/self/fd/{f.fileno()}") if os.path.exists("/proc/self/fd") else \
                str((base_dir / info.location).resolve())
        tensor.data_location = onnx.TensorProto.DEFAULT  # as onnx's loader leaves it
        weights.refer(tensor, store, array.reshape(tuple(tensor.dims)), (path, offset))


#: The newest ONNX IR version onnxruntime 1.2x-1.3x reads.
ORT_MAX_IR_VERSION = 10


def _lower_ir_version(model: onnx.ModelProto) -> None:
    """onnx.helper stamps new models with its own newest IR version, which onnxruntime may not
    read yet; the opsets a model imports say which IR version it really needs."""
    if model.ir_version <= ORT_MAX_IR_VERSION:
        return
    try:
        needed = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    except Exception:  # noqa: BLE001 - an opset onnx does not know: leave the model alone
        return
    model.ir_version = max(needed, min(model.ir_version, ORT_MAX_IR_VERSION))


# -------------------------------------------------------------------------------------- torch


def _torch():
    if importlib.util.find_spec("torch") is None:
        raise MissingExtra("torch", "loading PyTorch files")
    import torch

    return torch


def _is_torchscript_archive(path: Path) -> bool:
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    return any(n.endswith("constants.pkl") or "/code/" in n for n in names)


_PICKLED_MODULE = ("{path}: a pickled Python object (torch.save of a module); loading it runs arbitrary code. "
                   "Save it with torch.jit.save or torch.export.save, or pass --trust-pickle if you trust the file")


def _pickles_code(path: Path) -> bool:
    """A torch.save file whose pickle names callables beyond tensors: refused without starting
    torch (the same answer ``torch.load(weights_only=True)`` gives, but before any child runs)."""
    from .pickle_guard import unsafe_pickles

    try:
        return any(" calls " in problem for problem in unsafe_pickles(path))
    except Exception:  # noqa: BLE001 - unreadable here: torch's own reader decides
        return False


def load_torch(path: Path, input_shapes, trust_pickle: bool, as_file: bool = False, input_dtypes=None):
    """The torch file as ONNX: a ``ModelProto``, or with ``as_file`` (the isolated child) the
    exporter's own file as an :class:`OnnxFile` when it needs no changes, so the child hands it
    over without parsing and re-serializing 45 MB of weights."""
    if not zipfile.is_zipfile(path):
        raise BadInput(f"{path}: not a TorchScript archive or torch.save file (not a zip archive)")
    torch = _torch()
    if _is_torchscript_archive(path):
        try:
            with _quiet_logging():
                module = torch.jit.load(str(path), map_location="cpu")
        except Exception as err:
            raise BadInput(f"{path}: cannot load TorchScript archive: {_one_line(err)}") from None
        names = [a.name for a in module.forward.schema.arguments[1:]]
        return _export_torch_module(torch, module, names, input_shapes, path, as_file, input_dtypes)
    # A torch.save() pickle.  weights_only=True refuses anything but tensors and containers.
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception:
        obj = None
        if not trust_pickle:
            raise BadInput(_PICKLED_MODULE.format(path=path)) from None
    if obj is not None:
        raise BadInput(f"{path}: holds only weights (a state_dict), not a model; save it with torch.jit.save or torch.export.save")
    try:
        module = torch.load(str(path), map_location="cpu", weights_only=False)
    except Exception as err:
        raise BadInput(f"{path}: cannot unpickle: {_one_line(err)}") from None
    if not isinstance(module, torch.nn.Module):
        raise BadInput(f"{path}: the pickle holds a {type(module).__name__}, not a torch.nn.Module")
    import inspect

    names = [p for p in inspect.signature(module.forward).parameters]
    return _export_torch_module(torch, module.eval(), names, input_shapes, path, as_file, input_dtypes)


def _export_torch_module(torch, module, arg_names, input_shapes, path, as_file: bool = False, input_dtypes=None):
    if ("" in (input_shapes or {}) or "" in (input_dtypes or {})) and not arg_names:
        raise BadInput(f"{path}: the model takes no inputs")
    shapes = keyed_by_model(input_shapes or {}, arg_names)
    dtypes = keyed_by_model(input_dtypes or {}, arg_names)
    missing = [n for n in arg_names if n not in shapes]
    unknown = [n for n in [*shapes, *dtypes] if n not in arg_names]
    if unknown:
        raise BadInput(f"--input-shape names {', '.join(unknown)}; the model's inputs are: {', '.join(arg_names)}")
    if missing:
        raise BadInput(
            f"{path}: torch files carry no input shapes; pass --input-shape for "
            + ", ".join(f"{n}=1x3x224x224" for n in missing)
        )
    args = tuple(_example_tensor(torch, n, shapes[n], dtypes.get(n, "float32")) for n in arg_names)
    try:
        return _export(torch, module, args, arg_names, path, dynamo=False, as_file=as_file)
    except BadInput as first:
        if not isinstance(module, torch.jit.ScriptModule):
            raise BadInput(f"{first}{_dtype_hint(first, arg_names, dtypes)}") from None
        # The TorchScript exporter has no symbolic for some ops a trace records (the fused
        # attention of nn.MultiheadAttention's inference fast path), and loses ranks through
        # others; the same graph as an ExportedProgram goes through the dynamo exporter.
        try:
            return _export_torchscript_as_program(torch, module, args, arg_names, path)
        except BadInput as second:
            raise BadInput(f"{first}; as an ExportedProgram: {str(second).split(': ', 1)[-1]}"
                           f"{_dtype_hint(second, arg_names, dtypes)}") from None


def _dtype_hint(err: BadInput, arg_names, dtypes) -> str:
    """What to do when torch refused float inputs where it wanted integers (token ids fed to an
    embedding): name the undeclared inputs and the flag."""
    text = str(err)
    undeclared = [n for n in arg_names if n not in dtypes]
    if not undeclared or not any(word in text for word in ("scalar type", "Long", "Int;")):
        return ""
    return (f"; inputs without a declared type are traced as float32: declare integer ones (token ids, "
            f"masks) as -s {undeclared[0]}=SHAPE:int64")


def _example_tensor(torch, name: str, shape, dtype: str):
    """What the exporter traces input ``name`` with: zeros of its type (index 0 is a valid token
    id, position and token type), ones for an integer or bool input whose name says mask (a
    mask of zeros hides every position)."""
    kind = getattr(torch, dtype)
    if kind is not torch.float32 and kind is not torch.float16 and integer_role(name) == "mask":
        return torch.ones(shape, dtype=kind)
    return torch.zeros(shape, dtype=kind)


def _export_torchscript_as_program(torch, module, args, arg_names, path) -> onnx.ModelProto:
    """The loader's second route for TorchScript: convert the scripted graph to an
    ExportedProgram with the given input shapes (``torch._export.converter``), decompose the ops
    the ONNX exporter has no translation for (:func:`_fused_op_decompositions`), and export that
    with the dynamo exporter."""
    sink = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), \
                _quiet_logging():
            warnings.simplefilter("ignore")
            from torch._export.converter import TS2EPConverter

            program = TS2EPConverter(module, args).convert()
            program = program.run_decompositions(_fused_op_decompositions(torch))
    except Exception as err:
        raise BadInput(f"{path}: TorchScript to ExportedProgram failed: {_one_line(err)}") from None
    model = _export(torch, program, args, arg_names, path, dynamo=True)
    return name_interface(model, arg_names, _output_names(torch, module, args))


def name_interface(model: onnx.ModelProto, input_names, output_names) -> onnx.ModelProto:
    """Name the graph inputs (initializers aside) and, unless ``output_names`` is None, the
    outputs of a dynamo export as the TorchScript route does: inputs after the module's
    arguments, outputs ``output`` or ``output_0``, ``output_1``, ... (the dynamo exporter names
    them after the values they are: ``log_softmax``)."""
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    output_names = list(output_names) if output_names is not None else [o.name for o in model.graph.output]
    renames = {}
    if len(inputs) == len(input_names):
        renames.update({i.name: n for i, n in zip(inputs, input_names)})
    if len(output_names) == len(model.graph.output):
        renames.update({o.name: n for o, n in zip(model.graph.output, output_names)})
    for node in model.graph.node:
        node.input[:] = [renames.get(i, i) for i in node.input]
        node.output[:] = [renames.get(o, o) for o in node.output]
    for value in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        value.name = renames.get(value.name, value.name)
    return model


def plain_output_names(count: int) -> list[str]:
    return ["output"] if count == 1 else [f"output_{i}" for i in range(count)]


def _fused_op_decompositions(torch) -> dict:
    """Decompositions for fused inference kernels that TorchScript traces record and no ONNX
    exporter translates: ``aten::_native_multi_head_attention`` (nn.MultiheadAttention's fast
    path in eval mode under no_grad: torchvision's ViT, timm's blocks built on it)."""
    aten = torch.ops.aten

    def native_mha(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
                   mask=None, need_weights=True, average_attn_weights=True, mask_type=None):
        # aten/src/ATen/native/transformers/attention.cpp: batch-first [B, L, E] inputs, the
        # packed in-projection [3E, E], scaled dot product per head, the out-projection.
        # Slices, not chunk(): chunk exports as an opset-18 Split that has no down-converter.
        e = int(embed_dim)
        w_q, w_k, w_v = qkv_weight[:e], qkv_weight[e:2 * e], qkv_weight[2 * e:]
        b_q, b_k, b_v = (None, None, None) if qkv_bias is None else (qkv_bias[:e], qkv_bias[e:2 * e], qkv_bias[2 * e:])
        heads, dim = int(num_head), e // int(num_head)

        def split(x, w, b):
            y = torch.nn.functional.linear(x, w, b)
            return y.reshape(y.shape[0], y.shape[1], heads, dim).transpose(1, 2)

        q, k, v = split(query, w_q, b_q), split(key, w_k, b_k), split(value, w_v, b_v)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (dim ** -0.5)
        if mask is not None:
            if mask_type == 1:  # key padding mask [B, S]
                mask = mask.reshape(mask.shape[0], 1, 1, mask.shape[-1])
            scores = scores.masked_fill(mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        weights = torch.softmax(scores, -1)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(query.shape[0], query.shape[1], int(embed_dim))
        out = torch.nn.functional.linear(out, proj_weight, proj_bias)
        if not need_weights:
            return out, out.new_empty(0)
        return out, weights.mean(1) if average_attn_weights else weights

    return {aten._native_multi_head_attention.default: native_mha}


def load_exported_program(path: Path) -> onnx.ModelProto:
    if not zipfile.is_zipfile(path):
        raise BadInput(f"{path}: not an ExportedProgram archive (not a zip archive)")
    torch = _torch()
    try:
        with _quiet_logging():  # torch logs a traceback as warnings before it raises
            program = torch.export.load(str(path))
    except Exception as err:
        raise BadInput(f"{path}: cannot load ExportedProgram: {_one_line(err)}") from None
    names = [s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    return _export(torch, program, (), names, path, dynamo=True)


class OnnxFile:
    """An ONNX file (and any external-data files beside it) alone in a private directory,
    owned by whoever receives it: :meth:`load` or :meth:`move_to`, then the directory is gone."""

    def __init__(self, directory: Path, name: str):
        self.directory, self.name = Path(directory), name

    def load(self) -> onnx.ModelProto:
        try:
            return onnx.load(str(self.directory / self.name), load_external_data=True)
        finally:
            self.discard()

    def move_to(self, dest: Path, name: str) -> None:
        """Move the model to ``dest / name``; its external-data files keep their names."""
        for entry in self.directory.iterdir():
            os.replace(entry, dest / (name if entry.name == self.name else entry.name))
        self.discard()

    def discard(self) -> None:
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)


def _export(torch, module, args, input_names, path, dynamo: bool, as_file: bool = False):
    """``torch.onnx.export`` -> ModelProto (or, ``as_file``, the :class:`OnnxFile` it wrote)."""
    tmp = Path(tempfile.mkdtemp(prefix="edgeconv-export-"))
    out = tmp / "model.onnx"
    sink = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), \
                _quiet_logging():
            warnings.simplefilter("ignore")
            if dynamo:
                program = torch.onnx.export(module, args, dynamo=True, verbose=False)
                program.save(str(out))
            else:
                # The exporter runs a ScriptModule once for its output shapes: without autograd
                # and without the JIT's profiling and optimizing runs (nothing runs it again).
                with torch.no_grad(), torch.jit.optimized_execution(False):
                    torch.onnx.export(module, args, str(out), dynamo=False, opset_version=_TORCH_EXPORT_OPSET,
                                      input_names=list(input_names),
                                      output_names=_output_names(torch, module, args))
    except Exception as err:
        OnnxFile(tmp, out.name).discard()
        raise BadInput(f"{path}: torch.onnx.export failed: {_one_line(err)}") from None
    except BaseException:
        OnnxFile(tmp, out.name).discard()
        raise
    result = OnnxFile(tmp, out.name)
    return result if as_file else result.load()


def _output_names(torch, module, args) -> list[str]:
    """``output``, or ``output_0``, ``output_1``, ...: TorchScript keeps no output names, and the
    TorchScript-based exporter would otherwise number them after internal values ("68")."""
    count = _scripted_output_count(module)
    if count is not None:  # the signature says it: no need to run the model (0.5 s for a ResNet-18)
        return plain_output_names(count)
    with torch.no_grad():
        result = module(*args)
    return plain_output_names(len(torch.utils._pytree.tree_leaves(result)))


def _scripted_output_count(module) -> int | None:
    """How many tensors a TorchScript module's ``forward`` returns, from its schema (tensors and
    nested tuples of them); None when the schema cannot say (lists, dicts, not scripted)."""
    try:
        returns = module.forward.schema.returns
    except Exception:  # noqa: BLE001 - not a ScriptModule: run it instead
        return None

    def leaves(t):
        if t.kind() == "TensorType":
            return 1
        if t.kind() == "TupleType":
            counts = [leaves(e) for e in t.elements()]
            return None if None in counts else sum(counts)
        return None

    counts = [leaves(r.type) for r in returns]
    return None if not counts or None in counts else sum(counts)


@contextlib.contextmanager
def _quiet_logging():
    import logging

    prior = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(prior)


# ----------------------------------------------------------------------------------------- TF


def load_tf(path: Path, input_shapes=None, trust_pickle: bool = False, timeout: float | None = None,
            meanwhile=()) -> onnx.ModelProto:
    """A TensorFlow source through tf2onnx, in a child process stopped after ``timeout`` seconds
    (as torch sources are: a huge or adversarial graph must not hang the port); ``0``: here."""
    if importlib.util.find_spec("tf2onnx") is None or importlib.util.find_spec("tensorflow") is None:
        raise MissingExtra("tf", f"{path.name}: converting TensorFlow models")
    from .isolate import DEFAULT_TIMEOUT, run_models
    from .load_tf import convert_tf

    limit = DEFAULT_TIMEOUT if timeout is None else timeout
    return run_models(convert_tf, (path, input_shapes or {}, trust_pickle), limit,
                      f"{path.name}: converting the TensorFlow model", meanwhile)[0]


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__
