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

from .errors import BadInput
from .fsutil import quiet_native_stderr

_OPSET = 17


def convert_tf(path: Path, input_shapes: dict[str, tuple[int, ...]]) -> onnx.ModelProto:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sink = io.StringIO()
    # TensorFlow writes from C++ straight to fd 2: Python-level redirection alone misses it.
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), quiet_native_stderr():
        import tensorflow as tf  # noqa: PLC0415
        import tf2onnx  # noqa: PLC0415

        tf.get_logger().setLevel("ERROR")
        suffix = path.suffix.lower()
        try:
            if path.is_dir():
                model = _saved_model(tf2onnx, path)
            elif suffix in (".keras", ".h5"):
                model = _keras(tf, tf2onnx, path, input_shapes)
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


def _keras(tf, tf2onnx, path: Path, input_shapes):
    # safe_mode (the default) refuses Lambda layers that would run code from the file.
    keras_model = tf.keras.models.load_model(str(path), compile=False)
    signature = None
    if input_shapes:
        specs = []
        for inp in keras_model.inputs:
            name = inp.name.split(":")[0]
            shape = input_shapes.get(name) or (input_shapes.get("") if inp is keras_model.inputs[0] else None)
            specs.append(tf.TensorSpec(shape if shape else inp.shape, inp.dtype, name=name))
        signature = tuple(specs)
    model, _ = tf2onnx.convert.from_keras(keras_model, input_signature=signature, opset=_OPSET)
    return model


def _saved_model(tf2onnx, path: Path):
    from tf2onnx import tf_loader  # noqa: PLC0415

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
    consumed = {i.split(":")[0].lstrip("^") for n in graph_def.node for i in n.input}
    inputs = [f"{n.name}:0" for n in graph_def.node if n.op == "Placeholder"]
    outputs = [f"{n.name}:0" for n in graph_def.node
               if n.name not in consumed and n.op not in ("Const", "NoOp", "Assert", "Placeholder")]
    if not inputs or not outputs:
        raise BadInput(f"{path}: cannot find the graph's inputs (Placeholder) and outputs")
    model, _ = tf2onnx.convert.from_graph_def(graph_def, input_names=inputs, output_names=outputs, opset=_OPSET)
    return model
