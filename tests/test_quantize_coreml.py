"""CoreML `--quantize int8-weights`: int8 weights as MIL constexpr_affine_dequantize (fp32 or,
on the Neural Engine, fp16 compute), the saved program executed against the float model."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest

pytest.importorskip("coremltools")

from converter.port import port  # noqa: E402
from converter.targets import get as get_target  # noqa: E402
from converter.targets.base import ExportOptions  # noqa: E402
from converter.targets.coreml.mil_executor import load_program  # noqa: E402
from converter.targets.coreml.quantized import affine_dequantize, quantize_symmetric  # noqa: E402


def _size(path) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def test_int8_weights_as_constexpr_affine_dequantize(zoo_onnx_path, tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "held.npz", input=rng.standard_normal((8, 1, 3, 32, 32)).astype(np.float32))
    out = tmp_path / "out"
    result = port(str(zoo_onnx_path("mobilenetv2")), to="coreml", hw="cpu", out=out, quantize="int8-weights", inputs=str(tmp_path / "held.npz"))
    assert result.status == "ok", result.reason
    judged = result.report["quantization"]["file_verification"]
    assert judged["ok"] and judged["outputs"][0]["sqnr_db"] >= 35.0 and judged["outputs"][0]["top1"] == 1.0
    meta = result.report["artifact"]["meta"]
    assert meta["int8_weights"] == 14 and meta["compute_precision"] == "fp32"
    params = json.loads((out / "quantization.json").read_text())["params"]
    model = onnx.load(str(out / "float.onnx"))
    target = get_target("coreml")
    spec = {"mode": "int8-weights", "params": params}
    ane = target.export(model, tmp_path / "ane", "ane", ExportOptions(name="m", quantization=spec))
    plain = target.export(model, tmp_path / "f", "cpu", ExportOptions(name="m"))
    assert ane.meta["compute_precision"] == "fp16" and ane.meta["int8_weights"] == 14
    for package in (out / "mobilenetv2.mlpackage", tmp_path / "ane" / "m.mlpackage"):
        ops = load_program(package).functions["main"].operations
        dequant = [o for o in ops if o.op_type == "constexpr_affine_dequantize"]
        assert len(dequant) == 14
        for op in dequant:
            q, scale = op.quantized_data.val, np.asarray(op.scale.val)
            assert q.dtype == np.int8 and not np.any(op.zero_point.val)
            assert scale.shape == (q.shape[int(op.axis.val)],)  # one scale per output channel
        # no float weight tensor (2-D or more, 64+ values) is left as a const: biases and scales only
        assert not [o for o in ops if o.op_type == "const" and np.asarray(o.outputs[0].val).ndim >= 2
                    and np.asarray(o.outputs[0].val).size >= 64 and np.asarray(o.outputs[0].val).dtype.kind == "f"]
    assert _size(out / "mobilenetv2.mlpackage") / _size(tmp_path / "f" / "m.mlpackage") <= 0.55
    # the Neural Engine file (fp16 compute, int8 weights) against the float model
    held = np.load(tmp_path / "held.npz")["input"][:4]
    from converter.verify.metrics import sqnr_db
    from converter.runtimes.onnxruntime import onnx_runner

    float_run = onnx_runner(model)
    sqnrs = [sqnr_db(float_run({"input": x})["output"], target.run(ane, {"input": x})["output"]) for x in held]
    assert np.median(sqnrs) >= 35.0
    del plain


def test_affine_dequantize_kernel_matches_the_spec():
    w = np.random.default_rng(1).standard_normal((6, 3, 3, 3)).astype(np.float32)
    q, scale = quantize_symmetric(w, 0)
    got = affine_dequantize(None, {"quantized_data": q, "scale": scale, "zero_point": np.zeros(6, np.int8),
                                   "axis": np.int32(0)})
    np.testing.assert_allclose(got, q.astype(np.float32) * scale.reshape(6, 1, 1, 1))
    assert np.abs(got - w).max() <= scale.max() / 2 + 1e-7
    q1, s1 = quantize_symmetric(w, None)
    assert s1.shape == (1,) and np.abs(q1).max() == 127
