"""Integer verdicts do not depend on the host CPU.

onnxruntime's fused integer kernels (a QDQ Conv becomes QLinearConv under its graph
optimizations) differ by CPU: on x86 without VNNI the u8s8 kernels add byte pairs into saturating
16-bit sums (vpmaddubsw), so the same file measured 24.7 dB on an AVX2 host and 40 dB here.
Every integer judgement therefore runs onnxruntime with graph optimizations off (each
DequantizeLinear, float Conv and QuantizeLinear as the graph spells them) or integer ops whose
accumulation is exact on every CPU (the MACE reader's uint8 x uint8 ConvInteger).

* :func:`test_integer_graphs_never_run_with_graph_optimizations` watches every onnxruntime
  session int8/uint8 ports open (TFLite with bias correction and ``auto``, TNN, MACE) and fails on
  one that holds Q/DQ or integer ops with optimizations on;
* :func:`test_judging_executor_is_exact_integer_arithmetic` compares the judging executor with
  numpy int32 arithmetic on a model in the saturating regime;
* ``scripts/test_int8_avx2.sh`` (CI) runs the int8 tests under ``qemu-x86_64 -cpu max``, a CPU
  with AVX2 and neither AVX-512 nor VNNI, where :func:`test_the_emulated_cpu_saturates` first
  proves that onnxruntime's fused kernels do saturate there.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

INTEGER_OPS = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger",
               "MatMulInteger", "QLinearAdd", "QLinearMul"}
CHANNELS = 64


def saturating_conv():
    """x (float, 0..6) -> Q (int8, zero point -128) -> DQ -> Conv(DQ(w int8, per channel, +-127)) -> Q -> DQ:
    activations near the top of their range times full-scale weights, so pairs of products
    exceed int16 (2 x 255 x 127 > 32767): what vpmaddubsw saturates."""
    rng = np.random.default_rng(0)
    w = rng.uniform(-1, 1, (CHANNELS, CHANNELS, 3, 3)).astype(np.float32)
    sw = (np.abs(w).reshape(CHANNELS, -1).max(1) / 127).astype(np.float32)
    wq = np.clip(np.round(w / sw[:, None, None, None]), -127, 127).astype(np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["y", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"])]
    inits = {"sx": np.array(6 / 255, np.float32), "zx": np.array(-128, np.int8), "wq": wq, "sw": sw,
             "zw": np.zeros(CHANNELS, np.int8), "sy": np.array(0.5, np.float32), "zy": np.array(0, np.int8)}
    graph = helper.make_graph(nodes, "saturating", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CHANNELS, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, CHANNELS, 8, 8])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = rng.uniform(0, 6, (1, CHANNELS, 8, 8)).astype(np.float32)
    return model, inits, x


def exact(inits, x) -> np.ndarray:
    """The model in integers: int32 accumulation of (x_q - z_x) * w_q, requantized once."""
    xq = np.clip(np.round(x / inits["sx"]) + int(inits["zx"]), -128, 127).astype(np.int32) - int(inits["zx"])
    padded = np.pad(xq, [(0, 0), (0, 0), (1, 1), (1, 1)])
    acc = np.zeros((1, CHANNELS, 8, 8), np.int64)
    w = inits["wq"].astype(np.int64)
    for i in range(3):
        for j in range(3):
            acc += np.einsum("nchw,oc->nohw", padded[:, :, i:i + 8, j:j + 8].astype(np.int64), w[:, :, i, j])
    real = acc * (np.float64(inits["sx"]) * inits["sw"].astype(np.float64)[None, :, None, None])
    yq = np.clip(np.round(real / np.float64(inits["sy"])), -128, 127)
    return (yq * np.float64(inits["sy"])).astype(np.float32)


def _fused(model, x) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_judging_executor_is_exact_integer_arithmetic():
    """The executor every QDQ verdict uses (graph optimizations off) computes the integer
    model: within one step of numpy's int32 arithmetic everywhere, equal almost everywhere
    (the float Conv of dequantized values rounds a product sum that lands on a half step)."""
    from converter.runtimes.onnxruntime import onnx_runner

    model, inits, x = saturating_conv()
    want = exact(inits, x)
    got = onnx_runner(model)({"x": x})["out"]
    step = float(inits["sy"])
    assert np.abs(got - want).max() <= step * 1.001 and np.mean(got == want) >= 0.999


def test_maces_uint8_convinteger_accumulates_exactly():
    """The MACE reader's ConvInteger (uint8 x uint8) at the extremes: 255 x 255 over 9 x 64 taps
    (37 million, past any 16-bit pair sum), exactly numpy's int64 sum, graph optimizations off."""
    from converter.runtimes.onnxruntime import onnx_runner

    rng = np.random.default_rng(1)
    x = rng.integers(200, 256, (1, CHANNELS, 6, 6), dtype=np.uint8)
    w = rng.integers(200, 256, (8, CHANNELS, 3, 3), dtype=np.uint8)
    graph = helper.make_graph([helper.make_node("ConvInteger", ["x", "w"], ["y"])], "ci",
                              [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, CHANNELS, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 8, 4, 4])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    got = onnx_runner(model)({"x": x})["y"]
    want = np.zeros((1, 8, 4, 4), np.int64)
    for i in range(3):
        for j in range(3):
            want += np.einsum("nchw,oc->nohw", x[:, :, i:i + 4, j:j + 4].astype(np.int64), w[:, :, i, j].astype(np.int64))
    assert np.array_equal(got.astype(np.int64), want) and want.max() > 2**24


@pytest.mark.skipif(not os.environ.get("EDGECONV_EXPECT_AVX2_INT8"),
                    reason="run by scripts/test_int8_avx2.sh under qemu-x86_64 -cpu max (no AVX-512, no VNNI)")
def test_the_emulated_cpu_saturates():
    """The premise of the AVX2 run: onnxruntime's fused integer kernels here are the saturating
    ones (so the int8 tests beside this one judge nothing through them)."""
    model, inits, x = saturating_conv()
    fused = _fused(model, x)
    assert np.abs(fused - exact(inits, x)).max() > 10 * float(inits["sy"])


def _sessions_opened(monkeypatch) -> list[tuple[bool, str, str]]:
    """Record (holds integer ops, optimization level, first integer op) for every onnxruntime
    session opened from now on."""
    import onnxruntime as ort

    seen: list[tuple[bool, str, str]] = []
    original = ort.InferenceSession.__init__

    def init(self, source, sess_options=None, *args, **kwargs):
        if isinstance(source, bytes):
            model = onnx.load_from_string(source)
        else:
            model = onnx.load(str(source), load_external_data=False)
        ops = sorted({n.op_type for n in model.graph.node} & INTEGER_OPS)
        level = str(sess_options.graph_optimization_level) if sess_options is not None else "default (ORT_ENABLE_ALL)"
        seen.append((bool(ops), level, ops[0] if ops else ""))
        original(self, source, sess_options, *args, **kwargs)

    monkeypatch.setattr(ort.InferenceSession, "__init__", init)
    return seen


@pytest.mark.parametrize("to, mode, options", [
    ("tflite", "int8", {}), ("tflite", "auto", {}), ("tnn", "int8", {}), ("mace", "uint8", {})])
def test_integer_graphs_never_run_with_graph_optimizations(to, mode, options, monkeypatch, zoo_onnx_path, tmp_path):
    from quant_models import calibration_folder

    from converter.port import port

    data = calibration_folder(tmp_path, calibration=16, held=2)
    seen = _sessions_opened(monkeypatch)
    result = port(str(zoo_onnx_path("resnet")), to=to, out=tmp_path / "out", quantize=mode,
                  calibration=str(data / "calib.npz"), inputs=str(data / "held.npz"), **options)
    assert result.status in ("ok", "unverified"), result.reason
    integer = [(level, op) for holds, level, op in seen if holds]
    assert integer, "no integer session was opened: the watch saw nothing"
    assert all(level.endswith("ORT_DISABLE_ALL") for level, _ in integer), integer
