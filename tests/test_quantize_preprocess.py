"""The --preprocess spec: parsing, binding to a model, folding (exact), generated Python/C++,
image decoding, and the input checks (range, swapped channel order)."""

from __future__ import annotations

import numpy as np
import pytest

from converter.errors import BadInput
from converter.quantize.input_checks import check_inputs
from converter.quantize.preprocess import PreprocessSpec, apply_spec, bind, decode_image, parse_spec
from converter.quantize.preprocess_code import generate_preprocess_code
from converter.quantize.preprocess_fold import fold_preprocess
from converter.quantize.preprocess_graph import spec_model
from converter.runtimes.onnxruntime import run_session, session
from quant_models import photo_like_images, unpadded_conv_model
from test_postproc_harness import build_harness, needs_gxx, run_cpp

IMAGENET = "rgb,range=0-1,mean=0.485/0.456/0.406,std=0.229/0.224/0.225,layout=nchw"


def test_parse_inline_and_yaml(tmp_path):
    spec = parse_spec("bgr, resize=224x160, range=-1-1, mean=0.5, std=0.25/0.5/1, layout=nhwc, input=img")
    assert spec == PreprocessSpec(order="bgr", resize=(224, 160), value_range=(-1.0, 1.0), mean=(0.5,),
                                  std=(0.25, 0.5, 1.0), layout="nhwc", input="img")
    assert parse_spec("range=0-255").value_range == (0.0, 255.0)
    yaml_file = tmp_path / "spec.yaml"
    yaml_file.write_text("order: rgb\nresize: [32, 32]\nrange: [0, 1]\nmean: [0.485, 0.456, 0.406]\n"
                         "std: [0.229, 0.224, 0.225]\nlayout: nchw\n")
    assert parse_spec(str(yaml_file)) == parse_spec(IMAGENET + ",resize=32x32")


@pytest.mark.parametrize("text, message", [
    ("", "empty spec"),
    ("rgb,rgb", "'order' given twice"),
    ("hsv", "'hsv' is not an item"),
    ("rgb,size=3", "unknown key(s) size"),
    ("rgb,mean=0.1/0.2", "mean has 2 values; rgb has 3 channel(s)"),
    ("rgb,std=0/1/1", "std values must be > 0"),
    ("range=1-0", "range needs LOW < HIGH"),
    ("range=abc", "range must be LOW-HIGH"),
    ("resize=224", "resize must be HEIGHTxWIDTH"),
    ("layout=chw", "layout 'chw' is not one of nchw, nhwc"),
    ("missing.yaml", "no such file"),
])
def test_parse_errors_are_one_line(text, message):
    with pytest.raises(BadInput, match=None) as info:
        parse_spec(text)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_bind_refuses_a_spec_that_contradicts_the_input(zoo_model):
    model = zoo_model("mobilenetv2")  # input [1, 3, 32, 32]
    assert bind(parse_spec(IMAGENET), model).resize == (32, 32)
    for text, message in [(IMAGENET + ",resize=224x224", "resize=224x224 contradicts input 'input'"),
                          ("rgb,layout=nhwc", "3 channel(s) on axis 3"),
                          ("gray", "1 channel(s) on axis 1"),
                          ("rgb,input=nope", "input 'nope' is not a 4-D float input")]:
        with pytest.raises(BadInput) as info:
            bind(parse_spec(text), model)
        assert message in str(info.value), str(info.value)


@pytest.mark.parametrize("text", [IMAGENET, "bgr,range=-1-1,layout=nchw", "gray,range=0-255,mean=128,std=64"])
def test_spec_graph_matches_reference(text, zoo_model):
    model = zoo_model("mobilenetv2") if not text.startswith("gray") else zoo_model("superres")
    spec = bind(parse_spec(text), model)
    h, w = spec.resize
    image = np.random.default_rng(0).integers(0, 256, (h, w, spec.channels)).astype(np.uint8)
    ref = apply_spec(spec, image)
    got = run_session(session(spec_model(spec)), {"image": image})[spec.input]
    assert got.shape == ref.shape == spec.input_shape
    assert float(np.max(np.abs(got - ref))) == 0.0


@needs_gxx
def test_generated_python_and_cpp_match_reference(tmp_path, zoo_model):
    cases, specs = {}, {}
    for k, (text, name) in enumerate([(IMAGENET, "mobilenetv2"), ("bgr,range=-1-1", "resnet")]):
        spec = bind(parse_spec(text), zoo_model(name))
        code = generate_preprocess_code(spec, tmp_path / f"pre{k}", title=name)
        header = tmp_path / f"pre{k}" / "preprocess.hpp"
        text_hpp = header.read_text().replace("namespace edgeconv_preproc", f"namespace edgeconv_preproc{k}")
        header.write_text(text_hpp.replace("}  // namespace edgeconv_preproc", f"}}  // namespace edgeconv_preproc{k}"))
        cases[f"case{k}"] = (header, {**code.manifest, "cpp_namespace": f"edgeconv_preproc{k}"})
        specs[f"case{k}"] = (spec, code)
        assert sorted(p.name for p in (tmp_path / f"pre{k}").iterdir()) == ["manifest.json", "preprocess.hpp",
                                                                          "preprocess.py"]
    exe = build_harness(cases, tmp_path)
    rng = np.random.default_rng(1)
    for case, (spec, code) in specs.items():
        image = rng.integers(0, 256, (*spec.resize, 3)).astype(np.uint8)
        ref = apply_spec(spec, image)
        py = code.preprocess(image)[spec.input]
        cpp = run_cpp(exe, case, cases[case][1], {"image": image}, tmp_path / case)[spec.input]
        assert py.dtype == cpp.dtype == np.float32
        assert float(np.max(np.abs(py - ref))) == 0.0
        assert float(np.max(np.abs(cpp - ref))) <= 1e-6


def test_generated_code_is_deterministic(tmp_path, zoo_model):
    spec = bind(parse_spec(IMAGENET), zoo_model("mobilenetv2"))
    a = generate_preprocess_code(spec, tmp_path / "a").files
    b = generate_preprocess_code(spec, tmp_path / "b").files
    assert a == b and "def preprocess(inputs: dict) -> dict:" in a["preprocess.py"]
    assert "inline Outputs preprocess(const Inputs& in)" in a["preprocess.hpp"]


def _fold_error(model, spec, seed=0, count=4) -> float:
    folded = fold_preprocess(model, spec)
    rng = np.random.default_rng(seed)
    worst = 0.0
    original, candidate = session(model), session(folded.model)
    for _ in range(count):
        image = rng.integers(0, 256, (*spec.resize, spec.channels)).astype(np.uint8)
        ref = run_session(original, {spec.input: apply_spec(spec, image)})
        raw = image.astype(np.float32)
        raw = raw.transpose(2, 0, 1)[None] if spec.layout == "nchw" else raw[None]
        got = run_session(candidate, {spec.input: raw})
        worst = max(worst, max(float(np.max(np.abs(ref[k] - got[k]))) for k in ref))
    return worst, folded


@pytest.mark.parametrize("text", [IMAGENET, "bgr,range=-1-1,mean=0.1/0.2/0.3,std=0.5/0.6/0.7"])
def test_fold_into_padded_first_conv_is_exact(text, zoo_model):
    model = zoo_model("resnet")  # stem Conv pads 1: scale and order into the weights, shift as an Add
    error, folded = _fold_error(model, bind(parse_spec(text), model))
    assert folded.how == "conv+add" and error <= 1e-5, error
    assert [n.op_type for n in folded.model.graph.node][:2] == ["Add", "Conv"]
    assert len(folded.model.graph.node) == len(model.graph.node) + 1


def test_fold_into_unpadded_conv_weights_and_bias():
    model = unpadded_conv_model()
    spec = bind(parse_spec("bgr,range=0-1,mean=0.485/0.456/0.406,std=0.229/0.224/0.225"), model)
    error, folded = _fold_error(model, spec)
    assert folded.how == "conv" and error <= 1e-5, error
    assert [n.op_type for n in folded.model.graph.node] == [n.op_type for n in model.graph.node]


def test_fold_explicit_when_no_conv_consumes_the_input(zoo_model):
    model = zoo_model("normalized_input")  # the input goes to a Sub first
    spec = bind(parse_spec("bgr,range=0-1,mean=0.5,std=0.25"), model)
    error, folded = _fold_error(model, spec)
    assert folded.how == "explicit" and error <= 1e-5, error
    assert [n.op_type for n in folded.model.graph.node][:3] == ["Gather", "Mul", "Add"]


def test_decode_images_with_pillow(tmp_path, zoo_model):
    from PIL import Image

    spec = bind(parse_spec(IMAGENET), zoo_model("mobilenetv2"))
    rgb = photo_like_images(1, size=48)[0]
    Image.fromarray(rgb).save(tmp_path / "a.png")
    decoded = decode_image(tmp_path / "a.png", spec)
    expected = np.asarray(Image.fromarray(rgb).resize((32, 32), Image.BILINEAR))
    assert decoded.shape == (32, 32, 3) and np.array_equal(decoded, expected)
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(BadInput, match="bad.png: not a decodable image"):
        decode_image(tmp_path / "bad.png", spec)


def _as_samples(spec, images):
    return [{spec.input: apply_spec(spec, image)} for image in images]


def test_swapped_channel_order_is_detected(zoo_model):
    spec = bind(parse_spec(IMAGENET), zoo_model("mobilenetv2"))
    images = photo_like_images(32, size=32, seed=2)
    assert check_inputs(_as_samples(spec, images), spec) == []
    findings = check_inputs(_as_samples(spec, images[..., ::-1]), spec, "--calibration c.npz")
    assert len(findings) == 1 and "channel order looks swapped" in findings[0], findings
    assert findings[0].startswith("--calibration c.npz: ")
    # Grey data carries no colour signal: no finding either way.
    grey = np.repeat(images.mean(axis=3, keepdims=True).astype(np.uint8), 3, axis=3)
    assert check_inputs(_as_samples(spec, grey), spec) == []
    # A spec that says bgr is not second-guessed.
    bgr = bind(parse_spec(IMAGENET.replace("rgb", "bgr")), zoo_model("mobilenetv2"))
    assert check_inputs(_as_samples(bgr, images), bgr) == []


def test_range_mismatches_are_detected(zoo_model):
    spec = bind(parse_spec(IMAGENET), zoo_model("mobilenetv2"))
    images = photo_like_images(8, size=32)
    wrong_norm = [{spec.input: (image.transpose(2, 0, 1)[None].astype(np.float32) - 127.5) / 10.0} for image in images]
    findings = check_inputs(wrong_norm, spec)
    assert len(findings) == 1 and "outside the spec's range 0..1" in findings[0]
    raw = bind(parse_spec("rgb,range=0-255"), zoo_model("mobilenetv2"))
    scaled_twice = [{spec.input: image.transpose(2, 0, 1)[None].astype(np.float32) / 255.0} for image in images]
    findings = check_inputs(scaled_twice, raw)
    assert len(findings) == 1 and "scaled twice" in findings[0]


def test_verify_command_warns_about_swapped_inputs(tmp_path, zoo_onnx_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    import onnx

    model = onnx.load(str(zoo_onnx_path("mobilenetv2")))
    spec = bind(parse_spec(IMAGENET), model)
    np.savez(tmp_path / "bgr.npz", input=np.stack([apply_spec(spec, image[..., ::-1])
                                                   for image in photo_like_images(16, size=32, seed=5)]))
    path = str(zoo_onnx_path("mobilenetv2"))
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run([sys.executable, "-m", "converter", "verify", path, path, "--inputs", str(tmp_path / "bgr.npz"),
                          "--preprocess", IMAGENET], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert res.returncode == 0, res.stderr
    (line,) = res.stderr.splitlines()
    assert line.startswith(f"edgeconv: warning: --inputs {tmp_path / 'bgr.npz'}: the channel order looks swapped")
