"""Seeded inputs with per-input ranges and .npz calibration data (converter.runtimes.feeds)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from converter.errors import BadInput
from converter.runtimes.feeds import load_npz, parse_range, random_inputs
from converter.verify.replay import npz_bytes


def two_input_model(batch="N") -> onnx.ModelProto:
    """image: float [batch, 3, 4, 4]; ids: int64 [batch, 5]; output = ReduceSum(image) (+ ids cast)."""
    image = helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, 4, 4])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [batch, 5])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("ReduceSum", ["image"], ["s"], keepdims=0),
        helper.make_node("Cast", ["ids"], ["idsf"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["idsf"], ["t"], keepdims=0),
        helper.make_node("Add", ["s", "t"], ["out"]),
    ]
    graph = helper.make_graph(nodes, "two_inputs", [image, ids], [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_random_inputs_are_seeded_ranged_and_typed():
    model = two_input_model(batch=2)
    a = random_inputs(model, seed=3, ranges={"image": (0.0, 1.0), "ids": (5, 9)}, samples=2)
    b = random_inputs(model, seed=3, ranges={"image": (0.0, 1.0), "ids": (5, 9)}, samples=2)
    c = random_inputs(model, seed=4, ranges={"image": (0.0, 1.0)})
    assert len(a) == 2
    for name in ("image", "ids"):
        np.testing.assert_array_equal(a[0][name], b[0][name])
        np.testing.assert_array_equal(a[1][name], b[1][name])
    assert not np.array_equal(a[0]["image"], a[1]["image"])  # samples differ from each other
    assert not np.array_equal(a[0]["image"], c[0]["image"])  # and across seeds
    img, ids = a[0]["image"], a[0]["ids"]
    assert img.dtype == np.float32 and img.shape == (2, 3, 4, 4)
    assert 0.0 <= img.min() < 0.1 and 0.9 < img.max() < 1.0
    assert ids.dtype == np.int64 and set(np.unique(ids)) <= {5, 6, 7, 8}


def test_bare_range_applies_to_every_float_input_and_default_is_minus1_1():
    model = two_input_model(batch=1)
    default = random_inputs(model)[0]["image"]
    assert -1.0 <= default.min() < -0.8 and 0.8 < default.max() <= 1.0
    shifted = random_inputs(model, ranges={"": (10.0, 11.0)})[0]["image"]
    assert 10.0 <= shifted.min() and shifted.max() < 11.0


def test_dynamic_dims_need_a_shape():
    model = two_input_model(batch="N")
    with pytest.raises(BadInput, match=r"input 'image' has a dynamic shape.*--input-shape image=1x3x4x4"):
        random_inputs(model)
    fixed = random_inputs(model, shapes={"image": (2, 3, 4, 4), "ids": (2, 5)})[0]
    assert fixed["image"].shape == (2, 3, 4, 4) and fixed["ids"].shape == (2, 5)
    with pytest.raises(BadInput, match="no model input named 'img'"):
        random_inputs(model, ranges={"img": (0, 1)})


def test_parse_range():
    assert parse_range("image=0:1") == ("image", (0.0, 1.0))
    assert parse_range("-0.5:2.5e1") == ("", (-0.5, 25.0))
    for bad in ("image=1:0", "image=0-1", "image=a:b"):
        with pytest.raises(BadInput, match="--input-range"):
            parse_range(bad)


def test_npz_one_sample_and_several(tmp_path):
    model = two_input_model(batch=1)
    samples = random_inputs(model, seed=1, samples=3)
    path = tmp_path / "three.npz"
    path.write_bytes(npz_bytes(samples))
    loaded = load_npz(path, model)
    assert len(loaded) == 3
    for got, want in zip(loaded, samples):
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
    one = tmp_path / "one.npz"
    np.savez(one, image=samples[0]["image"], ids=samples[0]["ids"])
    loaded = load_npz(one, model)
    assert len(loaded) == 1 and loaded[0]["image"].shape == (1, 3, 4, 4)


def test_npz_casts_float64_but_not_float_to_int(tmp_path):
    model = two_input_model(batch=1)
    path = tmp_path / "f64.npz"
    np.savez(path, image=np.ones((1, 3, 4, 4)), ids=np.zeros((1, 5), np.int32))
    loaded = load_npz(path, model)[0]
    assert loaded["image"].dtype == np.float32 and loaded["ids"].dtype == np.int64
    bad = tmp_path / "ids_float.npz"
    np.savez(bad, image=np.ones((1, 3, 4, 4), np.float32), ids=np.zeros((1, 5), np.float32))
    with pytest.raises(BadInput, match="'ids' is float32, the input wants int64"):
        load_npz(bad, model)


@pytest.mark.parametrize("arrays, message", [
    (dict(image=np.ones((1, 3, 4, 4), np.float32)), r"no array for model input\(s\) ids"),
    (dict(image=np.ones((1, 3, 4, 4), np.float32), ids=np.zeros((1, 5), np.int64), mask=np.ones(2)),
     r"array\(s\) mask match no model input"),
    (dict(image=np.ones((1, 3, 5, 4), np.float32), ids=np.zeros((1, 5), np.int64)),
     r"'image' sample shape \[1, 3, 5, 4\] does not fit"),
    (dict(image=np.ones((3, 4, 4), np.float32), ids=np.zeros((1, 5), np.int64)), r"'image' has shape \[3, 4, 4\]; the input has rank 4"),
    (dict(image=np.ones((2, 1, 3, 4, 4), np.float32), ids=np.zeros((3, 1, 5), np.int64)),
     r"different numbers of samples \(image: 2, ids: 3\)"),
])
def test_npz_problems_are_one_bad_input_line(tmp_path, arrays, message):
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    with pytest.raises(BadInput, match=message) as info:
        load_npz(path, two_input_model(batch=1))
    assert "\n" not in str(info.value)


def test_npz_file_problems(tmp_path):
    model = two_input_model(batch=1)
    with pytest.raises(BadInput, match="no such file"):
        load_npz(tmp_path / "missing.npz", model)
    text = tmp_path / "text.npz"
    text.write_text("not a zip")
    with pytest.raises(BadInput, match="not an .npz file"):
        load_npz(text, model)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, image=np.array([object()], dtype=object), ids=np.zeros((1, 5), np.int64))
    with pytest.raises(BadInput, match="pickled object arrays"):
        load_npz(pickled, model)


def test_npz_bytes_are_deterministic():
    model = two_input_model(batch=1)
    samples = random_inputs(model, seed=2, samples=2)
    assert npz_bytes(samples) == npz_bytes([{k: v.copy() for k, v in s.items()} for s in samples])
