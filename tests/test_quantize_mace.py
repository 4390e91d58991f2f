"""Native uint8 MACE (`port --to mace --hw cpu --quantize uint8`): the NetDef MACE's quantize path
writes (uint8 ops, OHWI uint8 filters, int32 biases, quantize_info, Quantize/Dequantize at the
edges), judged by MACE's own mace_run (../shared/runtimes, built with MACE_ENABLE_QUANTIZE=ON;
tests needing it skip where it is absent) and by edgeconv's reader, which computes what mace_run
computes.  Models whose float ops MACE would lay out NHWC are refused; apu says why it is not
written (dsp: test_quantize_mace_dsp.py)."""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from quant_models import (assert_mace_reader_sqnr, assert_mace_reexport_identical, calibration_folder, mace_ports,
                         read_mace_netdef, two_input_add_port)
from rank_runtimes import MACE_RUN, need

from converter.port import port
from converter.targets import get as get_target
from converter.targets.base import Artifact

DT_FLOAT, DT_UINT8, DT_INT32 = 1, 2, 4
#: Least SQNR (dB) of the uint8 file against the float model on held-out inputs; measured in
#: mace_run 39.6 dB (resnet), 42.2 (mobilenetv2); the QDQ models reach 40-44 dB.
MIN_SQNR_DB = 35.0


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return calibration_folder(tmp_path_factory.mktemp("mace8data"), held=4)


@pytest.fixture(scope="module")
def ported(zoo_onnx_path, data, tmp_path_factory):
    need(MACE_RUN)
    return mace_ports(zoo_onnx_path, data, tmp_path_factory, "cpu", quantize="uint8", runtimes={"mace": str(MACE_RUN)})


_net = read_mace_netdef


def _t(op) -> int:
    return next((a.i for a in op.arg if a.name == "T"), DT_FLOAT)


@pytest.mark.parametrize("name, ops, edges", [
    # classifier: uint8 up to the global average pool but for the residual Adds (with the ReLU after
    # them): float between Dequantize and Quantize, as every MACE build computes them alike
    ("resnet", {("Quantize", DT_UINT8): 4, ("Conv2D", DT_UINT8): 9, ("Pooling", DT_UINT8): 1,
                ("Eltwise", DT_FLOAT): 3, ("Activation", DT_FLOAT): 3, ("Reduce", DT_UINT8): 1,
                ("Dequantize", DT_UINT8): 7, ("Reshape", DT_FLOAT): 1, ("MatMul", DT_FLOAT): 1},
     [("Quantize", "input"), ("Dequantize", "conv_2_1"), ("Dequantize", "maxpool_0_1"), ("Quantize", "relu_2_1"),
      ("Dequantize", "conv_5_1"), ("Dequantize", "conv_4_1"), ("Quantize", "relu_4_1"), ("Dequantize", "conv_8_1"),
      ("Dequantize", "conv_7_1"), ("Quantize", "relu_6_1"), ("Dequantize", "globalaveragepool_0_1")]),
    # depthwise convolutions ([kh, kw, C, M] uint8 filters), ReLU6 folded into them
    ("mobilenetv2", {("Quantize", DT_UINT8): 4, ("Conv2D", DT_UINT8): 9, ("DepthwiseConv2d", DT_UINT8): 4,
                     ("Eltwise", DT_FLOAT): 3, ("Reduce", DT_UINT8): 1, ("Dequantize", DT_UINT8): 6,
                     ("Reshape", DT_FLOAT): 1, ("MatMul", DT_FLOAT): 1},
     [("Quantize", "input"), ("Dequantize", "clip_0_1"), ("Dequantize", "conv_2_1"), ("Quantize", "add_0_1"),
      ("Dequantize", "conv_5_1"), ("Dequantize", "conv_8_1"), ("Quantize", "add_1_1"), ("Dequantize", "conv_11_1"),
      ("Quantize", "add_2_1"), ("Dequantize", "globalaveragepool_0_1")]),
])
def test_uint8_netdef_as_mace_quantize_writes_it_and_mace_runs_it(name, ops, edges, ported, data):
    result, out = ported(name)
    assert (result.status, result.exit_code) == ("ok", 0), result.reason
    assert result.oracle == "MACE CPU runtime (mace_run)"
    net = _net(out / f"{name}.pb")
    assert dict(Counter((op.type, _t(op)) for op in net.op)) == ops
    assert [(op.type, op.input[0]) for op in net.op if op.type in ("Quantize", "Dequantize")] == edges
    assert next(a.i for a in net.arg if a.name == "quantize_flag") == 1
    assert net.input_info[0].zero_point > 0 and net.input_info[0].scale > 0
    quantize = next(op for op in net.op if op.type == "Quantize")
    assert quantize.output[0] == "mace_input_node_input"
    assert next(a.i for a in quantize.arg if a.name == "find_range_every_time") == 1
    tensors = {t.name: t for t in net.tensors}
    convs = [op for op in net.op if op.type in ("Conv2D", "DepthwiseConv2d")]
    for op in net.op:
        if _t(op) == DT_UINT8 and op.type not in ("Quantize", "Dequantize"):
            info = op.quantize_info[0]  # every uint8 output has its range, MACE's adjust_range form
            assert len(op.quantize_info) == 1 and 0 <= info.zero_point <= 255
            assert info.minval == pytest.approx(-info.zero_point * info.scale, rel=1e-6)
            assert info.maxval == pytest.approx((255 - info.zero_point) * info.scale, rel=1e-6)
    for op in convs:
        w, bias = tensors[op.input[1]], tensors[op.input[2]]
        assert w.data_type == DT_UINT8 and w.quantized and 0 < w.zero_point < 255
        kernel = next(a.ints for a in op.arg if a.name == "kernels")
        if op.type == "Conv2D":  # OHWI
            assert list(w.dims)[1:3] == list(kernel)
        else:  # [kh, kw, C, M]
            assert list(w.dims)[:2] == list(kernel) and w.dims[3] == 1
        assert bias.data_type == DT_INT32 and bias.quantized and bias.zero_point == 0
        # bias scale = input scale x filter scale
        producer = {o: p for p in net.op for o in p.output}[op.input[0]]
        assert bias.scale == pytest.approx(producer.quantize_info[0].scale * w.scale, rel=1e-6)
    assert sum(t.data_type == DT_UINT8 for t in net.tensors) == len(convs)
    assert sum(t.data_type == DT_INT32 for t in net.tensors) == len(convs)
    assert "quantize: 1" in (out / f"{name}.yml").read_text()
    # judged by MACE's own uint8 kernels against the float model on the held-out inputs (SQNR)
    judged = result.report["quantization"]["file_verification"]
    assert judged["runtime"] == "MACE CPU runtime (mace_run)"
    assert min(o["sqnr_db"] for o in judged["outputs"]) >= MIN_SQNR_DB
    # edgeconv's reader computes what mace_run computes: the uint8 ops bit for bit, the float
    # tail (Eltwise, MatMul) within float32 rounding
    from rank_runtimes import mace_run
    from converter.verify.metrics import sqnr_db

    artifact = Artifact("mace", "cpu", [], out, result.report["artifact"]["meta"])
    for x in np.load(data / "held.npz")["input"][:2]:
        mace, reader = mace_run(artifact, {"input": x})["output"], get_target("mace").run(artifact, {"input": x})["output"]
        assert sqnr_db(mace, reader) >= 100.0 and np.abs(mace - reader).max() <= 1e-6
    # and against the QDQ model, sample by sample
    assert_mace_reader_sqnr(result, out, "cpu", np.load(data / "held.npz")["input"][:2], MIN_SQNR_DB,
                            against=("float.onnx", "quantized.onnx"))


@pytest.mark.parametrize("name, op", [("unet", "Deconv2D 'convtranspose_0'"), ("detector", "Reshape 'reshape_0'"),
                                      ("normalized_input", "Eltwise 'sub_0'")])
def test_uint8_refuses_float_ops_mace_would_lay_out_nhwc(name, op, zoo_onnx_path, data, tmp_path):
    """A quantized MACE net is NHWC inside MACE: a float op that reads the layout (the U-Net's
    Deconv2D, which corrupted mace_run's heap; a Reshape of a feature map; a per-channel Sub) is
    refused, one line, exit 3, no MACE file."""
    out = tmp_path / "out"
    result = port(str(zoo_onnx_path(name)), to="mace", hw="cpu", out=out, quantize="uint8",
                  calibration=str(data / "calib.npz"), verify=False)
    assert (result.status, result.exit_code) == ("unsupported", 3)
    assert f"{op} has no MACE uint8 kernel" in result.reason and "NHWC" in result.reason
    assert not [f for f in result.files if f.endswith((".pb", ".data", ".yml"))]


def test_uint8_without_a_mace_runtime_is_judged_by_the_reader_and_says_so(zoo_onnx_path, data, tmp_path):
    result = port(str(zoo_onnx_path("mobilenetv2")), to="mace", hw="cpu", out=tmp_path / "out", quantize="uint8",
                  calibration=str(data / "calib.npz"), inputs=str(data / "held.npz"))
    assert (result.status, result.exit_code) == ("unverified", 8), result.reason
    assert "judged by edgeconv MACE reader" in result.reason and "MACE_ENABLE_QUANTIZE=ON" in result.reason
    judged = result.report["quantization"]["file_verification"]
    assert judged["runtime"].startswith("edgeconv MACE reader") and judged["outputs"][0]["sqnr_db"] >= MIN_SQNR_DB


def test_uint8_bias_correction_fitted_to_maces_weights_gains_in_mace_run(zoo_onnx_path, data, tmp_path):
    """MACE quantizes each filter itself (uint8 per tensor, MACE's adjust_range): the QDQ model
    takes exactly those integers (converter/quantize/target_weights.py), so the bias correction
    fitted to them holds for the file.  Judged by mace_run on held-out samples, the corrected file
    is closer to the float model than the plain one (measured 43.1 -> 48.1 dB)."""
    from converter.targets.mace.quantized import quantize_weights

    need(MACE_RUN)
    sqnr, biases = {}, {}
    for correct in (True, False):
        out = tmp_path / str(correct)
        result = port(str(zoo_onnx_path("mobilenetv2")), to="mace", hw="cpu", out=out, quantize="uint8",
                      calibration=str(data / "calib.npz"), inputs=str(data / "held.npz"), bias_correction=correct,
                      runtimes={"mace": str(MACE_RUN)})
        assert (result.status, result.exit_code) == ("ok", 0), result.reason
        quant = result.report["quantization"]
        assert quant["file_verification"]["runtime"] == "MACE CPU runtime (mace_run)"
        sqnr[correct] = quant["file_verification"]["outputs"][0]["sqnr_db"]
        net = _net(out / "mobilenetv2.pb")
        blob = (out / "mobilenetv2.data").read_bytes()
        tensors = {t.name: t for t in net.tensors}
        convs = [op for op in net.op if op.type in ("Conv2D", "DepthwiseConv2d")]
        biases[correct] = [np.frombuffer(blob, np.int32, tensors[op.input[2]].data_size, tensors[op.input[2]].offset)
                           for op in convs]
        if correct:
            record = quant["bias_correction"]
            assert record["applied"] and record["layers"] == len(convs) == 13, record
            # the premise: the QDQ model's filter integers are the file's (per tensor, MACE's scheme)
            qdq = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(str(out / "quantized.onnx")).graph.initializer}
            floats = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(str(out / "float.onnx")).graph.initializer}
            for op in convs:
                mine, info = quantize_weights(floats[op.input[1]])
                assert np.array_equal(qdq[f"{op.input[1]}_quantized"], mine)
                written = np.frombuffer(blob, np.uint8, tensors[op.input[1]].data_size, tensors[op.input[1]].offset)
                assert tensors[op.input[1]].zero_point == info.zero_point and sorted(written) == sorted(mine.reshape(-1))
    assert sqnr[True] >= sqnr[False] + 2.0, sqnr
    assert sum(not np.array_equal(a, b) for a, b in zip(biases[True], biases[False])) >= 10


def test_uint8_reexport_is_byte_identical(ported, tmp_path):
    _, out = ported("resnet")
    assert_mace_reexport_identical(out, "resnet", "cpu", False, tmp_path)


# ------------------------------------------------------------------ the reader's integer arithmetic


def _roundf(v):
    return math.copysign(math.floor(abs(v) + 0.5), v)


def _srdhm(a: int, b: int) -> int:
    ab = a * b
    y = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
    return abs(y) // (1 << 31) * (1 if y >= 0 else -1)  # C++ division truncates


def _rdbypot(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    remainder, threshold = x & mask, (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def _dynamic_quantize(x):
    """Quantize with find_range_every_time: FindMinMax + AdjustRange<uint8_t> + roundf, float32."""
    f32 = np.float32
    xs = x.transpose(0, 2, 3, 1).astype(f32)
    out_min, out_max = min(f32(0), xs.min()), max(f32(0), xs.max())
    scale = f32((out_max - out_min) / f32(255))
    zero = int(_roundf(f32(-out_min / scale))) if out_min < -1e-6 and out_max > 1e-6 else (0 if out_min > -1e-6 else 255)
    recip = f32(1) / scale
    q = np.array([min(255, max(0, int(_roundf(f32(zero) + recip * v)))) for v in xs.reshape(-1)], np.int64)
    return q.reshape(xs.shape), scale, zero


def _quantize_multiplier(real: float) -> tuple[int, int]:
    mantissa, exponent = math.frexp(real)
    multiplier = math.floor(mantissa * (1 << 31) + 0.5)
    if multiplier == 1 << 31:
        multiplier, exponent = multiplier // 2, exponent + 1
    return multiplier, exponent


def _mace_conv_reference(x, weights, bias, op, net):
    """MACE's uint8 path for Quantize(find_range_every_time) -> Conv2D -> Dequantize, written
    with Python integers straight from core/quantize.h and gemmlowp (not from the reader)."""
    f32 = np.float32
    q, scale, zero = _dynamic_quantize(x)
    w = weights.values_q.astype(np.int64) - weights.zero_point
    if op.type == "DepthwiseConv2d":  # [kh, kw, C, 1]: output channel c reads input channel c only
        c = w.shape[2]
        w = np.einsum("hwc,cd->chwd", w[..., 0], np.eye(c, dtype=np.int64))  # as OHWI, zero off the diagonal
    total = [a for a in op_arg(op, "padding_values").ints]
    top, left = total[0] // 2, total[1] // 2
    padded = np.pad(q - zero, [(0, 0), (top, total[0] - top), (left, total[1] - left), (0, 0)])
    kh, kw = w.shape[1:3]
    sh, sw = op_arg(op, "strides").ints
    oh, ow = (padded.shape[1] - kh) // sh + 1, (padded.shape[2] - kw) // sw + 1
    acc = np.zeros((1, oh, ow, w.shape[0]), np.int64)
    for i in range(oh):
        for j in range(ow):
            acc[0, i, j] = np.einsum("hwc,ohwc->o", padded[0, i * sh:i * sh + kh, j * sw:j * sw + kw], w)
    lhs_rhs = f32(f32(weights.scale) * scale)
    b = bias.values_q.astype(np.int64)
    if abs(lhs_rhs - f32(bias.scale)) > 1e-6:
        adjust = f32(f32(bias.scale) / lhs_rhs)
        b = np.array([_roundf(f32(f32(v) * adjust)) for v in b], np.int64)
    info = op.quantize_info[0]
    multiplier, exponent = _quantize_multiplier(float(f32(lhs_rhs / f32(info.scale))))
    y = [min(255, max(0, _rdbypot(_srdhm(int(v), multiplier), -exponent) + info.zero_point))
         for v in (acc + b).reshape(-1)]
    y = np.array(y, np.float32).reshape(acc.shape)
    return (f32(info.scale) * (y - info.zero_point)).astype(np.float32).transpose(0, 3, 1, 2)


def op_arg(op, name):
    return next(a for a in op.arg if a.name == name)


@pytest.mark.parametrize("group, op_type", [(1, "Conv2D"), (3, "DepthwiseConv2d")])
def test_reader_conv_is_maces_integer_arithmetic_bit_for_bit(group, op_type, tmp_path):
    rng = np.random.default_rng(3)
    c_out = 5 if group == 1 else 3
    w = rng.standard_normal((c_out, 3 // group, 3, 3)).astype(np.float32) * 0.4
    b = rng.standard_normal(c_out).astype(np.float32) * 0.3
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2], group=group,
                          name="conv")], "one_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c_out, 5, 5])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "conv.onnx"
    onnx.save(model, str(path))
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((16, 1, 3, 9, 9)).astype(np.float32))
    out = tmp_path / "out"
    result = port(str(path), to="mace", hw="cpu", out=out, quantize="uint8", calibration=str(tmp_path / "calib.npz"), verify=False)
    assert result.report["artifact"]["meta"]["uint8"]["uint8_ops"] == 1
    net = _net(out / "conv.pb")
    blob = (out / "conv.data").read_bytes()
    tensors = {}
    for t in net.tensors:
        dtype = {DT_UINT8: np.uint8, DT_INT32: np.int32}[t.data_type]
        tensors[t.name] = SimpleNamespace(values_q=np.frombuffer(blob, dtype, t.data_size, t.offset).reshape(
            list(t.dims)), scale=t.scale, zero_point=t.zero_point)
    conv = next(op for op in net.op if op.type == op_type)
    artifact = Artifact("mace", "cpu", [], out, result.report["artifact"]["meta"])
    for k, x in enumerate([rng.standard_normal((1, 3, 9, 9)).astype(np.float32) * s for s in (1.0, 0.3, 2.5)]):
        expected = _mace_conv_reference(x, tensors[conv.input[1]], tensors[conv.input[2]], conv, net)
        got = get_target("mace").run(artifact, {"x": x})["y"]
        assert np.array_equal(got, expected), (k, np.abs(got - expected).max())
    # the input range of each sample, not the calibrated one, quantizes it (find_range_every_time)
    assert net.input_info[0].scale > 0


def _mace_add_reference(q0, s0, z0, q1, s1, z1, so, zo):
    """arm/q8/eltwise.cc SUM: the NEON loop over whole blocks of 8 (inputs shifted right
    arithmetically), the scalar tail (RoundingDivideByPOT) for the rest."""
    doubled = 2 * max(float(s0), float(s1))
    m0, e0 = _quantize_multiplier(float(s0) / doubled)
    m1, e1 = _quantize_multiplier(float(s1) / doubled)
    mo, eo = _quantize_multiplier(doubled / float(np.float32(np.float32(1 << 20) * np.float32(so))))
    n = q0.size
    out = []
    for i, (a, c) in enumerate(zip(q0.reshape(-1).tolist(), q1.reshape(-1).tolist())):
        a, c = _srdhm((a - z0) * (1 << 20), m0), _srdhm((c - z1) * (1 << 20), m1)
        if i < n - n % 8:
            a, c = a >> -e0, c >> -e1
        else:
            a, c = _rdbypot(a, -e0), _rdbypot(c, -e1)
        out.append(min(255, max(0, _rdbypot(_srdhm(a + c, mo), -eo) + zo)))
    return np.array(out, np.int64).reshape(q0.shape)


def test_reader_add_is_maces_neon_arithmetic_and_why_the_writer_keeps_adds_float(tmp_path, monkeypatch):
    """A uint8 Eltwise as MACE's converter writes it (edgeconv's writer keeps Adds float; patched
    here to write it): two model inputs (each quantized with its own per-sample range), 100
    elements, so the NEON blocks and a 4-element scalar tail are both exercised.  The reader
    computes the arm64 (NEON) kernel bit for bit; MACE built without NEON (mace_run here) runs
    the reference kernel, which truncates the real sum to an integer before requantizing it,
    so the two differ by up to the whole value: why the writer keeps Adds float."""
    from converter.targets.mace import quantized

    kind = quantized._uint8_kind
    monkeypatch.setattr(quantized, "_uint8_kind", lambda op, em: op.type == "Eltwise" or kind(op, em))
    result, out, rng = two_input_add_port(tmp_path, "cpu", quantize="uint8")
    net = _net(out / "add.pb")
    assert [(op.type, _t(op)) for op in net.op] == [("Quantize", DT_UINT8), ("Quantize", DT_UINT8),
                                                    ("Eltwise", DT_UINT8), ("Dequantize", DT_UINT8)]
    info = net.op[2].quantize_info[0]
    artifact = Artifact("mace", "cpu", [], out, result.report["artifact"]["meta"])
    for k in range(3):
        a, c = ((rng.standard_normal((1, 4, 5, 5)) * s).astype(np.float32) for s in (1.0, 2.0 + k))
        (qa, sa, za), (qc, sc, zc) = _dynamic_quantize(a), _dynamic_quantize(c)
        y = _mace_add_reference(qa, sa, za, qc, sc, zc, np.float32(info.scale), info.zero_point)
        expected = (np.float32(info.scale) * (y - info.zero_point)).astype(np.float32).transpose(0, 3, 1, 2)
        got = get_target("mace").run(artifact, {"a": a, "c": c})["y"]
        assert np.array_equal(got, expected), (k, np.abs(got - expected).max())
        if MACE_RUN.exists():  # ref/q8/eltwise.cc: int32_t res = real_input0 + real_input1
            from rank_runtimes import mace_run

            real = [np.float32(s) * (q.astype(np.float32) - z) for q, s, z in ((qa, sa, za), (qc, sc, zc))]
            truncated = np.trunc(real[0] + real[1])
            ref = np.clip(np.floor(np.abs(truncated / np.float32(info.scale)) + 0.5) * np.sign(truncated)
                          + info.zero_point, 0, 255)
            host = mace_run(artifact, {"a": a, "c": c})["y"]
            want = (np.float32(info.scale) * (ref - info.zero_point)).astype(np.float32).transpose(0, 3, 1, 2)
            assert np.abs(host - want).max() <= np.float32(info.scale) and np.abs(host - expected).max() > 0.5


# ------------------------------------------------------------------ dsp / apu, real runtime


@pytest.mark.parametrize("hw, why", [("apu", "APU models from TensorFlow only")])
def test_apu_says_why_no_file(hw, why, zoo_onnx_path, data, tmp_path):
    out = tmp_path / "out"
    result = port(str(zoo_onnx_path("detector")), to="mace", hw=hw, out=out, calibration=str(data / "calib.npz"), verify=False)
    assert (result.status, result.exit_code) == ("unsupported", 3) and why in result.reason
    assert result.report["quantization"]["plan"]["full_integer"]
    assert not [f for f in result.files if f.endswith((".pb", ".data", ".yml"))]
