"""--calibration SRC: every accepted form, and every bad input as one line (exit 2, no output)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from converter.errors import BadInput
from converter.quantize.calibration import load_calibration
from converter.quantize.preprocess import apply_spec, bind, decode_image, parse_spec
from quant_models import photo_like_images, squash_model

ROOT = Path(__file__).resolve().parents[1]


def _two_input_model() -> onnx.ModelProto:
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"], name="add")], "two",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _data(count, seed=0):
    return np.random.default_rng(seed).standard_normal((count, 1, 3, 8, 8)).astype(np.float32)


def test_npz_file_with_a_sample_axis(tmp_path):
    data = _data(20)
    np.savez(tmp_path / "c.npz", x=data)
    cal = load_calibration(tmp_path / "c.npz", squash_model())
    assert len(cal.samples) == 20 and cal.warnings == []
    assert np.array_equal(cal.samples[7]["x"], data[7]) and cal.nbytes == data.nbytes
    assert cal.source.endswith("(20 samples)")


def test_directory_of_npy_and_npz_in_name_order(tmp_path):
    data = _data(18)
    for k in range(9):
        np.save(tmp_path / f"s{k:02d}.npy", data[k])          # one sample per file
    np.savez(tmp_path / "t_rest.npz", x=data[9:])            # the other nine in one file
    (tmp_path / "README.txt").write_text("not data")        # ignored
    cal = load_calibration(tmp_path, squash_model())
    assert len(cal.samples) == 18
    assert all(np.array_equal(cal.samples[k]["x"], data[k]) for k in range(18))


def test_directory_of_images_with_a_spec(tmp_path, zoo_model):
    from PIL import Image

    model = zoo_model("mobilenetv2")
    for k, image in enumerate(photo_like_images(17, size=40, seed=1)):
        Image.fromarray(image).save(tmp_path / f"img{k:02d}.png")
    spec = parse_spec("rgb,range=0-1,mean=0.485/0.456/0.406,std=0.229/0.224/0.225")
    cal = load_calibration(tmp_path, model, spec)
    assert len(cal.samples) == 17 and cal.warnings == []
    bound = bind(spec, model)
    expected = apply_spec(bound, decode_image(tmp_path / "img03.png", bound))
    assert np.array_equal(cal.samples[3]["input"], expected) and expected.shape == (1, 3, 32, 32)


def test_fewer_than_16_samples_is_a_warning(tmp_path):
    np.savez(tmp_path / "c.npz", x=_data(5))
    cal = load_calibration(tmp_path / "c.npz", squash_model())
    assert len(cal.samples) == 5
    assert cal.warnings == [f"--calibration {tmp_path / 'c.npz'}: only 5 samples; ranges calibrated on fewer than "
                            "16 rarely cover the data the model will see"]


def _bad_cases(tmp_path: Path):
    """(name, source, model, spec, expected message fragment)."""
    model = squash_model()
    cases = []
    np.savez(tmp_path / "names.npz", input=_data(4))
    cases.append(("names", "names.npz", model, None, "no array for model input(s) x (arrays: input)"))
    np.savez(tmp_path / "shape.npz", x=np.zeros((4, 1, 3, 9, 9), np.float32))
    cases.append(("shape", "shape.npz", model, None, "sample shape [1, 3, 9, 9] does not fit the input shape [1, 3, 8, 8]"))
    nan = _data(4)
    nan[2, 0, 1, 2, 3] = np.nan
    np.savez(tmp_path / "nan.npz", x=nan)
    cases.append(("nan", "nan.npz", model, None, "sample 2 of input 'x' holds NaN or Inf values"))
    inf = _data(4)
    inf[0, 0, 0, 0, 0] = -np.inf
    np.savez(tmp_path / "inf.npz", x=inf)
    cases.append(("inf", "inf.npz", model, None, "sample 0 of input 'x' holds NaN or Inf values"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("nothing here")
    cases.append(("empty", "empty", model, None, "no .npy, .npz or image files in the directory"))
    (tmp_path / "broken").mkdir()
    from PIL import Image

    Image.fromarray(photo_like_images(1)[0]).save(tmp_path / "broken" / "a.png")
    (tmp_path / "broken" / "b.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    cases.append(("undecodable", "broken", "mobilenetv2", "rgb,range=0-1", "b.jpg: not a decodable image"))
    cases.append(("no spec", "broken", "mobilenetv2", None, "a directory of images needs --preprocess SPEC"))
    cases.append(("spec vs shape", "broken", "mobilenetv2", "rgb,resize=224x224",
                  "resize=224x224 contradicts input 'input'"))
    (tmp_path / "mixed").mkdir()
    np.save(tmp_path / "mixed" / "a.npy", _data(1)[0])
    Image.fromarray(photo_like_images(1)[0]).save(tmp_path / "mixed" / "b.png")
    cases.append(("mixed", "mixed", model, None, "mixes arrays (a.npy) and images (b.png)"))
    (tmp_path / "npy2").mkdir()
    np.save(tmp_path / "npy2" / "a.npy", np.zeros((1, 4), np.float32))
    cases.append(("npy for two inputs", "npy2", _two_input_model(), None, "an .npy file cannot say which input"))
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "pickled").mkdir()
    (tmp_path / "obj.npy").rename(tmp_path / "pickled" / "obj.npy")
    cases.append(("pickle", "pickled", model, None, "holds pickled object arrays"))
    (tmp_path / "not.npz").write_bytes(b"plain text")
    cases.append(("not npz", "not.npz", model, None, "not an .npz file"))
    cases.append(("suffix", "names.npy", model, None, "no such file or directory"))
    return cases


def test_every_bad_input_is_one_line(tmp_path, zoo_model):
    for name, source, model, spec, fragment in _bad_cases(tmp_path):
        model = zoo_model(model) if isinstance(model, str) else model
        with pytest.raises(BadInput) as info:
            load_calibration(tmp_path / source, model, parse_spec(spec) if spec else None)
        message = str(info.value)
        assert fragment in message and "\n" not in message, (name, message)
        assert message.startswith("--calibration ") or message.startswith("--preprocess"), (name, message)


def test_memory_limit(tmp_path):
    np.savez(tmp_path / "c.npz", x=_data(64))  # 64 * 768 bytes
    with pytest.raises(BadInput, match="needs 0.00 GiB in memory, over the 0.00 GiB limit; use fewer samples"):
        load_calibration(tmp_path / "c.npz", squash_model(), max_bytes=10_000)
    assert len(load_calibration(tmp_path / "c.npz", squash_model(), max_bytes=100_000).samples) == 64


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "converter", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_cli_bad_calibration_exit_2_one_line_no_output(tmp_path):
    onnx.save(squash_model(), str(tmp_path / "m.onnx"))
    cases = {case[0]: case for case in _bad_cases(tmp_path)}
    for name in ("nan", "empty", "names"):
        out = tmp_path / f"out-{name.replace(' ', '_')}"
        res = _cli("port", "m.onnx", "--to", "tflite", "--hw", "cpu", "--quantize", "int8",
                   "--calibration", cases[name][1], "-o", str(out), cwd=tmp_path)
        assert res.returncode == 2, (name, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("edgeconv: error: --calibration ") and cases[name][4] in lines[0]
        assert not out.exists()
    # 8-bit-only hardware implies full-integer quantization; without data: one line, before any work.
    out = tmp_path / "edgetpu"
    res = _cli("port", "m.onnx", "--to", "tflite", "--hw", "edgetpu", "-o", str(out), cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip() == (
        "edgeconv: error: edgetpu runs only int8/uint8 models: full-integer quantization needs calibration data; "
        "give --calibration SRC (an .npz keyed by input name, a directory of .npy/.npz files, or a directory of "
        "images with --preprocess SPEC)")
    assert not out.exists()
    res = _cli("port", "m.onnx", "--to", "tflite", "--hw", "cpu", "--quantize", "int4", "-o", str(out), cwd=tmp_path)
    assert res.returncode == 2 and "--quantize 'int4': choose one of int8, uint8, fp16, int8-weights, auto" in res.stderr
    res = _cli("port", "m.onnx", "--to", "tflite", "--hw", "gpu", "--quantize", "int8", "--calibration", "nan.npz",
               "-o", str(out), cwd=tmp_path)
    assert res.returncode == 2 and "tflite/gpu runs float16/float32 models, not int8" in res.stderr
    assert not out.exists()


def test_calibration_runs_stop_at_the_time_limit():
    """onnxruntime's calibrator runs the model inside onnxruntime.quantization; its runs obey
    --timeout like every other inference (a model that runs too long is stopped, exit 9)."""
    from onnx import TensorProto, helper, numpy_helper

    from converter.infra import limits as isolate
    from converter.errors import TimedOut
    from converter.quantize.ranges import collect_ranges

    weight = numpy_helper.from_array(np.eye(512, dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", [f"t{i}", "w"], [f"t{i + 1}"], name=f"mm{i}") for i in range(200)]
    graph = helper.make_graph(nodes, "slow", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [512, 512])],
                              [helper.make_tensor_value_info("t200", TensorProto.FLOAT, [512, 512])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    samples = [{"t0": np.ones((512, 512), np.float32)}] * 4
    isolate.set_time_limit(0.01)
    try:
        with pytest.raises(TimedOut, match=r"calibration \(.*onnxruntime\) did not finish within 0\.01 s"):
            collect_ranges(model, samples)
    finally:
        isolate.set_time_limit(None)
    ranges = collect_ranges(model, samples[:1]).data  # unlimited again: every activation calibrated
    assert sorted(ranges) == sorted(f"t{i}" for i in range(201))
