"""Keras -> TFLite int8 / Edge TPU without frontend artifacts (issue 31 item 3), on a small
functional Keras model shaped like the HED edge detector (convolutions, a side output resized
bilinearly to the input size, a channel concatenation, a 1x1 fusion and a sigmoid):

* its declared batch size survives the import (``batch_shape [1, 16, 16, 3]``);
* the layout Transpose tf2onnx puts after the NHWC input is judged supported on the Edge TPU
  (edgeconv's file has no TRANSPOSE for it);
* a Reshape to its own shape writes no RESHAPE;
* the int8 CONCATENATION's inputs carry its scale, so no int8 -> int8 QUANTIZE is written;
* the file has no more ops than TensorFlow's own full-integer converter writes for the model."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from converter.port import port

SIZE = 16


@pytest.fixture(scope="module")
def hed_like(tmp_path_factory):
    tf = pytest.importorskip("tensorflow")
    keras = tf.keras
    keras.utils.set_random_seed(0)
    image = keras.Input(batch_shape=(1, SIZE, SIZE, 3), name="image")
    c1 = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(image)
    side1 = keras.layers.Conv2D(1, 1)(c1)
    c2 = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(keras.layers.MaxPooling2D()(c1))
    side2 = keras.layers.Resizing(SIZE, SIZE, interpolation="bilinear")(keras.layers.Conv2D(1, 1)(c2))
    fused = keras.layers.Conv2D(1, 1)(keras.layers.Concatenate(axis=-1)([side1, side2]))
    model = keras.Model(image, keras.layers.Activation("sigmoid")(fused))
    folder = tmp_path_factory.mktemp("hedlike")
    path = folder / "hedlike.keras"
    model.save(str(path))
    rng = np.random.default_rng(0)
    calib = rng.uniform(-1, 1, (24, 1, SIZE, SIZE, 3)).astype(np.float32)
    np.savez(folder / "calib.npz", image=calib)
    np.savez(folder / "held.npz", image=rng.uniform(-1, 1, (8, 1, SIZE, SIZE, 3)).astype(np.float32))
    return path, folder, model, calib


def _ops(path) -> Counter:
    from ai_edge_litert.interpreter import Interpreter

    return Counter(d["op_name"] for d in Interpreter(model_path=str(path))._get_ops_details())


def test_keras_keeps_its_declared_batch_size(hed_like):
    from converter.frontend.load import load_model

    path, *_ = hed_like
    model = load_model(str(path))
    dims = [d.dim_value or d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, SIZE, SIZE, 3]


def test_keras_to_edgetpu_int8_has_no_frontend_artifacts(hed_like, tmp_path):
    import tensorflow as tf

    path, folder, model, calib = hed_like
    out = tmp_path / "out"
    result = port(str(path), to="tflite", hw="edgetpu", out=out, calibration=str(folder / "calib.npz"),
                  inputs=str(folder / "held.npz"))
    assert result.status == "ok", result.reason
    transposes = [v for v in result.report["check"]["verdicts"] if v["op"] == "Transpose"]
    assert len(transposes) == 1 and transposes[0]["status"] == "supported"
    # the resize is supported, and named as what the Edge TPU compiler may leave on the CPU
    (resize,) = result.report["plan"]["may_stay_on_cpu"]
    assert (resize["op"], resize["target"], resize["shapes"]) == ("Resize", "RESIZE_BILINEAR", "1x1x8x8 -> 1x1x16x16")
    assert resize["after"] == 4  # the Concat, the fusion Conv, the Sigmoid and the NHWC Transpose
    assert resize["source"].endswith("convert_model_for_Edge_TPU.md#L35-L36")
    cpu = port(str(path), to="tflite", hw="cpu", out=tmp_path / "cpu")
    assert cpu.status == "ok" and cpu.report["plan"]["may_stay_on_cpu"] == []
    ours = _ops(min(out.glob("*.tflite")))
    assert ours == Counter({"CONV_2D": 5, "MAX_POOL_2D": 1, "RESIZE_BILINEAR": 1, "CONCATENATION": 1, "LOGISTIC": 1})
    # TensorFlow's own full-integer file of the same Keras model: no fewer ops
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([x] for x in calib)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int8
    theirs_path = tmp_path / "tf.tflite"
    theirs_path.write_bytes(converter.convert())
    theirs = _ops(theirs_path)
    assert sum(ours.values()) <= sum(theirs.values())
    for op in ("QUANTIZE", "RESHAPE", "TRANSPOSE"):
        assert ours[op] <= theirs[op], (op, ours, theirs)


def test_concat_inputs_share_the_concat_range():
    from onnx import TensorProto, helper
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData

    from converter.quantize.ranges import share_concat_ranges

    nodes = [helper.make_node("Resize", ["a", "", "scales"], ["a_up"], mode="linear"),
             helper.make_node("Concat", ["a_up", "b"], ["c"], axis=1),
             helper.make_node("Relu", ["b"], ["b_relu"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "ab"],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("c", "b_relu")])
    model = helper.make_model(graph)

    def td(lo, hi):
        return TensorData(lowest=np.array(lo, np.float32), highest=np.array(hi, np.float32))

    ranges = TensorsData(CalibrationMethod.MinMax, {"a": td(-1, 1), "a_up": td(-1, 1), "b": td(0, 4), "c": td(-1, 4),
                                                    "b_relu": td(0, 4)})
    shared = share_concat_ranges(model, ranges).data
    assert [float(v) for v in shared["a_up"].range_value] == [-1.0, 4.0]  # the Concat's alone: its range
    assert [float(v) for v in shared["a"].range_value] == [-1.0, 4.0]  # through the Resize behind it
    assert [float(v) for v in shared["b"].range_value] == [0.0, 4.0]  # read by the Relu too: kept
