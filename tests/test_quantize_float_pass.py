"""The quantize stage's shortcuts compute what the long way computes: the one float pass gives
onnxruntime's MinMax ranges value for value and bias correction's statistics, and the own-range
QDQ model re-stamped from the shared one is onnxruntime's own, byte for byte."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from quant_models import gaussian_samples, residual_model

from converter.quantize.bias_correction import CHECK_SAMPLES, MEAN_SAMPLES, _float_pass, corrected_inputs
from converter.quantize.float_pass import FloatStats, minmax_pass
from converter.quantize.qdq import QuantConfig, quantize_static_qdq
from converter.quantize.range_variants import with_ranges
from converter.quantize.ranges import as_minmax, quiet_onnxruntime_quantization, share_add_ranges


def _onnxruntime_minmax(model, samples):
    """onnxruntime's own MinMax calibrator, as edgeconv ran it before (optimized session)."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator

    from converter.quantize.ranges import _Chunk, _GuardedSession, _optimized_session

    with tempfile.TemporaryDirectory() as tmp, quiet_onnxruntime_quantization():
        path = Path(tmp) / "m.onnx"
        onnx.save(model, str(path))
        calibrator = create_calibrator(path, [], augmented_model_path=str(Path(tmp) / "a.onnx"),
                                       calibrate_method=CalibrationMethod.MinMax)
        calibrator.infer_session = _GuardedSession(_optimized_session(calibrator.augmented_model_path))
        calibrator.collect_data(_Chunk(samples))
        return as_minmax(calibrator.compute_data())


@pytest.mark.parametrize("name", ["mobilenetv2", "resnet"])
def test_one_float_pass_is_onnxruntimes_minmax_and_bias_corrections_statistics(name, zoo_model):
    model = zoo_model(name)
    samples = gaussian_samples((1, 3, 32, 32), 40, seed=0)
    stats = FloatStats()
    ours = minmax_pass(model, samples, stats, MEAN_SAMPLES, CHECK_SAMPLES)
    theirs = _onnxruntime_minmax(model, samples)
    assert ours.data.keys() == theirs.data.keys() and len(ours.data) > 20
    for tensor, data in theirs.data.items():
        assert np.array_equal(np.asarray(ours.data[tensor].range_value), np.asarray(data.range_value)), tensor
    names = corrected_inputs(model)
    means, references = _float_pass(model, names, samples[:MEAN_SAMPLES], CHECK_SAMPLES)
    assert stats.mean_samples == MEAN_SAMPLES and len(stats.references) == CHECK_SAMPLES
    for tensor in names:  # the optimized float graph against the unoptimized one: float rounding apart
        np.testing.assert_allclose(stats.means[tensor], means[tensor], rtol=1e-5, atol=1e-6)
    for ours_out, theirs_out in zip(stats.references, references):
        for key, value in theirs_out.items():
            np.testing.assert_allclose(ours_out[key], value, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["mobilenetv2", "resnet", "residual"])
@pytest.mark.parametrize("mode", ["int8", "uint8"])
def test_own_range_model_restamped_is_onnxruntimes_byte_for_byte(name, mode, zoo_model):
    from onnxruntime.quantization import QuantType

    model = residual_model() if name == "residual" else zoo_model(name)
    shape = (1, 8, 8, 8) if name == "residual" else (1, 3, 32, 32)
    samples = gaussian_samples(shape, 16, seed=0, name=model.graph.input[0].name)
    ranges = minmax_pass(model, samples)
    shared = share_add_ranges(model, ranges)
    config = QuantConfig(mode)
    qtype = QuantType.QInt8 if mode == "int8" else QuantType.QUInt8
    restamped = with_ranges(model, quantize_static_qdq(model, shared, config), shared, ranges, qtype)
    assert restamped is not None
    assert restamped.SerializeToString() == quantize_static_qdq(model, ranges, config).SerializeToString()


def test_a_range_a_convolution_reads_is_quantized_again():
    """The int32 bias of a Conv is quantized on its input's scale: a changed range a Conv reads
    is no re-stamp (None: the caller runs onnxruntime's quantizer again)."""
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData

    model = residual_model()
    ranges = minmax_pass(model, gaussian_samples((1, 8, 8, 8), 16, seed=0, name="x"))
    wider = dict(ranges.data)
    low, high = ranges.data["ra"].range_value  # relu_a's output: conv_b reads it
    wider["ra"] = TensorData(lowest=np.float32(low), highest=np.float32(high * 2))
    wider = TensorsData(CalibrationMethod.MinMax, wider)
    quantized = quantize_static_qdq(model, ranges, QuantConfig("int8"))
    assert with_ranges(model, quantized, ranges, wider, QuantType.QInt8) is None


def test_extremes_taken_in_the_graph_are_onnxruntimes_minmax_without_statistics(zoo_model):
    """Without bias correction's statistics no sample returns a tensor (float_pass._Extremes: a
    ReduceMin and a ReduceMax per calibrated tensor): the ranges are onnxruntime's all the same."""
    from converter.quantize.float_pass import _Extremes, tensors_to_calibrate

    model = zoo_model("resnet")
    samples = gaussian_samples((1, 3, 32, 32), 6, seed=1)
    ours, theirs = minmax_pass(model, samples), _onnxruntime_minmax(model, samples)
    assert ours.data.keys() == theirs.data.keys()
    for tensor, data in theirs.data.items():
        assert np.array_equal(np.asarray(ours.data[tensor].range_value), np.asarray(data.range_value)), tensor
    calibrated = [n for n in tensors_to_calibrate(model) if n not in {i.name for i in model.graph.input}]
    extremes = _Extremes(model, calibrated)
    added = extremes.model.graph.node[len(model.graph.node):]
    assert [n.op_type for n in added] == ["ReduceMin", "ReduceMax"] * len(calibrated)
    assert len(extremes.outputs) == len(set(extremes.outputs)) == 2 * len(calibrated)
