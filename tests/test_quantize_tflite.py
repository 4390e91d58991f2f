"""Native int8 TFLite (`port --quantize int8`, `--hw edgetpu`): what the flatbuffer holds and
what LiteRT computes with it, against the float model.

Every file here is run by LiteRT (ai-edge-litert); the flatbuffer is read back with the
schema's own bindings to check tensor types, per-channel parameters, bias scales and op
versions (google-ai-edge/LiteRT@f67457790c, tflite/converter/tools/versioning/op_version.cc)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

pytest.importorskip("ai_edge_litert")

from quant_models import calibration_folder, heavy_tail_model  # noqa: E402

from converter.errors import Unsupported  # noqa: E402
from converter.port import port  # noqa: E402
from converter.targets import get as get_target  # noqa: E402
from converter.targets.base import ExportOptions  # noqa: E402
from converter.targets.tflite._generated import schema_generated as fb  # noqa: E402
from converter.verify.metrics import sqnr_db  # noqa: E402
from converter.runtimes.onnxruntime import onnx_runner  # noqa: E402

#: Least SQNR (dB, median over held-out samples) of an int8 file against the float model.  The
#: QDQ models of these seeded zoo models reach 41-49 dB; LiteRT's integer kernels lose < 1 dB
#: more.  30 dB leaves room for kernel rounding, not for a wrong scale (which costs > 20 dB).
MIN_SQNR_DB = 30.0

OP_CODES = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
TYPES = {v: k for k, v in vars(fb.TensorType).items() if not k.startswith("_")}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return calibration_folder(tmp_path_factory.mktemp("int8data"), held=16)


@pytest.fixture(scope="module")
def ported(zoo_onnx_path, data, tmp_path_factory):
    """``ported(model, hw) -> (PortResult, out dir)``, each port run once per module."""
    cache = {}

    def run(name: str, hw: str):
        if (name, hw) not in cache:
            out = tmp_path_factory.mktemp(f"{name}_{hw}") / "out"
            result = port(str(zoo_onnx_path(name)), to="tflite", hw=hw, out=out, quantize="int8" if hw != "edgetpu" else None, calibration=str(data / "calib.npz"), inputs=str(data / "held.npz"))
            cache[name, hw] = (result, out)
        return cache[name, hw]

    return run


def read_model(path: Path):
    return fb.ModelT.InitFromObj(fb.Model.GetRootAs(Path(path).read_bytes(), 0))


def ops_of(model):
    sg = model.subgraphs[0]
    for op in sg.operators:
        code = model.operatorCodes[op.opcodeIndex]
        yield OP_CODES[code.builtinCode], code.version, op, sg.tensors


def tflite_file(out: Path) -> Path:
    (path,) = out.glob("*.tflite")
    return path


@pytest.mark.parametrize("name, versions", [
    ("mobilenetv2", {"CONV_2D": 3, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 4, "ADD": 2, "MEAN": 2, "PAD": 2,
                     "RESHAPE": 1, "QUANTIZE": 1, "DEQUANTIZE": 2}),
    ("resnet", {"CONV_2D": 3, "FULLY_CONNECTED": 4, "ADD": 2, "MEAN": 2, "PAD": 2, "PADV2": 2, "MAX_POOL_2D": 2,
                "RESHAPE": 1, "QUANTIZE": 1, "DEQUANTIZE": 2}),
    ("unet", {"CONV_2D": 3, "TRANSPOSE_CONV": 3, "CONCATENATION": 2, "MAX_POOL_2D": 2, "QUANTIZE": 1,
              "DEQUANTIZE": 2}),
])
def test_int8_file_structure_and_accuracy_in_litert(name, versions, ported, data):
    result, out = ported(name, "cpu")
    assert result.status == "ok", result.reason
    model = read_model(tflite_file(out))
    found = {}
    weights = biases = 0
    for op_name, version, op, tensors in ops_of(model):
        found.setdefault(op_name, set()).add(version)
        if op_name in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV"):
            x_in, w_in, b_in = (2, 1, 3) if op_name == "TRANSPOSE_CONV" else (0, 1, 2)
            x, w, b = (tensors[op.inputs[k]] for k in (x_in, w_in, b_in))
            y = tensors[op.outputs[0]]
            axis = 3 if op_name == "DEPTHWISE_CONV_2D" else 0
            channels = w.shape[axis]
            assert TYPES[w.type] == "INT8" and TYPES[b.type] == "INT32", op_name
            assert TYPES[x.type] == TYPES[y.type] == "INT8", op_name
            # per-channel, symmetric weights: one scale per output channel, zero points 0
            assert len(w.quantization.scale) == channels and w.quantization.quantizedDimension == axis
            assert not np.any(w.quantization.zeroPoint)
            raw = np.frombuffer(bytes(model.buffers[w.buffer].data), np.int8)
            assert raw.min() >= -127 and raw.max() <= 127 and np.abs(raw).max() == 127
            # bias scale = input scale * weight scale, per channel
            np.testing.assert_allclose(b.quantization.scale, np.asarray(w.quantization.scale) * x.quantization.scale[0],
                                       rtol=1e-6)
            assert len(b.quantization.scale) == channels and not np.any(b.quantization.zeroPoint)
            weights, biases = weights + 1, biases + 1
    assert weights >= 5 and biases == weights
    assert found == {k: {v} for k, v in versions.items()}
    # QUANTIZE / DEQUANTIZE only at the edges: one each (float32 interface), nothing float inside
    sg = model.subgraphs[0]
    assert [TYPES[sg.tensors[i].type] for i in list(sg.inputs) + list(sg.outputs)] == ["FLOAT32", "FLOAT32"]
    float_tensors = [t.name.decode() for t in sg.tensors if TYPES[t.type] == "FLOAT32"]
    assert len(float_tensors) == 2, float_tensors
    meta = result.report["artifact"]["meta"]["int8"]
    assert meta["float_ops"] == [] and meta["quantize_ops"] == 1 and meta["dequantize_ops"] == 1
    # LiteRT, held-out inputs: SQNR / top-1 against the float model, as the report says
    (judged,) = result.report["quantization"]["file_verification"]["outputs"]
    assert judged["passed"] and judged["sqnr_db"] >= MIN_SQNR_DB
    target, artifact = get_target("tflite"), None
    float_run = onnx_runner(str(out / "float.onnx"))
    held = np.load(data / "held.npz")["input"]
    from converter.targets.base import Artifact

    artifact = Artifact("tflite", "cpu", [tflite_file(out)], out, result.report["artifact"]["meta"], "litert")
    measured = [sqnr_db(float_run({"input": x})["output"], target.run(artifact, {"input": x})["output"])
                for x in held[:8]]
    assert np.median(measured) >= MIN_SQNR_DB
    assert abs(float(np.median(measured)) - judged["sqnr_db"]) < 3.0
    if name == "mobilenetv2":
        assert judged["top1"] >= 0.95 and judged["top5"] == 1.0


def test_int8_file_is_smaller_and_reexport_is_byte_identical(ported, tmp_path):
    _, out = ported("mobilenetv2", "cpu")
    params = json.loads((out / "quantization.json").read_text())["params"]
    target = get_target("tflite")
    from converter.quantize.bias_correction import with_corrected_biases

    # the file's biases are the bias-corrected ones the QDQ model holds (float.onnx is the reference)
    model = with_corrected_biases(onnx.load(str(out / "float.onnx")), onnx.load(str(out / "quantized.onnx")))
    assert params["bias_correction"]["applied"] is True
    spec = {"mode": "int8", "params": params, "full_integer": False}
    first = target.export(model, tmp_path / "a", "cpu", ExportOptions(name="m", quantization=spec))
    second = target.export(model, tmp_path / "b", "cpu", ExportOptions(name="m", quantization=spec))
    assert first.files[0].read_bytes() == second.files[0].read_bytes()
    assert first.files[0].read_bytes() == tflite_file(out).read_bytes()
    plain = target.export(model, tmp_path / "f", "cpu", ExportOptions(name="m"))
    # int8 weights and int32 biases: about a quarter of the float buffers.  (The whole file of this
    # 32x32 test model is ~0.56x: per-channel scales and int64 zero points of tiny layers weigh as
    # much as their weights; benchmarks/bench_tflite_int8.py measures the MobileNetV2-size ratio.)
    def buffer_bytes(path):
        return sum(len(b.data) for b in read_model(path).buffers if b.data is not None)

    assert buffer_bytes(first.files[0]) / buffer_bytes(plain.files[0]) <= 0.3


@pytest.mark.parametrize("name", ["mobilenetv2", "detector"])
def test_edgetpu_is_full_integer_with_int8_io(name, ported, data):
    result, out = ported(name, "edgetpu")
    assert result.status == "ok", result.reason
    quant = result.report["quantization"]
    assert quant["plan"]["full_integer"] and quant["file_verification"]["ok"]
    assert all(o["sqnr_db"] >= MIN_SQNR_DB for o in quant["file_verification"]["outputs"])
    model = read_model(tflite_file(out))
    sg = model.subgraphs[0]
    io = [sg.tensors[i] for i in list(sg.inputs) + list(sg.outputs)]
    assert {TYPES[t.type] for t in io} == {"INT8"} and all(len(t.quantization.scale) == 1 for t in io)
    assert all(-1 not in t.shape and not t.shapeSignature for t in sg.tensors)  # static shapes
    # nothing float in the file: no QUANTIZE from / DEQUANTIZE to float32, no float tensor
    assert not [t.name for t in sg.tensors if TYPES[t.type] in ("FLOAT32", "FLOAT16")]
    names = {op_name for op_name, *_ in ops_of(model)}
    assert "DEQUANTIZE" not in names
    if name == "detector":
        # LOGISTIC's int8 kernel needs output scale 1/256, zero point -128 (SigmoidPrepare)
        (logistic,) = [(op, t) for n, _, op, t in ops_of(model) if n == "LOGISTIC"]
        q = logistic[1][logistic[0].outputs[0]].quantization
        assert q.scale == [1.0 / 256] and q.zeroPoint == [-128]
        # the Sub the QDQ model left float runs in int8 with its calibrated range
        assert "SUB" in names and result.report["artifact"]["meta"]["int8"]["float_ops"] == []
    meta_io = result.report["artifact"]["meta"]["inputs"] + result.report["artifact"]["meta"]["outputs"]
    assert {m["dtype"] for m in meta_io} == {"int8"} and all(m["quantization"]["scale"] for m in meta_io)


def test_op_without_int8_kernel_stays_float_or_is_refused(tmp_path):
    model_path = tmp_path / "heavy.onnx"
    onnx.save(heavy_tail_model(), str(model_path))
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "c.npz", x=rng.standard_normal((32, 1, 3, 8, 8)).astype(np.float32))
    out = tmp_path / "out"
    profile = tmp_path / "tol.yaml"
    profile.write_text("min_sqnr_db: 10\n")  # Exp's heavy tail costs the QDQ model itself ~30 dB
    result = port(str(model_path), to="tflite", hw="cpu", out=out, quantize="int8", calibration=str(tmp_path / "c.npz"), tolerances=str(profile))
    assert result.status == "ok", result.reason
    meta = result.report["artifact"]["meta"]
    assert [(f["op"], f["reason"]) for f in meta["int8"]["float_ops"]] == [("EXP", "EXP has no int8 kernel mapping")]
    # the EXP island: DEQUANTIZE before it, QUANTIZE after it (plus the interface pair)
    assert meta["ops"]["DEQUANTIZE"] == 2 and meta["ops"]["QUANTIZE"] == 2 and meta["ops"]["EXP"] == 1
    params = json.loads((out / "quantization.json").read_text())["params"]
    with pytest.raises(Unsupported, match=r"full-integer int8: EXP -> '.*' cannot run in int8: EXP has no int8 kernel"):
        get_target("tflite").export(onnx.load(str(out / "float.onnx")), tmp_path / "fi", "edgetpu", ExportOptions(
            quantization={"mode": "int8", "params": params, "full_integer": True}))
    assert not (tmp_path / "fi").exists() or not list((tmp_path / "fi").iterdir())


def test_int8_op_versions_follow_op_version_cc():
    from converter.targets.tflite.quantized import QParams
    from converter.targets.tflite.versions_int8 import quantized_version
    from converter.targets.tflite.writer import Op, Tensor

    def t(dtype, shape=(1, 4, 4, 8), scale=0.1):
        return Tensor("t", shape, np.dtype(dtype), quant=QParams.of([scale], [0]) if dtype != np.float32 else None)

    tensors = [t(np.int8, scale=0.5), t(np.int8, scale=0.5), t(np.int8, scale=0.2), t(np.float32),
               t(np.int8, (1, 2, 1, 4, 4, 8)), t(np.int8, (1, 1, 1, 4, 4, 8))]
    mul = Op("MUL", [0, 1], [2], fb.MulOptionsT(), 0)
    assert quantized_version(mul, tensors) == 3  # 0.5 * 0.5 / 0.2 >= 1
    tensors[2].quant = QParams.of([0.5], [0])
    assert quantized_version(mul, tensors) == 2
    assert quantized_version(Op("DEQUANTIZE", [0], [3]), tensors) == 2
    assert quantized_version(Op("QUANTIZE", [3], [0]), tensors) == 1
    assert quantized_version(Op("SUB", [4, 5], [4], fb.SubOptionsT(), 0), tensors) == 3  # rank-6 broadcast
    assert quantized_version(Op("TRANSPOSE", [4, 3], [4]), tensors) == 6
    with pytest.raises(Unsupported, match="no int8 op version rule for DIV"):
        quantized_version(Op("DIV", [0, 1], [2]), tensors)


def test_int8_weights_is_dynamic_range_with_hybrid_kernels(zoo_onnx_path, data, tmp_path):
    out = tmp_path / "out"
    result = port(str(zoo_onnx_path("mobilenetv2")), to="tflite", hw="cpu", out=out, quantize="int8-weights", inputs=str(data / "held.npz"))
    assert result.status == "ok", result.reason
    (judged,) = result.report["quantization"]["file_verification"]["outputs"]
    assert judged["sqnr_db"] >= 35.0 and judged["top1"] >= 0.95
    model = read_model(tflite_file(out))
    versions = {}
    for op_name, version, op, tensors in ops_of(model):
        versions.setdefault(op_name, set()).add(version)
        if op_name in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            x, w, b = (tensors[i] for i in op.inputs[:3])
            assert (TYPES[x.type], TYPES[w.type], TYPES[b.type]) == ("FLOAT32", "INT8", "FLOAT32")
            assert len(w.quantization.scale) == w.shape[3 if op_name == "DEPTHWISE_CONV_2D" else 0]
    # hybrid per-channel kernels: CONV_2D 5, DEPTHWISE_CONV_2D 6, FULLY_CONNECTED 12 (op_version.cc)
    assert versions["CONV_2D"] == {5} and versions["DEPTHWISE_CONV_2D"] == {6} and versions["FULLY_CONNECTED"] == {12}
    assert "QUANTIZE" not in versions and "DEQUANTIZE" not in versions
    assert result.report["artifact"]["meta"]["int8"]["weights"] == 14


def test_per_channel_fixes_the_squash_in_litert(tmp_path):
    """conv2's channels 4..7 are 1000x smaller: one weight scale rounds their int8 weights to zero
    in the file itself, per-channel scales keep them (the QDQ-level test, here in LiteRT with
    the dynamic-range file, whose activations stay float so the output shows the weights)."""
    from quant_models import gaussian_samples, squash_model

    model_path = tmp_path / "squash.onnx"
    onnx.save(squash_model(), str(model_path))
    held = gaussian_samples((1, 3, 8, 8), 4, 1, "x")
    small = {}
    for per_tensor in (True, False):
        out = tmp_path / f"pt{int(per_tensor)}"
        profile = tmp_path / "tol.yaml"
        profile.write_text("min_sqnr_db: 0\n")
        result = port(str(model_path), to="tflite", hw="cpu", out=out, quantize="int8-weights", per_tensor=per_tensor, tolerances=str(profile))
        assert result.status == "ok", result.reason
        from converter.targets.base import Artifact

        artifact = Artifact("tflite", "cpu", [tflite_file(out)], out, result.report["artifact"]["meta"], "litert")
        float_run = onnx_runner(str(out / "float.onnx"))
        small[per_tensor] = float(np.median([sqnr_db(float_run(x)["y"][:, 4:],
                                                     get_target("tflite").run(artifact, x)["y"][:, 4:]) for x in held]))
    assert small[True] == pytest.approx(0.0, abs=0.01) and small[False] >= 30.0, small


@pytest.mark.parametrize("hw, versions", [
    ("cpu", {"CONV_2D": 3, "DEPTHWISE_CONV_2D": 3, "LEAKY_RELU": 1, "HARD_SWISH": 1, "AVERAGE_POOL_2D": 2,
             "RESIZE_NEAREST_NEIGHBOR": 2, "CONCATENATION": 2, "STRIDED_SLICE": 2, "LOGISTIC": 2, "MUL": 2,
             "MEAN": 2, "SOFTMAX": 2, "QUANTIZE": 1, "DEQUANTIZE": 2}),
    # the Edge TPU column legalizes LeakyRelu/HardSwish/Softmax into MAXIMUM/MINIMUM/MUL/ADD (+ a
    # post-processing Softmax); CONCATENATION and MAXIMUM/MINIMUM inputs are requantized
    ("edgetpu", {"CONV_2D": 3, "DEPTHWISE_CONV_2D": 3, "MAXIMUM": 2, "MINIMUM": 2, "MUL": 2, "ADD": 2,
                 "AVERAGE_POOL_2D": 2, "RESIZE_NEAREST_NEIGHBOR": 2, "CONCATENATION": 2, "STRIDED_SLICE": 2,
                 "LOGISTIC": 2, "QUANTIZE": 1}),
])
def test_int8_kernels_beyond_conv_run_in_litert(hw, versions, tmp_path):
    from quant_models import gaussian_samples, ops_mix_model

    model_path = tmp_path / "mix.onnx"
    onnx.save(ops_mix_model(), str(model_path))
    np.savez(tmp_path / "c.npz", x=np.stack([s["x"] for s in gaussian_samples((1, 3, 16, 16), 32, 0, "x")]))
    out = tmp_path / "out"
    result = port(str(model_path), to="tflite", hw=hw, out=out, quantize="int8", calibration=str(tmp_path / "c.npz"))
    assert result.status == "ok", result.reason
    assert result.report["artifact"]["meta"]["int8"]["float_ops"] == []
    (judged,) = result.report["quantization"]["file_verification"]["outputs"]
    assert judged["sqnr_db"] >= 40.0
    found: dict = {}
    for op_name, version, op, tensors in ops_of(read_model(tflite_file(out))):
        found.setdefault(op_name, set()).add(version)
        if op_name in ("LOGISTIC", "SOFTMAX"):  # SigmoidPrepare / SoftmaxPrepare: 1/256, -128
            q = tensors[op.outputs[0]].quantization
            assert (q.scale[0], q.zeroPoint[0]) == (1.0 / 256, -128)
        if op_name == "CONCATENATION":  # concatenation.cc: every input has the output's parameters
            qs = {(tensors[i].quantization.scale[0], tensors[i].quantization.zeroPoint[0])
                  for i in list(op.inputs) + list(op.outputs)}
            assert len(qs) == 1
    assert found == {k: {v} for k, v in versions.items()}


def test_file_layers_name_a_deliberately_broken_layer(ported, data, tmp_path):
    """The per-layer comparison of the file with its QDQ model: clean on the exported file, and
    it names the op whose weight scales were tampered with (2x) in a copy of the file."""
    import flatbuffers

    from converter.quantize.file_layers import file_layers
    from converter.targets.base import Artifact

    result, out = ported("mobilenetv2", "cpu")
    clean = result.report["quantization"]["file_layers"]
    assert len(clean["rows"]) >= 15 and clean["worst"]["gap_db"] < 3.0
    assert clean["summary"].startswith("the file tracks its QDQ model layer by layer")
    model = read_model(tflite_file(out))
    convs = [(op, t) for n, _, op, t in ops_of(model) if n == "CONV_2D"]
    op, tensors = convs[4]
    weight = tensors[op.inputs[1]]
    weight.quantization.scale = [2.0 * s for s in weight.quantization.scale]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    broken = tmp_path / "broken.tflite"
    broken.write_bytes(bytes(builder.Output()))
    artifact = Artifact("tflite", "cpu", [broken], tmp_path, result.report["artifact"]["meta"], "litert")
    samples = [{"input": x} for x in np.load(data / "held.npz")["input"][:2]]
    table = file_layers(onnx.load(str(out / "float.onnx")), onnx.load(str(out / "quantized.onnx")),
                        get_target("tflite"), artifact, samples)
    broken_name = tensors[op.outputs[0]].name.decode()
    assert table["worst"]["layer_type"] == "CONV_2D" and table["worst"]["gap_db"] > 10.0
    assert table["worst"]["tensor"] == broken_name  # the tampered op's own output, not a later one
    assert table["summary"].startswith(f"the file loses {table['worst']['gap_db']:.1f} dB more than its QDQ model")
