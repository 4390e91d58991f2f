"""QDQ quantization with onnxruntime's tools: accuracy against the float model, the per-layer
table and its diagnoses (per-tensor squash, outlier-inflated scale, a broken layer), the record
exporters read, the other modes, MSE ranges, auto mixed precision, determinism."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from converter.quantize.auto import auto_quantize
from converter.quantize.debug import debug_layers
from converter.quantize.params import QdqView, dequantize, quant_params
from converter.quantize.qdq import QuantConfig, quantize_model
from converter.quantize.ranges import collect_ranges, mse_range
from converter.quantize.verify import compare_quantized
from converter.verify.metrics import sqnr_db
from converter.runtimes.onnxruntime import onnx_runner
from quant_models import gaussian_samples, heavy_tail_model, squash_model

ROOT = Path(__file__).resolve().parents[1]


def _quantize(model, samples, mode="int8", method="minmax", **config):
    ranges = collect_ranges(model, samples, method) if mode in ("int8", "uint8") else None
    return quantize_model(model, QuantConfig(mode, method=method, **config), ranges)


@pytest.mark.parametrize("mode", ["int8", "uint8"])
def test_classifier_close_to_float_on_held_out_inputs(mode, zoo_model):
    model = zoo_model("mobilenetv2")
    calibration = gaussian_samples((1, 3, 32, 32), 32, seed=0)
    held_out = gaussian_samples((1, 3, 32, 32), 64, seed=1)
    quantized = _quantize(model, calibration, mode, full_integer=True)
    ops = {n.op_type for n in quantized.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv", "Gemm"} <= ops and "Clip" not in ops
    result = compare_quantized(onnx_runner(model), onnx_runner(quantized), held_out, mode=mode)
    (out,) = result.outputs
    assert out.name == "output" and out.threshold_db == 25.0
    assert out.sqnr_db >= 25.0 and out.top1 >= 0.95 and out.top5 >= 0.95, out
    assert out.cosine > 0.99 and result.ok


def test_per_tensor_squash_and_per_channel_fix():
    """conv2's output channels 4..7 have 1000x smaller weights than 0..3."""
    model = squash_model(ratio=1000.0)
    calibration = gaussian_samples((1, 3, 8, 8), 32, seed=0, name="x")
    held_out = gaussian_samples((1, 3, 8, 8), 16, seed=1, name="x")
    float_run = onnx_runner(model)

    def small_channels_sqnr(quantized):
        run = onnx_runner(quantized)
        return float(np.median([sqnr_db(float_run(s)["y"][:, 4:], run(s)["y"][:, 4:]) for s in held_out]))

    # Weight-only (activations float): the squash alone.  One scale for all channels rounds the
    # small channels' weights to zero: their outputs are gone (0 dB); per-channel scales keep them.
    per_tensor = _quantize(model, calibration, "int8-weights", per_channel=False)
    per_channel = _quantize(model, calibration, "int8-weights", per_channel=True)
    assert small_channels_sqnr(per_tensor) == pytest.approx(0.0, abs=0.01)
    assert small_channels_sqnr(per_channel) >= 35.0
    # The same in the full int8 model, on the weights themselves.
    for per_ch, low, high in ((False, -0.01, 0.01), (True, 35.0, 100.0)):
        quantized = _quantize(model, calibration, "int8", per_channel=per_ch)
        w, dq = QdqView(model, quantized).weight_values("w2")
        small = sqnr_db(w[4:], dq[4:])
        assert low <= small <= high, (per_ch, small)
        table = debug_layers(model, quantized, held_out, "int8")
        row = table.row("conv2")
        if per_ch:
            assert row.diagnosis == [] and row.squashed_channels == 0
        else:
            assert row.diagnosis == ["per-tensor squash"] and row.squashed_channels == 4
            assert row.suggestion == "per-channel weights" and "4 output channel(s)" in row.detail
            assert "conv2" in table.diagnosed()[0].node
    weight_table = debug_layers(model, per_tensor, held_out, "int8-weights")
    assert weight_table.row("conv2").diagnosis == ["per-tensor squash"]
    assert weight_table.row("conv2").worst_channel_sqnr_db == pytest.approx(0.0, abs=0.01)
    assert weight_table.summary().startswith("conv2 (Conv): per-tensor squash")


def test_outlier_inflated_scale_minmax_vs_percentile(zoo_model):
    model = zoo_model("resnet")
    calibration = gaussian_samples((1, 3, 32, 32), 64, seed=0)
    peak = max(float(np.abs(s["input"]).max()) for s in calibration)
    outlier = calibration[5]["input"].copy()
    outlier[0, 1, 7, 9] = 100.0 * peak  # one value of one sample, 100x the data's largest
    calibration[5] = {"input": outlier}
    held_out = gaussian_samples((1, 3, 32, 32), 16, seed=1)
    run_float = onnx_runner(model)
    results = {}
    for method in ("minmax", "percentile"):
        quantized = _quantize(model, calibration, method=method)
        results[method] = (compare_quantized(run_float, onnx_runner(quantized), held_out).outputs[0],
                           debug_layers(model, quantized, held_out))
    minmax, percentile = results["minmax"], results["percentile"]
    assert minmax[0].sqnr_db < 20.0 and not minmax[0].passed
    assert percentile[0].sqnr_db >= 25.0 and percentile[0].sqnr_db - minmax[0].sqnr_db >= 7.0
    worst = minmax[1].worst(1)[0]
    assert worst.node == "input" and worst.op == "graph input" and worst.drop_db > 30.0
    assert worst.diagnosis == ["outlier-inflated scale"] and worst.suggestion == "percentile calibration"
    assert worst.range[1] > 50 * worst.typical_absmax
    fixed = percentile[1].row("input")
    assert fixed.diagnosis == [] and fixed.sqnr_db >= 35.0 and worst.sqnr_db < 10.0


def test_a_broken_layer_is_named(zoo_model):
    """A quantized conv whose weights dequantize 3x too large (a wrong scale, as a misbehaving
    kernel would compute): the table names it, with the weight error as the reason."""
    model = zoo_model("resnet")
    calibration = gaussian_samples((1, 3, 32, 32), 16, seed=0)
    quantized = _quantize(model, calibration)
    clean = debug_layers(model, quantized, calibration[:4])
    scale = next(i for i in quantized.graph.initializer if i.name == "conv_4_in1_scale")
    scale.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scale) * 3.0, scale.name))
    broken = debug_layers(model, quantized, calibration[:4])
    worst = broken.worst(1)[0]
    assert worst.node.startswith("conv_4") and worst.drop_db > 5.0, broken.summary()
    assert worst.diagnosis == ["weight error"] and worst.weight_sqnr_db == pytest.approx(-6.02, abs=0.1)
    assert not clean.row(worst.node).diagnosis and clean.row(worst.node).drop_db < 5.0
    assert broken.summary().startswith(f"{worst.node} (Conv") and "weight error" in broken.summary()


def test_quant_params_record(zoo_model):
    model = zoo_model("mobilenetv2")
    quantized = _quantize(model, gaussian_samples((1, 3, 32, 32), 16, seed=0), full_integer=True)
    view = QdqView(model, quantized)
    params = quant_params(view, QuantConfig("int8", full_integer=True))
    assert params["format"] == "edgeconv.quant/1" and params["activation_dtype"] == "int8"
    (inp,), (out,) = params["inputs"], params["outputs"]
    for edge, name in ((inp, "input"), (out, "output")):
        assert edge["name"] == name and edge["dtype"] == "int8" and edge["axis"] is None
        assert edge["scale"][0] > 0 and -128 <= edge["zero_point"][0] <= 127
    inits = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}
    float_inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    assert len(params["weights"]) == len(convs) + 1 and len(params["biases"]) == len(convs) + 1
    for node in convs:
        entry = params["weights"][node.input[1]]
        weight = float_inits[node.input[1]]
        assert entry["axis"] == 0 and len(entry["scale"]) == weight.shape[0] and set(entry["zero_point"]) == {0}
        q = inits[entry["quantized"]]
        assert q.dtype == np.int8 and q.shape == weight.shape and entry["consumers"] == [node.name]
        assert sqnr_db(weight, dequantize(q, view.constants[node.input[1]])) > 30.0
        assert params["biases"][node.input[2]]["dtype"] == "int32"
    assert all(v["qdq_tensor"] for v in params["activations"].values()) and params["float_nodes"] == []


def test_full_integer_quantizes_every_io_edge(zoo_model):
    from converter.legalize.apply import legalize
    from converter.postproc import split

    legal = legalize(zoo_model("detector"), "tflite", "gpu")
    cut = split(legal.model, set(legal.postprocess_nodes)).model
    samples = gaussian_samples((1, 3, 32, 32), 8, seed=0)
    params = quant_params(QdqView(cut, _quantize(cut, samples, full_integer=True)), QuantConfig("int8", full_integer=True))
    assert [o["name"] for o in params["outputs"]] == [o.name for o in cut.graph.output]
    assert all(o is not None and o["dtype"] == "int8" for o in params["inputs"] + params["outputs"])


def test_weight_only_and_fp16(zoo_model):
    model = zoo_model("mobilenetv2")
    held_out = gaussian_samples((1, 3, 32, 32), 8, seed=1)
    weights = _quantize(model, [], "int8-weights")
    ops = [n.op_type for n in weights.graph.node]
    assert "QuantizeLinear" not in ops and ops.count("DequantizeLinear") == 14  # 13 Conv + 1 Gemm weights
    fp16 = _quantize(model, [], "fp16")
    assert {i.data_type for i in fp16.graph.initializer} >= {onnx.TensorProto.FLOAT16}
    assert [i.type.tensor_type.elem_type for i in fp16.graph.input] == [onnx.TensorProto.FLOAT]
    for quantized, mode, least in ((weights, "int8-weights", 30.0), (fp16, "fp16", 50.0)):
        result = compare_quantized(onnx_runner(model), onnx_runner(quantized), held_out, mode=mode)
        assert result.outputs[0].threshold_db == least and result.outputs[0].sqnr_db >= least and result.ok


def test_mse_range_trades_clipping_for_resolution():
    rng = np.random.default_rng(0)
    laplace = rng.laplace(0.0, 1.0, 100_000)
    low, high = float(laplace.min()), float(laplace.max())
    hist, edges = np.histogram(laplace, bins=2048, range=(-max(-low, high), max(-low, high)))
    lo, hi = mse_range(hist, edges, low, high)
    # The analytic MSE-optimal 8-bit clip of a Laplace(b) is 9.89 b (Banner et al., ACIQ, 2019).
    assert hi == pytest.approx(9.89, rel=0.05) and lo == pytest.approx(-9.89, rel=0.05)
    assert 1e-5 < np.mean((laplace < lo) | (laplace > hi)) < 1e-3
    uniform = rng.uniform(-1, 1, 100_000)
    hist, edges = np.histogram(uniform, bins=2048, range=(-1, 1))
    assert mse_range(hist, edges, -1.0, 1.0) == pytest.approx((-1.0, 1.0), abs=1e-9)  # nothing to clip


@pytest.mark.parametrize("method", ["entropy", "mse"])
def test_histogram_methods_quantize(method):
    model = squash_model(ratio=1.0)
    quantized = _quantize(model, gaussian_samples((1, 3, 8, 8), 16, seed=0, name="x"), method=method)
    held_out = gaussian_samples((1, 3, 8, 8), 8, seed=1, name="x")
    result = compare_quantized(onnx_runner(model), onnx_runner(quantized), held_out)
    assert result.outputs[0].sqnr_db >= 25.0


def test_auto_keeps_a_heavy_tailed_layer_in_float_where_the_hardware_can():
    model = heavy_tail_model()
    calibration = gaussian_samples((1, 3, 8, 8), 32, seed=0, name="x")
    held_out = gaussian_samples((1, 3, 8, 8), 16, seed=1, name="x")
    ranges = collect_ranges(model, calibration)
    config = QuantConfig("int8")
    plain = compare_quantized(onnx_runner(model), onnx_runner(quantize_model(model, config, ranges)), held_out)
    assert plain.outputs[0].sqnr_db < 20.0
    mixed = auto_quantize(model, config, ranges, calibration, held_out, float_allowed=True)
    assert mixed.quality.ok and mixed.quality.outputs[0].sqnr_db >= 25.0
    assert mixed.config.nodes_to_exclude == ("conv_b", "exp")
    (decision,) = [d for d in mixed.decisions if d.kept]
    assert decision.layer == "exp" and decision.choice == "keep float (with conv_b reading it)"
    assert "saturated range" in decision.diagnosis and decision.sqnr_after_db - decision.sqnr_before_db > 10.0
    assert QdqView(model, mixed.model).float_only_nodes() == ["conv_b", "exp"]
    # 8-bit-only hardware: the same layer cannot stay in float, and the decision says so.
    strict = auto_quantize(model, config, ranges, calibration, held_out, float_allowed=False)
    assert not strict.quality.ok and strict.config.nodes_to_exclude == ()
    assert strict.decisions[0].layer == "exp" and not strict.decisions[0].kept
    assert "cannot stay in float: the hardware runs only 8-bit" in strict.decisions[0].reason


def test_auto_drops_an_outlier_calibration_sample():
    model = squash_model(ratio=1.0)
    calibration = gaussian_samples((1, 3, 8, 8), 64, seed=0, name="x")
    outlier = calibration[3]["x"].copy()
    outlier[0, 0, 2, 2] = 400.0
    calibration[3] = {"x": outlier}
    held_out = gaussian_samples((1, 3, 8, 8), 16, seed=1, name="x")
    result = auto_quantize(model, QuantConfig("int8"), collect_ranges(model, calibration), calibration, held_out,
                           float_allowed=True)
    kept = [d for d in result.decisions if d.kept]
    assert [d.choice for d in kept] == ["drop outlier samples (1 of 64: #3)"]
    assert kept[0].layer == "x" and "outlier-inflated scale" in kept[0].diagnosis
    assert kept[0].sqnr_after_db > kept[0].sqnr_before_db + 20.0
    assert result.quality.ok and result.config.nodes_to_exclude == ()
    tried = [d for d in result.decisions if not d.kept]
    assert [d.choice.split(" (")[0] for d in tried] == ["percentile range"]


_DETERMINISM = """
import hashlib, sys
sys.path.insert(0, {tests!r})
from quant_models import gaussian_samples, squash_model
from converter.quantize.ranges import collect_ranges
from converter.quantize.qdq import QuantConfig, quantize_model
model = squash_model(ratio=30.0)
samples = gaussian_samples((1, 3, 8, 8), 20, seed=0, name="x")
for method in ("minmax", "percentile", "entropy", "mse"):
    q = quantize_model(model, QuantConfig("int8", method=method, full_integer=True), collect_ranges(model, samples, method))
    print(method, hashlib.sha256(q.SerializeToString()).hexdigest())
"""


def test_quantization_is_deterministic_across_processes():
    script = _DETERMINISM.format(tests=str(ROOT / "tests"))
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": seed}).stdout
            for seed in ("1", "2")]
    assert runs[0] == runs[1] and len(runs[0].splitlines()) == 4
    digests = {line.split()[0]: line.split()[1] for line in runs[0].splitlines()}
    assert len({digests["minmax"], digests["percentile"], digests["mse"]}) == 3  # the methods differ
    model = squash_model(ratio=30.0)
    samples = gaussian_samples((1, 3, 8, 8), 20, seed=0, name="x")
    digest = hashlib.sha256(_quantize(model, samples, method="percentile", full_integer=True).SerializeToString())
    assert f"percentile {digest.hexdigest()}" in runs[0]
