"""TNN target: zoo round trip, determinism, fp16 weights, names, errors, and the byte layout of a
model that TNN's own runtime was verified to run (shared/reference/tnn/FORMAT-NOTES.md §3c)."""

from __future__ import annotations

import struct

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.demo import zoo
from converter.errors import BadInput, Unsupported
from converter.targets import base
from converter.targets.tnn import TARGET
from test_tnn_helpers import MAGIC_V2, Bytes, layer_params, layer_tokens, proto_records, single_node_model

from rank_runtimes import real_runtime_fixture  # noqa: E402

#: Every file these tests read back with the reader also runs in TNN's own runtime.
_real_runtime = real_runtime_fixture("tnn")


def _reference(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString()).run(None, feeds)


@pytest.mark.parametrize("name", zoo.NAMES)
def test_zoo_round_trip_matches_onnxruntime(name, zoo_model, tmp_path):
    model = zoo_model(name)
    art = TARGET.export(model, tmp_path, "arm")
    assert [f.name for f in art.files] == ["model.tnnproto", "model.tnnmodel"]
    feeds = zoo.example_inputs(name, seed=3)
    got = TARGET.run(art, feeds)
    assert art.runtime == "tnn-reader+onnxruntime"
    for ref, out in zip(_reference(model, feeds), model.graph.output):
        assert got[out.name].shape == ref.shape
        assert float(np.max(np.abs(got[out.name] - ref))) <= 1e-5
    # ONNX Transpose must appear as Permute (TNN's Transpose layer has no CPU implementation).
    assert "Transpose" not in art.meta["layer_types"]


@pytest.mark.parametrize("name", zoo.NAMES)
def test_every_device_gets_the_same_deterministic_files(name, zoo_model, tmp_path):
    """TNN's files are device-independent (the device is chosen when TNN loads them), and
    re-export is byte-identical."""
    model = zoo_model(name)
    first = TARGET.export(model, tmp_path / "first", "arm")
    expected = [f.read_bytes() for f in first.files]
    for hw in TARGET.hardware:
        art = TARGET.export(model, tmp_path / hw, hw)
        assert art.hw == hw
        assert [f.read_bytes() for f in art.files] == expected
    again = TARGET.export(model, tmp_path / "first", "arm")
    assert [f.read_bytes() for f in again.files] == expected
    assert sorted(p.name for p in (tmp_path / "first").iterdir()) == ["model.tnnmodel", "model.tnnproto"]


def test_hardware_matches_the_op_support_matrix():
    try:
        from converter.matrix import load_matrix

        matrix = load_matrix()
    except (ImportError, FileNotFoundError, BadInput):
        pytest.skip("op_support_matrix.yaml / converter.matrix not merged yet")
    assert set(matrix.hardware("tnn")) == set(TARGET.hardware)


def test_hand_verified_example_byte_for_byte(tmp_path):
    """FORMAT-NOTES.md §3c: a conv -> relu -> add(const) model that TNN ran (1.9e-6 error)."""
    rng = np.random.default_rng(0)
    w, b, k = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3, 3, 3), (4,), (1, 4, 1, 1)))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("Add", ["r", "k"], ["output"], name="add")],
        "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(v, n) for v, n in ((w, "w"), (b, "b"), (k, "k"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    art = TARGET.export(model, tmp_path, "arm")
    records = proto_records(art.files[0].read_text())
    assert records[0] == "1 4 1 4206624772"
    assert records[1] == "input 4 1 3 8 8 0"
    assert set(records[2].split()) == {"input", "c", "r", "output"}
    assert records[3:5] == ["output", "3"]
    assert records[5:8] == ["Convolution conv 1 1 input c 1 3 4 3 3 1 1 1 1 1 -1 1 1 0", "ReLU relu 1 1 c r",
                            "Add add 1 1 r output 1"]

    def s(text):
        return struct.pack("<i", len(text)) + text.encode()

    def raw(a):
        return struct.pack("<Iii", MAGIC_V2, 0, a.nbytes) + struct.pack("<i", a.ndim) + \
            struct.pack(f"<{a.ndim}i", *a.shape) + a.tobytes()

    expected = (struct.pack("<Ii", MAGIC_V2, 2) + struct.pack("<i", 1) + s("Convolution") + s("conv") + s("conv")
                + struct.pack("<i", 1) + raw(w) + raw(b) + struct.pack("<i", 38) + s("Add") + s("add") + raw(k))
    assert art.files[1].read_bytes() == expected


def test_fp16_weights_store_half_filters(zoo_model, tmp_path):
    model = zoo_model("resnet")
    full = TARGET.export(model, tmp_path / "fp32", "arm")
    half = TARGET.export(model, tmp_path / "fp16", "arm", base.ExportOptions(fp16_weights=True))
    data_type = _first_conv_filter_type(half.files[1].read_bytes())
    assert data_type == 1 and _first_conv_filter_type(full.files[1].read_bytes()) == 0
    assert half.files[1].stat().st_size < 0.6 * full.files[1].stat().st_size
    feeds = zoo.example_inputs("resnet")
    ref = _reference(model, feeds)[0]
    err = float(np.max(np.abs(TARGET.run(half, feeds)["output"] - ref)))
    assert 0 < err <= 2e-2 * float(np.max(np.abs(ref)))


def _first_conv_filter_type(blob: bytes) -> int:
    data = Bytes(blob)
    data.u32()
    data.i32()
    assert data.i32() == 1 and data.string() == "Convolution"
    data.string()  # layer name (header)
    data.string()  # layer name (conv_layer_interpreter.cc InterpretResource)
    data.i32()  # has_bias
    return data.raw()[0]


def test_forbidden_characters_in_names_are_sanitized_deterministically(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["in put"], ["a,b"], name='first "relu"'),
         helper.make_node("Sigmoid", ["a,b"], ["a_b"], name="second:sig"),
         helper.make_node("Add", ["a_b", "a,b"], ["out:1"], name="add node")],
        "g", [helper.make_tensor_value_info("in put", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("out:1", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    art = TARGET.export(model, tmp_path / "one", "x86")
    text = art.files[0].read_text()
    tokens = layer_tokens(text)
    assert [t[:4 + int(t[2]) + int(t[3])] for t in tokens] == [
        ["ReLU", "first__relu_", "1", "1", "in_put", "a_b"],
        ["Sigmoid", "second_sig", "1", "1", "a_b", "a_b_1"],
        ["Add", "add_node", "2", "1", "a_b_1", "a_b", "out_1"],
    ]
    assert proto_records(text)[1] == "in_put 2 2 3 0"
    assert TARGET.export(model, tmp_path / "two", "x86").files[0].read_text() == text
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    out = TARGET.run(art, {"in put": x})["out:1"]
    relu = np.maximum(x, 0)
    assert np.allclose(out, relu + 1 / (1 + np.exp(-relu)), atol=1e-6)


def test_conv_without_stride_or_dilation_attributes_writes_every_field(tmp_path):
    """onnx2tnn omits absent strides/dilations and shifts every later field; edgeconv writes all 14."""
    model = single_node_model("Conv", {"x": (1, 2, 6, 7)}, dict(kernel_shape=[3, 1]), {"w": np.ones((5, 2, 3, 1), np.float32)})
    art = TARGET.export(model, tmp_path, "arm")
    (tokens,) = layer_tokens(art.files[0].read_text())
    assert layer_params(tokens) == "1 2 5 3 1 1 1 0 0 0 -1 1 1 0".split()


def test_uneven_conv_pads_are_not_turned_into_same_upper(tmp_path):
    """pads begin < end: onnx2tnn writes pad_type 0 (SAME_UPPER); edgeconv pads explicitly and the
    result matches ONNX."""
    rng = np.random.default_rng(1)
    model = single_node_model("Conv", {"x": (1, 2, 7, 7)}, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 2, 2]),
                              {"w": rng.standard_normal((3, 2, 3, 3)).astype(np.float32)})
    art = TARGET.export(model, tmp_path, "arm")
    pad, conv = layer_tokens(art.files[0].read_text())
    assert pad[0] == "Pad" and conv[0] == "Convolution" and layer_params(conv)[10] == "-1"
    x = rng.standard_normal((1, 2, 7, 7)).astype(np.float32)
    assert np.max(np.abs(TARGET.run(art, {"x": x})["y0"] - _reference(model, {"x": x})[0])) <= 1e-5


def test_layer_norm_scale_and_bias_are_constant_map_blobs(tmp_path):
    rng = np.random.default_rng(2)
    model = single_node_model("LayerNormalization", {"x": (2, 5)}, None,
                              {"g": rng.standard_normal(5).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)})
    art = TARGET.export(model, tmp_path, "arm")
    (tokens,) = layer_tokens(art.files[0].read_text())
    data = Bytes(art.files[1].read_bytes())
    assert data.u32() == MAGIC_V2 and data.i32() == 0  # no layer resource block
    assert data.u32() == MAGIC_V2 and data.i32() == 2  # constant map
    entries = {}
    for _ in range(2):
        key = data.string()
        entries[key] = data.raw()
    assert set(entries) == set(tokens[5:7])
    assert all(dt == 0 and dims == [5] for dt, dims, _ in entries.values())
    assert data.pos == len(data.data)


def test_unknown_op_is_unsupported_and_writes_nothing(tmp_path):
    # Hardmax has no TNN layer type (source/tnn/core/layer_type.cc).
    model = single_node_model("Hardmax", {"a": (2, 3)}, dict(axis=1))
    with pytest.raises(Unsupported, match=r"node 'hardmax_node' \(Hardmax\): no TNN layer type"):
        TARGET.export(model, tmp_path / "out", "arm")
    assert not any((tmp_path / "out").rglob("*.tnn*"))


def test_bad_device_and_dynamic_shapes_are_bad_input(tmp_path):
    model = single_node_model("Relu", {"x": (2, 3)})
    with pytest.raises(BadInput, match="unknown TNN hardware 'tpu'"):
        TARGET.export(model, tmp_path, "tpu")
    dynamic = single_node_model("Relu", {"x": ("n", 3)})
    with pytest.raises(BadInput, match="static shapes"):
        TARGET.export(dynamic, tmp_path, "arm")
    assert not list(tmp_path.glob("*.tnn*"))


def test_deconv_output_padding_is_exact_where_tnn_pad_type_3_would_shift(tmp_path):
    """superres's 9x9 stride-3 ConvTranspose (pads 4, output_padding 2): TNN's pad_type 3 crops
    ceil((9-3)/2) = 3 in front (deconv_layer.cc), ONNX crops 4.  edgeconv's Deconvolution +
    StridedSliceV2 gives ONNX's values; reading the same layer as pad_type 3 does not."""
    rng = np.random.default_rng(5)
    model = single_node_model("ConvTranspose", {"x": (1, 2, 4, 4)},
                              dict(kernel_shape=[9, 9], strides=[3, 3], pads=[4, 4, 4, 4], output_padding=[2, 2]),
                              {"w": rng.standard_normal((2, 1, 9, 9)).astype(np.float32)})
    art = TARGET.export(model, tmp_path, "arm")
    deconv, crop = layer_tokens(art.files[0].read_text())
    assert layer_params(deconv)[10] == "-1" and crop[0] == "StridedSliceV2"
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    ref = _reference(model, {"x": x})[0]
    assert np.max(np.abs(TARGET.run(art, {"x": x})["y0"] - ref)) <= 1e-5
    # The same deconvolution written the onnx2tnn way (pad_type 3, no crop) is off by a pixel.
    text = art.files[0].read_text().splitlines()
    params = layer_params(deconv)
    params[7:9], params[10] = ["0", "0"], "3"
    head = deconv[:4] + [deconv[4], "y0"]
    text = text[:4] + ['" 1 ,"', '"' + " ".join(head + params) + ' ,"']
    art.files[0].write_text("\n".join(text) + "\n")
    shifted = TARGET.run(art, {"x": x})["y0"]
    assert shifted.shape == ref.shape and np.max(np.abs(shifted - ref)) > 1e-2
