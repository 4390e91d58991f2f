"""Quantization numbers on held-out samples (converter/quantize/holdout.py, judge.py, recovery.py):
the calibration set is split (seeded), ranges come from one part, bias correction, auto and the
verdict are decided on the other (or on --inputs); every record names its samples; the per-layer
table ranks layers by the output SQNR they recover in float, measured."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import onnx
import pytest
from quant_models import gaussian_samples, heavy_tail_model, two_branch_model
from test_quantize_bias_correction import biased_rounding_model, positive_samples

from converter.quantize import recovery
from converter.quantize.holdout import HELD_OUT, IN_SAMPLE, INPUTS, held_out_count, split_samples
from converter.verify.metrics import sqnr_db
from converter.runtimes.onnxruntime import onnx_runner


def _tagged(count: int) -> list[dict]:
    return [{"x": np.full((1, 2), k, np.float32)} for k in range(count)]


def test_the_split_is_seeded_disjoint_and_named():
    samples = _tagged(100)
    split = split_samples(samples, None, seed=0)
    held = [int(s["x"][0, 0]) for s in split.held]
    kept = [int(s["x"][0, 0]) for s in split.calibrate]
    assert split.held_kind == HELD_OUT and len(held) == held_out_count(100) == 25 and len(kept) == 75
    assert held == split.held_indices == sorted(held) and not set(held) & set(kept)
    assert sorted(held + kept) == list(range(100)) and kept == sorted(kept)
    assert split_samples(samples, None, seed=0).held_indices == held  # the same on every run
    assert split_samples(samples, None, seed=1).held_indices != held
    assert split.held_label == "25 samples held out of the calibration set (seed 0)"
    assert held_out_count(12) == 4 and held_out_count(1000) == 32
    few = split_samples(_tagged(11), None, seed=0)
    assert few.held_kind == IN_SAMPLE and few.held is few.calibrate and len(few.held) == 11
    given = split_samples(samples, _tagged(5), seed=0, inputs_label="--inputs held.npz")
    assert given.held_kind == INPUTS and len(given.calibrate) == 100 and len(given.held) == 5
    assert given.held_label == "5 samples of --inputs held.npz"


def _port(tmp_path, model, calibration, inputs=None, quantize="int8", to="tflite"):
    from converter.port import port

    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    np.savez(tmp_path / "calib.npz", x=np.stack([s["x"] for s in calibration]))
    options = {}
    if inputs is not None:
        np.savez(tmp_path / "held.npz", x=np.stack([s["x"] for s in inputs]))
        options["inputs"] = str(tmp_path / "held.npz")
    return port(str(path), to=to, hw="cpu", out=tmp_path / "out", quantize=quantize,
                calibration=str(tmp_path / "calib.npz"), **options)


def test_ranges_come_from_one_part_and_the_verdict_from_the_other(tmp_path):
    """32 calibration samples: 24 calibrate, 8 held out (seed 0).  A held-out sample holding the
    largest input value does not widen the input's range; the reported SQNR is the median over
    exactly the held-out samples of the files written."""
    pytest.importorskip("ai_edge_litert")
    from onnxruntime.quantization.quant_utils import compute_scale_zp

    model = biased_rounding_model()
    samples = positive_samples(32, 0)
    split = split_samples(samples, None, seed=0)
    samples[split.held_indices[0]]["x"][0, 0, 0, 0] = 9.0  # far above every calibrating value
    result = _port(tmp_path, model, samples)
    assert result.status == "ok", result.reason
    quant = result.report["quantization"]
    assert quant["samples"] == {"calibration": 24, "held_out": 8, "held_out_kind": "held-out", "seed": 0,
                                "held_out_from": "8 samples held out of the calibration set (seed 0)",
                                "held_out_indices": split.held_indices}
    assert quant["calibration"]["calibrated_on"] == 24 and quant["calibration"]["samples"] == 32
    calibrating = np.stack([samples[i]["x"] for i in range(32) if i not in split.held_indices])
    _, scale = compute_scale_zp(np.float32(min(calibrating.min(), 0)), np.float32(calibrating.max()), np.int8(-128),
                                np.int8(127))
    written = json.loads((tmp_path / "out" / "quantization.json").read_text())
    assert written["params"]["activations"]["x"]["scale"] == [pytest.approx(float(scale), rel=1e-6)]
    assert float(scale) < 9.0 / 255  # the held-out value would have set it
    # the verdict: the QDQ model against the float model, median over the 8 held-out samples
    out = tmp_path / "out"
    run_float, run_qdq = onnx_runner(str(out / "float.onnx")), onnx_runner(str(out / "quantized.onnx"))
    held = [samples[i] for i in split.held_indices]
    expected = float(np.median([sqnr_db(run_float(s)["y"], run_qdq(s)["y"]) for s in held]))
    verification = quant["verification"]
    # (the port's float references come from the optimized float graph: the same up to float rounding)
    assert verification["samples"] == 8 and verification["outputs"][0]["sqnr_db"] == pytest.approx(expected, abs=1e-4)
    assert verification["samples_from"] == "8 samples held out of the calibration set (seed 0)"
    assert "(median of 8 samples held out of the calibration set (seed 0))" in verification["summary"]
    assert quant["file_verification"]["samples"] == 8
    assert quant["bias_correction"]["samples_from"] == "the 8 held-out samples"
    assert written["samples"] == quant["samples"] and written["verification"]["samples_from"] == verification["samples_from"]


def test_bias_correction_is_kept_only_where_it_helps_on_held_out_samples(tmp_path):
    """Calibration inputs of mean +1 and --inputs of mean 0: the correction fitted to the first
    lowers the SQNR on the second (22 dB against 30.5 dB), so the port keeps the plain biases (chosen in-sample, on the
    calibration samples, it would have been applied); with --inputs like the calibration set it
    is applied.  The recorded scores are the --inputs samples' median SQNR of each candidate."""
    pytest.importorskip("ai_edge_litert")
    from converter.quantize.bias_correction import bias_correction_record
    from converter.quantize.qdq import QuantConfig, quantize_model
    from converter.quantize.ranges import collect_ranges

    model = biased_rounding_model()
    calibration = positive_samples(32, 0, mean=1.0)
    in_sample = quantize_model(model, QuantConfig("int8"), collect_ranges(model, calibration), calibration)
    assert bias_correction_record(in_sample)["applied"] is True
    shifted = positive_samples(8, 1, mean=0.0)
    record = _port(tmp_path / "a", model, calibration, shifted).report["quantization"]["bias_correction"]
    assert record["applied"] is False and record["samples"] == 8 and record["samples_from"] == "the 8 --inputs samples"
    assert record["candidates"]["shared/corrected"] < record["candidates"]["shared/plain"] - 5.0
    assert "lowered the worst output SQNR on the 8 --inputs samples" in record["why"]
    out = tmp_path / "a" / "out"
    run_float, run_qdq = onnx_runner(str(out / "float.onnx")), onnx_runner(str(out / "quantized.onnx"))
    plain = float(np.median([sqnr_db(run_float(s)["y"], run_qdq(s)["y"]) for s in shifted]))
    assert record["candidates"]["shared/plain"] == pytest.approx(plain, abs=1e-3)
    alike = _port(tmp_path / "b", model, calibration, positive_samples(8, 1, mean=1.0))
    record = alike.report["quantization"]["bias_correction"]
    assert record["applied"] is True and record["sqnr_db_after"] > record["sqnr_db_before"] + 3.0


def test_the_table_ranks_layers_by_the_output_sqnr_they_recover_in_float():
    """conv_c loses the most locally (39 dB: the Add's range squeezes it) but kept in float it
    recovers almost nothing at the output; conv_e loses 3 dB locally and recovers the most.  Each
    measured gain is the same model quantized with the layer and its readers in float, run on
    the first recovery.SAMPLES (4) held-out samples, minus the model's own median SQNR there."""
    from dataclasses import replace

    from converter.quantize.holdout import split_samples
    from converter.quantize.judge import Judge
    from converter.quantize.modes import QuantPlan
    from converter.quantize.params import bias_correction_record
    from converter.quantize.port import calibrate, quantize_and_judge
    from converter.quantize.qdq import QuantConfig, quantize_model

    model = two_branch_model()
    samples = split_samples(gaussian_samples((1, 3, 8, 8), 32, 0, "x"), gaussian_samples((1, 3, 8, 8), 16, 1, "x"), 0)
    plan = QuantPlan("int8", auto=False, full_integer=False, float_allowed=True, per_channel=True, method="minmax",
                     reason="")
    start = calibrate(model, plan, QuantConfig("int8"), samples.calibrate)
    ranges, stats = start.ranges, start.stats
    judge = Judge(model, samples)
    outcome = quantize_and_judge(model, plan, start, samples.calibrate, judge)
    table = outcome.table
    assert [r.node for r in table.worst(3)] == ["conv_c", "exp", "conv_e"]
    assert [r.node for r in table.ranked()[:3]] == ["conv_e", "exp", "conv_c"]
    rows = {r.node: r for r in table.measured()}
    assert rows["conv_c"].drop_db > 30.0 and rows["conv_c"].recovered_db < 1.0
    assert rows["conv_e"].drop_db < 5.0 and rows["conv_e"].recovered_db > 5.0
    assert table.measured_on == f"the first {recovery.SAMPLES} of the 16 --inputs samples"
    assert table.summary().startswith("keeping conv_e (Conv) in float would recover the most, +")
    assert "conv_c loses the most locally" in table.summary()
    run_float = onnx_runner(model)
    first = samples.held[:recovery.SAMPLES]

    def median(quantized):
        run = onnx_runner(quantized)
        return float(np.median([sqnr_db(run_float(s)["y"], run(s)["y"]) for s in first]))

    base = median(outcome.model)
    variant = quantize_model(model, replace(QuantConfig("int8"), nodes_to_exclude=("add", "conv_e")), ranges,
                             samples.calibrate, stats, bias_choice=bias_correction_record(outcome.model))
    assert rows["conv_e"].kept_float_with == ["add"]
    assert rows["conv_e"].recovered_db == pytest.approx(median(variant) - base, abs=1e-4)


def test_the_console_says_what_auto_chose_and_why(tmp_path, capsys):
    pytest.importorskip("ai_edge_litert")
    from converter.cli import main

    onnx.save(heavy_tail_model(), str(tmp_path / "heavy.onnx"))
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "c.npz", x=rng.standard_normal((32, 1, 3, 8, 8)).astype(np.float32))
    code = main(["port", str(tmp_path / "heavy.onnx"), "--to", "tflite", "--quantize", "auto", "--calibration",
                 str(tmp_path / "c.npz"), "--no-verify", "-o", str(tmp_path / "out")])
    text = " ".join(capsys.readouterr().out.split())
    assert code == 0
    for part in ("auto: int8, the lowest precision tflite/cpu runs", "exp_0 -> keep float (with conv_1 reading it): "
                 "exp_0 lost", "raised the worst output SQNR by", "dB on the 8 held-out samples",
                 "ranges from 24 calibration samples; choices and verdict on 8 samples held out"):
        assert part in text.replace("│ ", ""), part


def test_no_keep_float_variant_is_built_when_the_outputs_are_above_the_baseline():
    """A model whose outputs are already above the table's baseline has no layer worth keeping in
    float: measure() builds no variant and says why, with the measured dB; below it, it measures."""
    from converter.quantize.debug import debug_layers
    from converter.quantize.holdout import split_samples
    from converter.quantize.judge import Judge
    from converter.quantize.qdq import QuantConfig, quantize_model
    from converter.quantize.ranges import collect_ranges

    model = two_branch_model()
    samples = split_samples(gaussian_samples((1, 3, 8, 8), 32, 0, "x"), gaussian_samples((1, 3, 8, 8), 16, 1, "x"), 0)
    ranges = collect_ranges(model, samples.calibrate, "minmax")
    quantized = quantize_model(model, QuantConfig("int8"), ranges)
    judge = Judge(model, samples)
    score = judge.score(quantized, recovery.SAMPLES)
    built = []

    def variant(nodes):
        built.append(nodes)
        return quantize_model(model, replace(QuantConfig("int8"), nodes_to_exclude=nodes), ranges)

    high = debug_layers(model, quantized, samples.held)
    high.baseline_sqnr_db = math.floor(score) - 1.0  # the outputs are above it
    assert recovery.measure(model, high, quantized, variant, judge) == [] and built == []
    assert high.measured() == [] and high.measured_on == ""
    assert high.unmeasured == (f"keep-float gains not measured: the outputs are at {score:.1f} dB on the first "
                               f"{recovery.SAMPLES} of the 16 --inputs samples, above the {math.floor(score) - 1:g} dB "
                               "the format gives one tensor")
    assert high.summary().endswith(high.unmeasured) and high.to_dict()["unmeasured"] == high.unmeasured
    low = debug_layers(model, quantized, samples.held)
    assert score < low.baseline_sqnr_db  # int8: 40 dB
    measured = recovery.measure(model, low, quantized, variant, judge)
    assert len(built) == len(measured) == len(recovery.candidates(low)) > 0 and low.unmeasured == ""
