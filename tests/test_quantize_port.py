"""`port --quantize`: quantized.onnx + float.onnx + quantization.json beside the target files,
the quantization section of the report, native int8 TFLite (ok) vs targets without it (unsupported), hardware
that implies quantization, auto decisions, --preprocess code, the batch manifest keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from converter.port import port
from converter.runtimes.onnxruntime import onnx_runner
from quant_models import calibration_folder, heavy_tail_model, photo_like_images

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def calib(tmp_path_factory):
    return calibration_folder(tmp_path_factory.mktemp("calib"), held=16)


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def test_cli_port_int8_writes_qdq_and_float_models(tmp_path, zoo_onnx_path, calib):
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "converter", "port", str(zoo_onnx_path("mobilenetv2")), "--to", "tflite",
                          "--hw", "cpu", "--quantize", "int8", "--calibration", str(calib / "calib.npz"),
                          "--inputs", str(calib / "held.npz"), "-o", str(out)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr + res.stdout
    assert res.stderr == "" and "quantization" in res.stdout and "int8 model within tolerance" in res.stdout
    assert "exported file, run by LiteRT " in res.stdout and ": int8 model within tolerance" in res.stdout
    report = _report(out)
    assert report["status"] == "ok" and report["reason"] == ""
    for name in ("quantized.onnx", "float.onnx", "quantization.json", "mobilenetv2.tflite", "legalized.onnx"):
        assert (out / name).is_file(), name
    assert (out / "float.onnx").read_bytes() == (out / "legalized.onnx").read_bytes()
    quant = report["quantization"]
    assert quant["plan"]["mode"] == "int8" and quant["plan"]["per_channel"] and not quant["plan"]["full_integer"]
    assert quant["native_export"] is True and quant["calibration"]["samples"] == 32
    (output,) = quant["verification"]["outputs"]
    assert output["passed"] and output["sqnr_db"] >= 25.0 and output["top1"] >= 0.95
    assert quant["verification"]["samples"] == 16  # judged on the held-out --inputs
    # the int8 .tflite itself, in LiteRT, on the same held-out inputs
    (native,) = quant["file_verification"]["outputs"]
    assert native["passed"] and native["sqnr_db"] >= 25.0 and native["top1"] >= 0.95
    assert quant["file_verification"]["samples"] == 16
    assert quant["layers"]["rows"] and quant["layers"]["summary"]
    record = json.loads((out / "quantization.json").read_text())
    assert record["params"]["format"] == "edgeconv.quant/1" and record["params"]["weights"]
    qdq = onnx.load(str(out / "quantized.onnx"))
    assert sum(n.op_type == "QuantizeLinear" for n in qdq.graph.node) > 10
    # The float stages are verified as usual; the int8 file is judged by SQNR (above).
    assert report["verification"]["ok"] is True
    assert report["artifact"]["meta"]["int8"]["float_ops"] == []
    assert "Quantization" in (out / "report.html").read_text()


def test_port_is_deterministic(tmp_path, zoo_onnx_path, calib):
    outs = []
    for k in range(2):
        out = tmp_path / f"o{k}"
        port(str(zoo_onnx_path("mobilenetv2")), to="mace", hw="cpu", out=out, quantize="uint8", calibration=str(calib / "calib.npz"), calibration_method="percentile", verify=False)
        outs.append(out)
    for name in ("quantized.onnx", "float.onnx", "quantization.json"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    quant = _report(outs[0])["quantization"]
    assert quant["plan"]["method"] == "percentile" and quant["inputs"][0]["dtype"] == "uint8"


@pytest.mark.parametrize("fw, hw, mode", [("tflite", "edgetpu", "int8"), ("mace", "dsp", "uint8")])
def test_eight_bit_only_hardware_implies_full_integer(fw, hw, mode, tmp_path, zoo_onnx_path, calib):
    out = tmp_path / "out"
    result = port(str(zoo_onnx_path("mobilenetv2")), to=fw, hw=hw, out=out, calibration=str(calib / "calib.npz"), verify=False)
    quant = result.report["quantization"]
    assert quant["plan"]["mode"] == mode and quant["plan"]["full_integer"] and not quant["plan"]["float_allowed"]
    assert quant["plan"]["reason"].startswith(f"{hw} runs only ")
    assert [e["dtype"] for e in quant["inputs"] + quant["outputs"]] == [mode, mode]
    if fw == "tflite":  # native int8 (tests/test_quantize_tflite.py checks the file)
        assert result.status == "ok", result.reason
        assert [m["dtype"] for m in result.report["artifact"]["meta"]["inputs"]] == ["int8"]
    else:  # Hexagon NN nodes (tests/test_quantize_mace_dsp.py; verified, they end unverified)
        assert result.status == "ok", result.reason
        assert result.report["artifact"]["meta"]["uint8"]["hexagon_ops"]["DepthwiseSupernode_8x8p32to8"] == 4


def test_fp16_exports_natively(tmp_path, zoo_onnx_path):
    out = tmp_path / "out"
    result = port(str(zoo_onnx_path("resnet")), to="tflite", hw="gpu", out=out, quantize="fp16")
    assert result.status == "ok", result.reason
    quant = result.report["quantization"]
    assert quant["native_export"] and quant["verification"]["outputs"][0]["sqnr_db"] >= 50.0
    assert result.report["artifact"]["meta"].get("fp16_weights", True)
    quantized = onnx.load(str(out / "quantized.onnx"))
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in quantized.graph.initializer)


def test_auto_keeps_a_layer_in_float_and_reports_it(tmp_path):
    model_path = tmp_path / "heavy.onnx"
    onnx.save(heavy_tail_model(), str(model_path))
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "c.npz", x=rng.standard_normal((32, 1, 3, 8, 8)).astype(np.float32))
    result = port(str(model_path), to="tflite", hw="cpu", out=tmp_path / "out", quantize="auto", calibration=str(tmp_path / "c.npz"), verify=False)
    quant = result.report["quantization"]
    assert quant["plan"]["auto"] and quant["plan"]["mode"] == "int8"
    kept = [d for d in quant["auto_decisions"] if d["kept"]]
    # Normalization renames the nodes: conv_b is conv_1, exp is exp_0.
    assert [(d["layer"], d["choice"]) for d in kept] == [("exp_0", "keep float (with conv_1 reading it)")]
    assert quant["float_nodes"] == ["conv_1", "exp_0"] and quant["verification"]["ok"]
    assert "Mixed precision (auto)" in (tmp_path / "out" / "report.html").read_text()


def test_images_with_preprocess_and_generated_code(tmp_path, zoo_onnx_path):
    from PIL import Image

    images = tmp_path / "images"
    images.mkdir()
    for k, image in enumerate(photo_like_images(20, size=40, seed=3)):
        Image.fromarray(image).save(images / f"{k:02d}.jpg", quality=95)
    spec = "rgb,range=0-1,mean=0.485/0.456/0.406,std=0.229/0.224/0.225,layout=nchw"
    out = tmp_path / "out"
    result = port(str(zoo_onnx_path("mobilenetv2")), to="tflite", hw="nnapi", out=out, quantize="int8", calibration=str(images), preprocess=spec, verify=False)
    quant = result.report["quantization"]
    assert quant["calibration"]["samples"] == 20 and quant["warnings"] == []
    assert quant["preprocess"]["files"] == ["preproc/preprocess.py", "preproc/preprocess.hpp", "preproc/manifest.json"]
    assert quant["preprocess"]["spec"]["resize"] == [32, 32]
    for name in quant["preprocess"]["files"]:
        assert (out / name).is_file()


def test_swapped_calibration_data_is_a_warning(tmp_path, zoo_onnx_path):
    from converter.quantize.preprocess import apply_spec, bind, parse_spec

    spec_text = "rgb,range=0-1,mean=0.485/0.456/0.406,std=0.229/0.224/0.225"
    model = onnx.load(str(zoo_onnx_path("mobilenetv2")))
    spec = bind(parse_spec(spec_text), model)
    bgr = np.stack([apply_spec(spec, image[..., ::-1]) for image in photo_like_images(24, size=32, seed=4)])
    np.savez(tmp_path / "bgr.npz", input=bgr)
    result = port(str(zoo_onnx_path("mobilenetv2")), to="tflite", hw="cpu", out=tmp_path / "out", quantize="int8", calibration=str(tmp_path / "bgr.npz"), preprocess=spec_text, verify=False)
    (warning,) = result.report["quantization"]["warnings"]
    assert warning.startswith(f"--calibration {tmp_path / 'bgr.npz'}: the channel order looks swapped")


def test_quantized_model_below_tolerance_fails_verification(tmp_path, zoo_onnx_path, calib):
    profile = tmp_path / "tol.yaml"
    profile.write_text("min_sqnr_db: 80\n")
    result = port(str(zoo_onnx_path("mobilenetv2")), to="tflite", hw="cpu", out=tmp_path / "out", quantize="int8", calibration=str(calib / "calib.npz"), tolerances=str(profile))
    assert result.status == "verify_failed" and result.exit_code == 4
    assert result.reason.startswith("int8 model: output 'output' SQNR ") and "< 80 dB" in result.reason


def test_batch_manifest_quantization_keys(tmp_path, zoo_onnx_path, calib):
    from converter.batch.manifest import load_manifest
    from converter.errors import BadInput

    model = tmp_path / "mb.onnx"
    model.write_bytes(Path(zoo_onnx_path("mobilenetv2")).read_bytes())
    (tmp_path / "calib.npz").write_bytes((calib / "calib.npz").read_bytes())
    manifest = tmp_path / "release.yaml"
    manifest.write_text("targets:\n  - {to: tflite, hw: edgetpu}\nmodels:\n  - path: mb.onnx\n"
                        "    quantize: int8\n    calibration: calib.npz\n    calibration_method: mse\n"
                        "    per_tensor: true\n    bias_correction: false\n    preprocess: rgb,range=0-1\n")
    (job,) = load_manifest(manifest).jobs
    assert job.entry["calibration"] == str(tmp_path / "calib.npz") and job.entry["per_tensor"] is True
    assert job.entry["bias_correction"] is False
    for bad, message in [("quantize: int4", "models.0.quantize: one of int8, uint8, fp16, int8-weights, auto"),
                         ("calibration: nowhere", "models.0.calibration: nowhere: no such file or directory"),
                         ("calibration_method: kl", "models.0.calibration_method: one of minmax, percentile"),
                         ("bias_correction: maybe", "models.0.bias_correction: true or false"),
                         ("preprocess: rgb,range=2-1", "models.0.preprocess: range needs LOW < HIGH")]:
        manifest.write_text(f"targets:\n  - {{to: tflite, hw: cpu}}\nmodels:\n  - path: mb.onnx\n    {bad}\n")
        with pytest.raises(BadInput) as info:
            load_manifest(manifest)
        assert f"release.yaml:5: {message}" in str(info.value), str(info.value)
    from converter.batch import run_batch

    manifest.write_text("targets:\n  - {to: tflite, hw: edgetpu}\nmodels:\n  - path: mb.onnx\n"
                        "    calibration: calib.npz\n")
    result = run_batch(str(manifest), str(tmp_path / "batch-out"))
    (job_result,) = result.results
    assert job_result.status == "ok", job_result.reason
    assert "quantized.onnx" in job_result.files and "mb.tflite" in job_result.files


def test_quantized_file_runs_like_the_report_says(tmp_path, zoo_onnx_path, calib):
    out = tmp_path / "out"
    port(str(zoo_onnx_path("resnet")), to="tnn", hw="arm", out=out, quantize="int8", calibration=str(calib / "calib.npz"), verify=False)
    held = np.load(calib / "held.npz")["input"]
    float_run, quant_run = onnx_runner(str(out / "float.onnx")), onnx_runner(str(out / "quantized.onnx"))
    from converter.verify.metrics import sqnr_db

    measured = float(np.median([sqnr_db(float_run({"input": x})["output"], quant_run({"input": x})["output"])
                                for x in held[:8]]))
    reported = _report(out)["quantization"]["verification"]["outputs"][0]["sqnr_db"]
    assert abs(measured - reported) < 3.0 and measured >= 25.0


def test_integer_file_refused_by_its_runtime_fails_and_reader_limits_leave_it_unverified(tmp_path):
    from types import SimpleNamespace

    from converter.port.verification import judge_integer_file
    from converter.runtimes import ReaderCannotRun, RuntimeRefused
    from converter.targets import get as get_target

    artifact = SimpleNamespace(runtime="tnn-reader+onnxruntime", hw="arm")
    for error, status in ((RuntimeRefused("tnn_run could not run the file: layer param is not supported"),
                           "verify_failed"), (ReaderCannotRun("no reader for QuantizedFoo"), "unverified")):
        def refuse(target, art, error=error):
            raise error

        quant = SimpleNamespace(evaluate_file=refuse, plan=SimpleNamespace(mode="int8"), file_runtime="",
                                file_verification=None)
        got_status, reason = judge_integer_file(quant, get_target("tnn"), None, artifact)
        assert got_status == status and str(error) in reason
        assert quant.file_runtime.startswith("edgeconv TNN reader") and quant.file_verification is None


@pytest.mark.parametrize("fw, hw, mode, keeps", [("mace", "cpu", "uint8", False), ("tflite", "cpu", "int8", True),
                                                 ("tnn", "arm", "int8", True), ("mace", "gpu", "fp16", True)])
def test_auto_keeps_layers_float_only_where_the_integer_file_can(fw, hw, mode, keeps, tmp_path):
    """MACE's uint8 net is NHWC throughout: a float Conv left in it would read NCHW, so the
    exporter refuses it, and ``auto`` must not choose "keep float" there (it did: the MACE row
    of ``--to all --quantize auto`` ended unsupported)."""
    from converter import targets
    from converter.matrix import load_matrix
    from converter.quantize.modes import QuantRequest
    from converter.quantize.port import plan_for_port

    np.savez(tmp_path / "calib.npz", input=np.zeros((4, 1, 3, 8, 8), np.float32))
    request = QuantRequest(mode="auto", calibration=str(tmp_path / "calib.npz"))
    plan = plan_for_port(request, load_matrix(), fw, hw, None, targets.get(fw))
    assert (plan.mode, plan.auto, plan.float_allowed) == (mode, True, keeps)
    assert plan_for_port(request, load_matrix(), fw, hw).float_allowed  # the hardware itself runs float
