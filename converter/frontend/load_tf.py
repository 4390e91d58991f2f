"""TensorFlow sources through tf2onnx: SavedModel, frozen .pb, Keras .keras/.h5, .tflite.

Imported only when such a file is loaded (the ``tf`` extra).  TensorFlow's own log noise is
silenced so that a failure is still one line.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import onnx

from ..errors import BadInput
from ..infra.fsutil import quiet_native_stderr

_OPSET = 17


def convert_tf(path: Path, input_shapes: dict[str, tuple[int, ...]], trust_pickle: bool = False) -> onnx.ModelProto:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if not trust_pickle:  # before TensorFlow or Keras reads the file
        if path.suffix.lower() in (".keras", ".h5") and not path.is_dir():
            refuse_keras_code(path)
    sink = io.StringIO()
    # TensorFlow writes from C++ straight to fd 2: Python-level redirection alone misses it.
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), quiet_native_stderr():
        import tensorflow as tf
        import tf2onnx

        tf.get_logger().setLevel("ERROR")
        suffix = path.suffix.lower()
        try:
            if path.is_dir():
                if not trust_pickle:
                    refuse_code_ops(path, _saved_model_graphs(path))
                model = _saved_model(tf2onnx, path)
            elif suffix in (".keras", ".h5"):
                model = _keras(tf, tf2onnx, path, input_shapes, safe_mode=not trust_pickle)
            elif suffix == ".tflite":
                model, _ = tf2onnx.convert.from_tflite(str(path), opset=_OPSET)
            else:
                model = _frozen_graph(tf, tf2onnx, path)
        except BadInput:
            raise
        except Exception as err:  # tf raises many types; the user needs one line
            text = str(err).strip().splitlines()
            raise BadInput(f"{path}: TensorFlow conversion failed: {text[0][:300] if text else type(err).__name__}") from None
    return model


def _keras(tf, tf2onnx, path: Path, input_shapes, safe_mode: bool = True):
    # safe_mode refuses Lambda layers that would run code from the file.
    keras_model = tf.keras.models.load_model(str(path), compile=False, safe_mode=safe_mode)
    # Always a signature of the inputs' declared shapes: without one tf2onnx makes the batch axis
    # dynamic even when the model declares it (batch_shape [1, 192, 192, 3] -> 'unk__159').
    specs = []
    for inp in keras_model.inputs:
        name = inp.name.split(":")[0]
        shape = (input_shapes or {}).get(name) or ((input_shapes or {}).get("") if inp is keras_model.inputs[0] else None)
        specs.append(tf.TensorSpec(shape if shape else inp.shape, inp.dtype, name=name))
    model, _ = tf2onnx.convert.from_keras(keras_model, input_signature=tuple(specs), opset=_OPSET)
    return model


def _saved_model(tf2onnx, path: Path):
    from tf2onnx import tf_loader

    graph_def, inputs, outputs = tf_loader.from_saved_model(str(path), None, None, tag=None, signatures=None)
    model, _ = tf2onnx.convert.from_graph_def(graph_def, input_names=inputs, output_names=outputs, opset=_OPSET)
    return model


def _frozen_graph(tf, tf2onnx, path: Path):
    graph_def = tf.compat.v1.GraphDef()
    try:
        graph_def.ParseFromString(path.read_bytes())
    except Exception:
        raise BadInput(f"{path}: not a frozen TensorFlow GraphDef (protobuf parse failed)") from None
    if not graph_def.node:
        raise BadInput(f"{path}: not a frozen TensorFlow GraphDef (no nodes)")
    refuse_code_ops(path, [graph_def])
    consumed = {i.split(":")[0].lstrip("^") for n in graph_def.node for i in n.input}
    inputs = [f"{n.name}:0" for n in graph_def.node if n.op == "Placeholder"]
    outputs = [f"{n.name}:0" for n in graph_def.node
               if n.name not in consumed and n.op not in ("Const", "NoOp", "Assert", "Placeholder")]
    if not inputs or not outputs:
        raise BadInput(f"{path}: cannot find the graph's inputs (Placeholder) and outputs")
    model, _ = tf2onnx.convert.from_graph_def(graph_def, input_names=inputs, output_names=outputs, opset=_OPSET)
    return model


# ------------------------------------------------------------------ code inside TF/Keras files

#: Ops that run Python or touch files when TensorFlow executes a graph (a SavedModel's init and
#: restore functions run while it loads).  edgeconv only traces graphs; none of these belongs in
#: an inference model.
CODE_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc", "WriteFile", "DeleteFile", "ImmutableConst",
            "WriteSummary", "WriteScalarSummary", "WriteRawProtoSummary", "CreateSummaryFileWriter",
            "RecursivelyCreateDir", "SaveSlices"}


def _saved_model_graphs(path: Path) -> list:
    from tensorflow.core.protobuf import saved_model_pb2  #  (protobuf classes only)

    proto = saved_model_pb2.SavedModel()
    pb = path / "saved_model.pb"
    if not pb.exists():
        return []
    try:
        proto.ParseFromString(pb.read_bytes())
    except Exception:  # noqa: BLE001
        raise BadInput(f"{path}: not a TensorFlow SavedModel (saved_model.pb does not parse)") from None
    return [meta.graph_def for meta in proto.meta_graphs]


def refuse_code_ops(path: Path, graphs: list) -> None:
    """BadInput naming the first op that would run Python code or write files, unless trusted."""
    for graph in graphs:
        nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
        for node in nodes:
            if node.op in CODE_OPS:
                raise BadInput(f"{path}: node '{node.name}' ({node.op}) runs Python code or touches files when "
                               "TensorFlow loads or runs the graph; edgeconv refuses it. Pass "
                               "--trust-pickle only if you trust the file")


def refuse_keras_code(path: Path) -> None:
    """Keras files carry code two ways: Lambda layers (marshalled Python bytecode) and layer
    configs naming any importable module.  Both are refused before Keras reads the file."""
    import json
    import zipfile

    config = None
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                if "config.json" in zf.namelist():
                    config = json.loads(zf.read("config.json"))
        else:
            import h5py

            with h5py.File(path, "r") as f:
                raw = f.attrs.get("model_config")
                if raw is not None:
                    config = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    except Exception as err:  # noqa: BLE001 - a damaged file: one line
        text = str(err).strip().splitlines()
        raise BadInput(f"{path}: not a readable Keras file ({text[0][:200] if text else type(err).__name__})") from None
    if config is None:
        raise BadInput(f"{path}: not a Keras model file (no model configuration inside)")
    problem = _keras_code(config)
    if problem:
        raise BadInput(f"{path}: {problem}, which runs code from the file when loaded; edgeconv refuses it. "
                       "Pass --trust-pickle only if you trust the file")


_KERAS_MODULES = ("keras", "tensorflow", "tf_keras", "builtins")


def _keras_code(node, depth: int = 0) -> str | None:
    if depth > 200:
        return "a model configuration nested over 200 levels deep"
    if isinstance(node, dict):
        if node.get("class_name") in ("Lambda", "__lambda__") and "config" in node:
            return f"a {node['class_name']} layer"
        module = node.get("module")
        if isinstance(module, str) and module and module.split(".")[0] not in _KERAS_MODULES:
            return f"a layer configuration naming the Python module '{module}'"
        for value in node.values():
            found = _keras_code(value, depth + 1)
            if found:
                return found
    elif isinstance(node, list):
        for value in node:
            found = _keras_code(value, depth + 1)
            if found:
                return found
    return None
