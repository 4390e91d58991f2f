"""Quantized inputs (issue 29 item 4): a QDQ ONNX model (onnxruntime's quantizer, NNCF, a QAT
export) or an int8 ``.tflite`` keeps its own scales and zero points in every int8 export, without
``--calibration`` (converter/frontend/prequantized.py, converter/quantize/given.py).

The files are compared with the input byte for byte (every int8 tensor's float32 scales and zero
points, every weight's integers) and run by their runtimes against the input QDQ model itself,
which they compute the same integers as."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.errors import BadInput
from converter.frontend.prequantized import dequantize_input, given_quantization
from converter.port import port

SHAPE = (1, 3, 32, 32)


def _qdq_model(zoo_onnx_path, tmp_path, symmetric: bool = False, name: str = "resnet"):
    """The zoo model quantized by onnxruntime's own quantize_static (QDQ, per-channel int8)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(0)
    samples = [{"input": rng.standard_normal(SHAPE).astype(np.float32)} for _ in range(16)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)

    out = tmp_path / f"{name}-qdq.onnx"
    quantize_static(str(zoo_onnx_path(name)), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": symmetric})
    held = tmp_path / "held.npz"
    np.savez(held, input=rng.standard_normal((8, *SHAPE)).astype(np.float32))
    return out, held


def _input_params(path) -> tuple[set, list[np.ndarray]]:
    """{(scale bytes, zero point bytes)} of the model's int8 Q/DQ nodes, and its int8 weights."""
    model = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    params, weights = set(), []
    for node in model.graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        zero = inits[node.input[2]]
        if zero.dtype == np.int32:
            continue
        params.add((inits[node.input[1]].astype(np.float32).tobytes(), zero.astype(np.int64).tobytes()))
        if node.op_type == "DequantizeLinear" and node.input[0] in inits:
            weights.append(inits[node.input[0]])
    return params, weights


def _file_params(path) -> set:
    """{(scale bytes, zero point bytes)} of the .tflite's int8 tensors."""
    from ai_edge_litert.interpreter import Interpreter

    return {(np.asarray(d["quantization_parameters"]["scales"], np.float32).tobytes(),
             np.asarray(d["quantization_parameters"]["zero_points"]).astype(np.int64).tobytes())
            for d in Interpreter(model_path=str(path)).get_tensor_details()
            if d["dtype"] == np.int8 and len(d["quantization_parameters"]["scales"])}


def _ops(path) -> dict[str, int]:
    from collections import Counter

    from ai_edge_litert.interpreter import Interpreter

    return dict(Counter(d["op_name"] for d in Interpreter(model_path=str(path))._get_ops_details()))


def _run_tflite(path, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    feed = x if list(inp["shape"]) == list(x.shape) else x.transpose(0, 2, 3, 1)
    if inp["dtype"] == np.int8:
        scale, zero = inp["quantization"]
        feed = np.clip(np.round(feed / scale + zero), -128, 127).astype(np.int8)
    interpreter.set_tensor(inp["index"], feed)
    interpreter.invoke()
    got = interpreter.get_tensor(out["index"])
    if out["dtype"] == np.int8:
        scale, zero = out["quantization"]
        got = (got.astype(np.float32) - zero) * scale
    return got


def _run_qdq(path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()  # integer arithmetic as the graph spells it, on any CPU
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]


@pytest.mark.parametrize("hw", ["cpu", "edgetpu"])
def test_qdq_onnx_ports_to_tflite_int8_with_its_own_scales(hw, zoo_onnx_path, tmp_path):
    qdq, held = _qdq_model(zoo_onnx_path, tmp_path)
    out = tmp_path / "out"
    # no --quantize, no --calibration: the model is quantized, TFLite runs int8, its scales are kept
    result = port(str(qdq), to="tflite", hw=hw, out=out, inputs=str(held))
    assert result.status == "ok", result.reason
    quant = result.report["quantization"]
    assert quant["plan"]["given"] and quant["plan"]["mode"] == "int8" and quant["calibration"] is None
    record = json.loads((out / "quantization.json").read_text())["params"]["given"]
    assert record["activations"] == 17 and record["weights"] == 20 and record["not_given"] == [] and record["lost"] == []
    tflite = min(out.glob("*.tflite"))
    expected, input_weights = _input_params(qdq)
    got = _file_params(tflite)
    assert len(expected) == 25 and got == expected  # every scale and zero point, byte for byte, nothing else
    assert _ops(tflite) == {"CONV_2D": 9, "ADD": 3, "MAX_POOL_2D": 1, "MEAN": 1, "RESHAPE": 1, "FULLY_CONNECTED": 1,
                            "PAD": 2, "PADV2": 1,
                            **({"QUANTIZE": 1, "DEQUANTIZE": 1} if hw == "cpu" else {})}
    # the weights' integers: the input's int8 initializers (OIHW) are the file's (OHWI)
    model = onnx.load(str(qdq))
    by_bytes = {w.transpose(0, 2, 3, 1).tobytes() if w.ndim == 4 else w.tobytes() for w in input_weights
                if w.dtype == np.int8}
    file_weights = _weight_buffers(tflite)
    assert by_bytes and by_bytes <= file_weights
    # the file computes the input QDQ model's integers: within one output step on every held-out sample
    out_scale = next(numpy_helper.to_array(i) for i in model.graph.initializer if i.name == "output_scale")
    for x in np.load(held)["input"]:
        assert np.abs(_run_tflite(tflite, x) - _run_qdq(qdq, x)).max() <= float(out_scale) * 1.001


def _weight_buffers(path) -> set[bytes]:
    """The bytes of every int8 constant tensor of a .tflite."""
    from converter.targets.tflite._generated.schema_generated import Model

    data = path.read_bytes()
    model = Model.GetRootAs(data, 0)
    graph = model.Subgraphs(0)
    out = set()
    for k in range(graph.TensorsLength()):
        tensor = graph.Tensors(k)
        buffer = model.Buffers(tensor.Buffer())
        if tensor.Type() == 9 and buffer.DataLength():  # TensorType.INT8
            out.add(buffer.DataAsNumpy().tobytes())
    return out


def test_symmetric_qdq_onnx_keeps_its_scales_in_tnn_int8(zoo_onnx_path, tmp_path):
    from converter.targets.tnn.reader import read

    from rank_runtimes import TNN_RUN, need

    need(TNN_RUN)
    qdq, held = _qdq_model(zoo_onnx_path, tmp_path, symmetric=True)
    out = tmp_path / "out"
    result = port(str(qdq), to="tnn", out=out, inputs=str(held), runtimes={"tnn": str(TNN_RUN)})
    assert result.status == "ok", result.reason
    judged = result.report["quantization"]["file_verification"]
    assert judged["ok"] and "tnn_run" in judged["runtime"] and judged["outputs"][0]["sqnr_db"] >= 35.0
    net = read(min(out.glob("*.tnnproto")), min(out.glob("*.tnnmodel")))
    expected, input_weights = _input_params(qdq)
    activation_scales = {s for s, z in expected if len(s) == 4}
    blob_scales = {v["scale"].astype(np.float32).tobytes() for k, v in net.resources.items() if k.endswith("_scale_data_")}
    assert blob_scales and blob_scales <= activation_scales  # TNN's BlobScale is the input's own scale
    weights = {w.tobytes() for w in input_weights if w.dtype == np.int8}
    layers = [r for r in net.resources.values() if "filter" in r or "weight" in r]
    assert len(layers) == 10
    for res in layers:  # the input's integers; TNN's scale folds the input scale in
        w = res["filter"] if "filter" in res else res["weight"]
        assert w.tobytes() in weights


def test_asymmetric_scales_refused_for_tnn_and_mace_naming_why(zoo_onnx_path, tmp_path):
    qdq, held = _qdq_model(zoo_onnx_path, tmp_path)
    tnn = port(str(qdq), to="tnn", out=tmp_path / "tnn", inputs=str(held))
    assert tnn.status == "unsupported" and "TNN's int8 blobs are symmetric" in tnn.reason
    mace = port(str(qdq), to="mace", quantize="uint8", out=tmp_path / "mace", inputs=str(held))
    assert mace.status == "unsupported" and "own weight scales cannot be kept" in mace.reason
    assert not list((tmp_path / "mace").glob("*.pb"))


def test_int8_tflite_input_keeps_its_scales(tmp_path):
    tf = pytest.importorskip("tensorflow")
    keras = tf.keras
    keras.utils.set_random_seed(0)
    inp = keras.Input(batch_shape=(1, 16, 16, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu", kernel_initializer="he_normal")(inp)
    y = keras.layers.Conv2D(8, 3, padding="same", kernel_initializer="he_normal")(x)
    x = keras.layers.MaxPooling2D()(keras.layers.Add()([x, y]))
    model = keras.Model(inp, keras.layers.Dense(10)(keras.layers.Flatten()(x)))
    rng = np.random.default_rng(0)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([rng.standard_normal((1, 16, 16, 3)).astype(np.float32)]
                                                for _ in range(16))
    source = tmp_path / "small.tflite"
    source.write_bytes(converter.convert())
    out = tmp_path / "out"
    result = port(str(source), to="tflite", out=out)
    assert result.status == "ok", result.reason
    assert result.report["quantization"]["plan"]["given"]
    written = min(out.glob("*.tflite"))

    assert len(_file_params(source)) == 8 and _file_params(written) == _file_params(source)
    assert _ops(written) == _ops(source)


# ------------------------------------------------------------------------ the float graph


def _qat_model() -> onnx.ModelProto:
    """A QAT export's form: float weights through Q -> DQ (per channel), an activation Q/DQ that
    clamps at 0 where the exporter dropped the Relu, an int8 graph input."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    w_scale = (np.abs(w).reshape(4, -1).max(axis=1) / 127).astype(np.float32)
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["x_f"]),
        helper.make_node("QuantizeLinear", ["w", "w_s", "w_z"], ["w_q"], axis=0),
        helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w_f"], axis=0),
        helper.make_node("Conv", ["x_f", "w_f"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "c_s", "c_z"], ["c_q"]),
        helper.make_node("DequantizeLinear", ["c_q", "c_s", "c_z"], ["y"]),
    ]
    inits = [numpy_helper.from_array(v, n) for n, v in [
        ("x_s", np.array(0.05, np.float32)), ("x_z", np.array(3, np.int8)), ("w", w), ("w_s", w_scale),
        ("w_z", np.zeros(4, np.int8)), ("c_s", np.array(0.02, np.float32)), ("c_z", np.array(-128, np.int8))]]
    graph = helper.make_graph(nodes, "qat", [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 2, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_float_graph_of_a_qat_export():
    import onnxruntime as ort

    model = _qat_model()
    floated = dequantize_input(model)
    assert [n.op_type for n in floated.graph.node] == ["Conv", "Relu"]  # the Relu the clamp at 0 stood for
    assert floated.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    given = given_quantization(floated)
    assert given["activations"]["x"] == {"dtype": "int8", "scale": [float(np.float32(0.05))], "zero_point": [3],
                                         "axis": None}
    relu_out = floated.graph.node[1].output[0]
    assert floated.graph.output[0].name == "y" and relu_out == "y"
    assert given["activations"]["y"]["zero_point"] == [-128]
    (weight,) = given["weights"].values()
    assert weight["axis"] == 0 and weight["zero_point"] == [0] * 4 and len(weight["scale"]) == 4
    # the float graph computes the QDQ model where no value is clamped by its range
    q = np.random.default_rng(2).integers(-60, 60, (1, 2, 8, 8)).astype(np.int8)
    x = (q.astype(np.float32) - 3) * np.float32(0.05)
    reference = ort.InferenceSession(model.SerializeToString()).run(None, {"x": q})[0]
    got = ort.InferenceSession(floated.SerializeToString()).run(None, {"x": x})[0]
    inside = reference < 0.02 * 127
    assert np.abs(got - reference)[inside].max() <= 0.02 / 2 + 1e-6  # within half a step of the Q rounding


def test_float_model_is_the_input_itself():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert dequantize_input(model) is model and given_quantization(model) is None


@pytest.mark.parametrize("op, words", [("QLinearConv", r"operator-format quantized ONNX \(QLinearConv\)"),
                                       ("block", "block-wise")])
def test_unreadable_quantized_forms_are_one_line(op, words):
    if op == "block":
        node = helper.make_node("DequantizeLinear", ["w", "s", "z"], ["y"], axis=0, block_size=2)
        inits = [numpy_helper.from_array(np.zeros((4, 4), np.int8), "w"),
                 numpy_helper.from_array(np.ones((2, 4), np.float32), "s"),
                 numpy_helper.from_array(np.zeros((2, 4), np.int8), "z")]
        inputs = []
    else:
        node = helper.make_node("QLinearConv", ["x", "s", "z", "w", "s", "z", "s", "z"], ["y"])
        inits = []
        inputs = [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 1, 4, 4])]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(BadInput, match=words):
        dequantize_input(model, "m.onnx")
