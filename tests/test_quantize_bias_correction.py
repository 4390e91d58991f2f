"""Bias correction (converter/quantize/bias_correction.py): the int32 biases absorb the mean output
shift of weight rounding, exactly as computed by hand, it raises the SQNR, every exported file
carries the corrected integers, and it is dropped where it does not help on the calibration data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from quant_models import _model

from converter.quantize.bias_correction import bias_correction_record
from converter.quantize.qdq import QuantConfig, quantize_model
from converter.quantize.ranges import collect_ranges
from converter.verify.metrics import sqnr_db
from converter.runtimes.onnxruntime import onnx_runner

C, H = 8, 12


def biased_rounding_model() -> onnx.ModelProto:
    """x -> depthwise 3x3 (pads 1) -> Relu -> 1x1 conv -> y.  In every output channel one weight is
    the largest (it sets the per-channel scale to exactly 0.01) and the others sit 0.4 steps above
    a multiple of it: rounding lowers each of them by 0.004, the same sign in the whole kernel."""
    rng = np.random.default_rng(0)

    def kernel(shape):
        steps = rng.integers(-60, 60, size=shape).astype(np.float64)
        w = (steps + 0.4) * 0.01
        flat = w.reshape(shape[0], -1)
        flat[:, 0] = 1.27  # the channel's max |w|: scale 1.27 / 127 = 0.01
        return flat.reshape(shape).astype(np.float32)

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="dw", group=C, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="pw")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, H, H])],
                  {"w1": kernel((C, 1, 3, 3)), "b1": rng.normal(0, 0.1, C).astype(np.float32),
                   "w2": kernel((C, C, 1, 1)), "b2": rng.normal(0, 0.1, C).astype(np.float32)}, "biased_rounding")


def positive_samples(count: int, seed: int, mean: float = 1.0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": (mean + 0.5 * rng.standard_normal((1, C, H, H))).astype(np.float32)} for _ in range(count)]


def _quantize(model, samples, **config):
    return quantize_model(model, QuantConfig("int8", **config), collect_ranges(model, samples), samples)


def _dequantized_const(model: onnx.ModelProto, consumer: str, index: int) -> tuple[np.ndarray, np.ndarray]:
    """(integers, scale) of the DequantizeLinear feeding input ``index`` of node ``consumer``."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    (node,) = [n for n in model.graph.node if n.name == consumer]
    dq = producer[node.input[index]]
    return inits[dq.input[0]], inits[dq.input[1]]


def test_corrected_biases_are_the_hand_computed_shift():
    model = biased_rounding_model()
    samples = positive_samples(32, 0)
    quantized = _quantize(model, samples)
    record = bias_correction_record(quantized)
    assert record["applied"] and record["layers"] == 2, record
    assert record["sqnr_db_after"] > record["sqnr_db_before"] + 3.0, record
    floats = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in model.graph.initializer}
    # dw: mean input map, zero-padded, through the kernel's rounding error, averaged over the image
    mean_x = np.mean([s["x"][0] for s in samples], axis=0).astype(np.float64)
    w_int, w_scale = _dequantized_const(quantized, "dw", 1)
    dw = w_int.astype(np.float64) * w_scale.reshape(-1, 1, 1, 1) - floats["w1"]
    padded = np.pad(mean_x, ((0, 0), (1, 1), (1, 1)))
    shift = np.array([sum(dw[o, 0, i, j] * padded[o, i:i + H, j:j + H] for i in range(3) for j in range(3)).mean()
                      for o in range(C)])
    b_int, b_scale = _dequantized_const(quantized, "dw", 2)
    expected = np.round((floats["b1"] - shift) / b_scale.astype(np.float64))
    assert np.abs(b_int.astype(np.int64) - expected).max() <= 1, (b_int, expected)
    # pw: the mean Relu output (per channel) through the 1x1 kernel's rounding error
    relu = np.mean([_relu_of(model, s).astype(np.float64).mean(axis=(0, 2, 3)) for s in samples], axis=0)
    w_int, w_scale = _dequantized_const(quantized, "pw", 1)
    dw = (w_int.astype(np.float64) * w_scale.reshape(-1, 1, 1, 1) - floats["w2"])[:, :, 0, 0]
    b_int, b_scale = _dequantized_const(quantized, "pw", 2)
    expected = np.round((floats["b2"] - dw @ relu) / b_scale.astype(np.float64))
    assert np.abs(b_int.astype(np.int64) - expected).max() <= 1, (b_int, expected)
    # the shift is real: uncorrected, the integers are round(b / scale)
    plain = _quantize(model, samples, bias_correction=False)
    assert bias_correction_record(plain) is None
    b_plain, plain_scale = _dequantized_const(plain, "dw", 2)
    assert np.array_equal(b_plain, np.round(floats["b1"] / plain_scale).astype(np.int32))
    assert np.abs(b_plain.astype(np.int64) - _dequantized_const(quantized, "dw", 2)[0]).min() >= 5


def _relu_of(model: onnx.ModelProto, sample) -> np.ndarray:
    from converter.verify.localize import intermediate_values

    return intermediate_values(model, sample)["r1"]


def test_correction_removes_the_mean_error_on_held_out_inputs():
    model = biased_rounding_model()
    calibration, held = positive_samples(32, 0), positive_samples(8, 1)
    run_float = onnx_runner(model)
    result = {}
    for corrected in (False, True):
        run_quant = onnx_runner(_quantize(model, calibration, bias_correction=corrected))
        refs, outs = [run_float(s)["y"] for s in held], [run_quant(s)["y"] for s in held]
        mean_error = np.abs(np.mean([o - r for o, r in zip(outs, refs)], axis=(0, 1, 3, 4))).max()
        result[corrected] = (mean_error, float(np.median([sqnr_db(r, o) for r, o in zip(refs, outs)])))
    assert result[True][0] < 0.2 * result[False][0], result
    assert result[True][1] > result[False][1] + 3.0, result


def test_exported_files_carry_the_corrected_integers(tmp_path):
    """The TFLite writer quantizes the float bias itself: the port hands it the corrected biases,
    so the file's INT32 bias tensors are byte-equal to the QDQ model's."""
    pytest.importorskip("ai_edge_litert")
    from converter.port import port
    from converter.targets.tflite._generated import schema_generated as fb

    model_path = tmp_path / "m.onnx"
    onnx.save(biased_rounding_model(), str(model_path))
    np.savez(tmp_path / "calib.npz", x=np.stack([s["x"] for s in positive_samples(32, 0)]))
    result = port(str(model_path), to="tflite", hw="cpu", out=tmp_path / "out", quantize="int8", calibration=str(tmp_path / "calib.npz"))
    assert result.status == "ok", result.reason
    quantized = onnx.load(str(tmp_path / "out" / "quantized.onnx"))
    assert result.report["quantization"]["bias_correction"]["applied"] is True
    (path,) = Path(tmp_path / "out").glob("*.tflite")
    tfl = fb.ModelT.InitFromObj(fb.Model.GetRootAs(path.read_bytes(), 0))
    sg = tfl.subgraphs[0]
    int32 = {bytes(sg.tensors[i].name).decode(): np.frombuffer(bytes(tfl.buffers[sg.tensors[i].buffer].data), np.int32)
             for i in range(len(sg.tensors)) if sg.tensors[i].type == fb.TensorType.INT32
             and tfl.buffers[sg.tensors[i].buffer].data is not None and len(tfl.buffers[sg.tensors[i].buffer].data)}
    biases = [v for v in int32.values() if v.size == C]
    expected = [_dequantized_const(quantized, n.name, 2)[0] for n in quantized.graph.node if n.op_type == "Conv"]
    assert len(biases) == 2 and all(any(np.array_equal(b, e) for b in biases) for e in expected), (int32, expected)


def test_correction_that_hurts_on_the_calibration_data_is_dropped():
    """The means come from the first 32 calibration samples, the keep-or-drop check from the first
    16: when those 16 (inputs of mean -1) differ from the next 16 (mean +3), the correction fitted
    to their average (+1) lowers the first 16's SQNR, so the QDQ model keeps round(b / scale)."""
    model = biased_rounding_model()
    samples = positive_samples(16, 2, mean=-1.0) + positive_samples(16, 0, mean=3.0) + positive_samples(50, 3)
    quantized = _quantize(model, samples)
    record = bias_correction_record(quantized)
    candidates = record["candidates"]
    assert record["applied"] is False and candidates["shared/corrected"] < candidates["shared/plain"], record
    assert record["sqnr_db_after"] == record["sqnr_db_before"] == candidates["shared/plain"]
    assert "lowered the worst output SQNR" in record["why"]
    plain = _quantize(model, samples, bias_correction=False)
    for name in ("dw", "pw"):
        assert np.array_equal(_dequantized_const(quantized, name, 2)[0], _dequantized_const(plain, name, 2)[0])


def test_nothing_to_correct_is_recorded():
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
                   {"w": rng.standard_normal((8, 8)).astype(np.float32)}, "matmul")
    samples = [{"x": rng.standard_normal((4, 8)).astype(np.float32)} for _ in range(8)]
    record = bias_correction_record(_quantize(model, samples))
    assert record == {"layers": 0, "applied": False, "add_ranges": "shared",
                      "why": "no Conv/Gemm with an integer weight and an int32 bias of its own"}


def test_no_bias_correction_flag_keeps_the_plain_biases(tmp_path):
    """``port --no-bias-correction``: the record says it was not tried, the biases are round(b / scale)."""
    pytest.importorskip("ai_edge_litert")
    import json

    from converter.cli import main

    model = biased_rounding_model()
    onnx.save(model, str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "calib.npz", x=np.stack([s["x"] for s in positive_samples(32, 0)]))
    code = main(["port", str(tmp_path / "m.onnx"), "--to", "tflite", "--hw", "cpu", "--quantize", "int8",
                 "--calibration", str(tmp_path / "calib.npz"), "--no-bias-correction", "-o", str(tmp_path / "out"),
                 "--json"])
    assert code == 0
    record = json.loads((tmp_path / "out" / "quantization.json").read_text())["params"]
    assert record["bias_correction"] is None
    quantized = onnx.load(str(tmp_path / "out" / "quantized.onnx"))
    floats = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    convs = [n for n in quantized.graph.node if n.op_type == "Conv"]  # the depthwise conv, then the 1x1
    assert len(convs) == 2
    for node, bias in zip(convs, ("b1", "b2")):
        ints, scale = _dequantized_const(quantized, node.name, 2)
        assert np.array_equal(ints, np.round(floats[bias] / scale).astype(np.int32)), node.name


@pytest.mark.parametrize("target, hw, mode, per_tensor", [("tnn", "cpu", "int8", True)])
def test_targets_with_their_own_weight_scheme_keep_the_plain_biases(target, hw, mode, per_tensor, tmp_path):
    """TNN quantizes the float weights itself when the QDQ weights are per tensor (TNN's are per
    channel): the port leaves the biases uncorrected and says why (TNN with per-channel QDQ
    weights carries the correction: tests/test_quantize_tnn.py; MACE's CPU hands its own weight
    integers to the QDQ model: tests/test_quantize_mace.py)."""
    from converter.port import port

    model = biased_rounding_model()
    onnx.save(model, str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "calib.npz", x=np.stack([s["x"] for s in positive_samples(32, 0)]))
    result = port(str(tmp_path / "m.onnx"), to=target, hw=hw, out=tmp_path / "out", quantize=mode, calibration=str(tmp_path / "calib.npz"), verify=False, per_tensor=per_tensor)
    assert result.status == "ok", result.reason
    record = result.report["quantization"]["bias_correction"]
    assert record["applied"] is False and "own scheme" in record["why"], record
    quantized = onnx.load(str(tmp_path / "out" / "quantized.onnx"))
    assert bias_correction_record(quantized) is None


def test_residual_add_ranges_are_chosen_with_the_biases():
    """A residual block: the Add's branch can share the Add's range (TensorFlow's layout) or keep
    its own; each way with plain or corrected biases, the best on the calibration samples wins,
    and its activation scales are the QDQ model's."""
    from quant_models import gaussian_samples, residual_model

    from converter.quantize.qdq import quantize_static_qdq
    from converter.quantize.ranges import share_add_ranges

    model = residual_model()
    samples = [{"x": np.abs(s["x"]) + 0.5} for s in gaussian_samples((1, 8, 8, 8), 32, 0, "x")]
    ranges = collect_ranges(model, samples)
    quantized = _quantize(model, samples)
    record = bias_correction_record(quantized)
    assert set(record["candidates"]) == {"shared/plain", "shared/corrected", "own/plain", "own/corrected"}, record
    best = max(record["candidates"], key=record["candidates"].get)
    assert record["sqnr_db_after"] == record["candidates"][best]
    assert record["sqnr_db_before"] == record["candidates"]["shared/plain"]
    assert (record["add_ranges"], record["applied"]) == (best.split("/")[0], best.endswith("corrected"))
    # the branch (conv_b's output) is quantized with the chosen layout's scale
    wide, own = share_add_ranges(model, ranges).data["cb"].range_value, ranges.data["cb"].range_value
    assert not np.array_equal(np.asarray(wide), np.asarray(own))
    chosen = share_add_ranges(model, ranges) if record["add_ranges"] == "shared" else ranges
    layout = quantize_static_qdq(model, chosen, QuantConfig("int8"))
    scale = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}["cb_scale"]
    expected = {i.name: numpy_helper.to_array(i) for i in layout.graph.initializer}["cb_scale"]
    assert scale == expected
